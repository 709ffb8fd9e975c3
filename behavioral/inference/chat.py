"""Prompt formats: a tokenizer's chat template (folding the system text into the user turn where the template must),
or plain text for base models and instruction formats such as "### Instruction: ... ### Answer:"."""

from __future__ import annotations

from dataclasses import replace

from behavioral.inference.prompt import Prompt

SYSTEM = "system"  # the template renders the system message as given
FOLDED = "system-in-user"  # the template rejects or drops a system message: its text opens the user turn
PLAIN = "plain"  # no template: the messages' text joined, the tokenizer's own special tokens added
FORMATS = (SYSTEM, FOLDED, PLAIN)
REQUESTS = ("auto", "chat", "plain")  # what a user asks for; auto is chat where the tokenizer has a template
SEPARATOR = "\n\n"

_PROBE = Prompt(({"role": "system", "content": "You are a careful rater."}, {"role": "user", "content": "Hello."}))


class ChatTemplateError(ValueError):
    """A tokenizer that cannot render prompts in the format asked for."""


def _join(prompt: Prompt, start: int, stop: int, role: str) -> Prompt:
    """Messages start..stop-1 joined into one message of `role` (SEPARATOR between them), slots moved along."""
    offsets, pos = {}, 0
    for i in range(start, stop):
        offsets[i] = pos
        pos += len(prompt.messages[i]["content"]) + len(SEPARATOR)
    merged = {"role": role, "content": SEPARATOR.join(m["content"] for m in prompt.messages[start:stop])}
    messages = (*prompt.messages[:start], merged, *prompt.messages[stop:])

    def moved(slot):
        if slot.message < start:
            return slot
        if slot.message >= stop:
            return replace(slot, message=slot.message - (stop - start - 1))
        shift = offsets[slot.message]
        return replace(slot, message=start, start=slot.start + shift, end=slot.end + shift)

    return Prompt(messages, tuple(moved(s) for s in prompt.slots))


def fold_system(prompt: Prompt) -> Prompt:
    """The prompt with its system text prefixed to the user message after it, slot offsets moved along."""
    if prompt.messages[0]["role"] != "system" or len(prompt.messages) < 2:
        return prompt
    return _join(prompt, 0, 2, "user")


def plain(prompt: Prompt) -> Prompt:
    """The prompt as one text: every message's content joined, slot offsets moved along."""
    return _join(prompt, 0, len(prompt.messages), "text")


def _apply_template(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)


def detect_format(tokenizer, request: str = "auto") -> str:
    """The format prompts are rendered in: `plain` if asked for (or, with `auto`, where the tokenizer has no chat
    template); else `system` where the template renders a system message verbatim, `system-in-user` where not."""
    if request not in REQUESTS:
        raise ChatTemplateError(f"unknown --prompt-format {request!r}; expected one of {', '.join(REQUESTS)}")
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if request == PLAIN or (request == "auto" and not has_template):
        return PLAIN
    if not has_template:
        raise ChatTemplateError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; use --prompt-format plain "
            "for a base model, or an instruction-tuned model whose tokenizer defines one"
        )
    try:
        text = _apply_template(tokenizer, _PROBE.messages)
    except Exception:  # templates signal "no system role" with assorted exception types
        return FOLDED
    return SYSTEM if _PROBE.messages[0]["content"] in text else FOLDED


def render(tokenizer, prompt: Prompt, chat_format: str) -> tuple[str, Prompt]:
    """The text of `prompt` in `chat_format`, and the prompt whose messages that text holds."""
    if chat_format == PLAIN:
        joined = plain(prompt)
        return joined.messages[0]["content"], joined
    if chat_format == FOLDED:
        prompt = fold_system(prompt)
    return _apply_template(tokenizer, prompt.messages), prompt


def encode(tokenizer, prompt: Prompt, chat_format: str) -> list[int]:
    """Token ids of `prompt` rendered in `chat_format`: a chat template writes its own special tokens, plain text
    gets the tokenizer's (a begin-of-text token where the model has one)."""
    text, _ = render(tokenizer, prompt, chat_format)
    return tokenizer(text, add_special_tokens=chat_format == PLAIN).input_ids
