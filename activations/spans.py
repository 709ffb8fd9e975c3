"""Identity spans: the token positions of a prompt's marked slots (seed 000: the perceiver and experiencer) in the
prompt as rendered for the model (a chat template, or plain text)."""

from __future__ import annotations

from dataclasses import dataclass

from behavioral.inference.chat import PLAIN, render
from behavioral.inference.prompt import Prompt

FINAL = "final"


class SpanError(ValueError):
    """An identity span that cannot be located in a rendered prompt."""


@dataclass(frozen=True)
class TokenSpan:
    """A named run of token positions [start, end) in one tokenized prompt."""

    name: str
    start: int
    end: int

    @property
    def last(self) -> int:
        """The position of the span's last token."""
        return self.end - 1

    def __len__(self) -> int:
        """The number of tokens in the span."""
        return self.end - self.start


def _tokenizer_name(tokenizer) -> str:
    """A short name for `tokenizer` in error messages."""
    return getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__


def _describe(prompt: Prompt) -> str:
    """A short description of `prompt` for error messages: its identity fills."""
    fills = ", ".join(f"{s.name}={prompt.text(s)!r}" for s in prompt.slots)
    return f"prompt ({fills or 'no identity slots'})"


def char_spans(text: str, prompt: Prompt) -> dict[str, tuple[int, int]]:
    """Character spans of each slot of `prompt` in the rendered chat `text`, keyed by slot name."""
    # Each message's full content is located in order (never the identity strings themselves, which may recur
    # in a narrative); slot offsets are then relative to where that message's content starts.
    starts, pos = [], 0
    for i, message in enumerate(prompt.messages):
        content = message["content"]
        at = text.find(content, pos)
        if at < 0:
            raise SpanError(
                f"{_describe(prompt)}: the content of message {i} (role {message['role']!r}) is not in the rendered "
                "chat text verbatim; expected a chat template that copies message text unchanged"
            )
        starts.append(at)
        pos = at + len(content)
    spans: dict[str, tuple[int, int]] = {}
    for slot in prompt.slots:
        if slot.name in spans:
            raise SpanError(f"{_describe(prompt)}: slot {slot.name!r} is filled more than once; expected one fill")
        base = starts[slot.message]
        spans[slot.name] = (base + slot.start, base + slot.end)
    return spans


def encode_with_offsets(tokenizer, text: str, special: bool = False) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and character offsets of `text`, with the tokenizer's special tokens if `special` (plain prompts;
    a chat template writes its own)."""
    if not getattr(tokenizer, "is_fast", False):
        raise SpanError(
            f"tokenizer {_tokenizer_name(tokenizer)!r} is not a fast tokenizer; identity spans need a fast "
            "(Rust-backed) tokenizer that returns an offset mapping"
        )
    enc = tokenizer(text, add_special_tokens=special, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def token_spans(tokenizer, text: str, prompt: Prompt, input_ids: list[int] | None = None,
                special: bool = False) -> dict[str, TokenSpan]:
    """Token spans of every slot of `prompt` (by slot name) and `final`, in its rendered `text`."""
    ids, offsets = encode_with_offsets(tokenizer, text, special)
    if input_ids is not None and list(input_ids) != ids:
        raise SpanError(
            f"{_describe(prompt)}: input_ids ({len(input_ids)} tokens) differ from tokenizer "
            f"{_tokenizer_name(tokenizer)!r}'s tokenization of the rendered text ({len(ids)} tokens); expected the "
            "ids of exactly that text"
        )
    if not ids:
        raise SpanError(f"{_describe(prompt)}: the rendered text has no tokens; expected a non-empty prompt")
    spans: dict[str, TokenSpan] = {}
    for name, (lo, hi) in char_spans(text, prompt).items():
        # Overlap, not containment: byte-level BPE folds the leading space into the next token (" a" -> "Ġa").
        hits = [i for i, (a, b) in enumerate(offsets) if b > a and a < hi and b > lo]
        if not hits:
            raise SpanError(
                f"{_describe(prompt)}: slot {name!r} (characters {lo}:{hi}) covers no token of tokenizer "
                f"{_tokenizer_name(tokenizer)!r}; expected at least one token"
            )
        spans[name] = TokenSpan(name, hits[0], hits[-1] + 1)
    spans[FINAL] = TokenSpan(FINAL, len(ids) - 1, len(ids))
    return spans


def prompt_spans(tokenizer, prompt: Prompt, chat_format: str) -> tuple[list[int], dict[str, TokenSpan]]:
    """For one prompt rendered in `chat_format`: its token ids (as behavioral.inference.chat.encode gives them) and its
    slots' token spans, by slot name, with `final`."""
    text, rendered = render(tokenizer, prompt, chat_format)
    special = chat_format == PLAIN
    ids, _ = encode_with_offsets(tokenizer, text, special)
    return ids, token_spans(tokenizer, text, rendered, ids, special)


def align_from_end(source: TokenSpan, target: TokenSpan, n: int | None = None) -> list[tuple[int, int]]:
    """Pairs (source.last - i, target.last - i) for i < n: aligned from the spans' ends; n defaults to the shorter."""
    shorter = min(len(source), len(target))
    if n is None:
        n = shorter
    if not 0 < n <= shorter:
        raise SpanError(
            f"cannot align {n} positions of span {source.name!r} ({len(source)} tokens) with span {target.name!r} "
            f"({len(target)} tokens); expected 1 <= n <= {shorter}"
        )
    return [(source.last - i, target.last - i) for i in range(n)]
