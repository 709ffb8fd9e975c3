"""Chat rendering: apply a tokenizer's template, folding the system prompt into the user turn where it must."""

from __future__ import annotations

from dataclasses import replace

from behavioral.prompts import Prompt, Slot

SYSTEM = "system"
FOLDED = "system-in-user"
FOLD_SEPARATOR = "\n\n"


class ChatTemplateError(ValueError):
    """A tokenizer that cannot render the suite's chat prompts."""


def fold_system(prompt: Prompt) -> Prompt:
    """The prompt with its system text prefixed to the user message, slot offsets moved along."""
    system, user = prompt.messages
    shift = len(system["content"]) + len(FOLD_SEPARATOR)
    content = system["content"] + FOLD_SEPARATOR + user["content"]
    slots = tuple(
        replace(s, message=0, start=s.start + shift * s.message, end=s.end + shift * s.message) for s in prompt.slots
    )
    return Prompt(({"role": "user", "content": content},), slots)


def _render(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)


def detect_format(tokenizer, probe: Prompt) -> str:
    """`system` if the template renders a system message verbatim, else `system-in-user` (the fallback)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ChatTemplateError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
            "expected an instruction-tuned model whose tokenizer defines one"
        )
    try:
        text = _render(tokenizer, probe.messages)
    except Exception:  # templates signal "no system role" with assorted exception types
        return FOLDED
    return SYSTEM if probe.messages[0]["content"] in text else FOLDED


def render(tokenizer, prompt: Prompt, chat_format: str) -> tuple[str, Prompt]:
    """The chat text of `prompt` in `chat_format`, and the prompt whose messages were rendered."""
    if chat_format == FOLDED:
        prompt = fold_system(prompt)
    return _render(tokenizer, prompt.messages), prompt
