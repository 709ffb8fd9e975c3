"""What a patch replaces and where: the spec, the prompts with the spans patching needs, the alignment rules.

The patched span is the one slot of a prompt the caller names (intergroup: the perceiver, its persona); the position
groups call it the persona (``persona_end``, ``persona_mean``), whichever slot it is.

Layers are residual-stream points, named as activations.capture.resolve_layers reads them: ``hook_embed`` (or
``embed``) is the residual stream before block 0; ``l`` is ``blocks.{l}.hook_resid_post``, the output of decoder
layer ``l`` (-1 the last block). A patch at layer ``l``
overwrites that layer's output, so layers ``l + 1`` onwards read the source's values there; tokens after the patched
positions have already read the target's values at layers <= l.

Position alignment (each target position receives one source position, or the mean of several), per position group:

- ``persona_end`` (n): the last ``n`` tokens of the two patched spans, paired from the spans' ends
  (``activations.spans.align_from_end``); ``n=None`` pairs as many as the shorter span has. The first tokens of a
  longer target persona keep the target's values ("a person from Iran" <- "a person": " from Iran" <- " a person").
- ``persona_mean``: every target persona position receives the mean of the source persona span's values (per layer).
- ``system``: the block from the persona's first token to the last token of the system text (the system message, or
  the system part of the user message where the chat template folds it there), paired from the blocks' ends, as many
  as the shorter block has. The text after the persona is the same in both prompts, so those pairs are the same
  tokens; what is left over is the start of the longer persona, treated as in ``persona_end``.
- ``all``: every prompt position ``i`` <- ``i``; source and target must have the same length (the sanity check:
  with every block and ``hook_embed`` patched, the target's scores become the source's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from activations.capture import Layers, layer_entries, resolve_layers, table_layer
from activations.spans import SpanError, TokenSpan, align_from_end, encode_with_offsets, token_spans
from behavioral.inference import chat
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.prompt import Prompt

PERSONA = "persona"  # the patched slot's span, as the position groups call it
SYSTEM_GROUP = "system"  # the position group from the persona to the end of the system text (not a chat format)
POSITION_GROUPS = ("persona_end", "persona_mean", SYSTEM_GROUP, "all")


class PatchError(ValueError):
    """A patch that cannot be applied as asked."""


@dataclass(frozen=True)
class PatchSpec:
    """Layers to patch and the position group; ``n`` is for ``persona_end`` only. `layers` takes what
    activations.capture.resolve_layers takes (blocks, -1 the last; hook names; ``--layers`` entries), kept as given
    (a tuple) and resolved against the model by `hooks`."""

    layers: Layers = ()
    positions: str = "persona_end"
    n: int | None = None

    def __post_init__(self):
        try:
            object.__setattr__(self, "layers", layer_entries(self.layers))
        except ValueError as err:
            raise PatchError(str(err)) from None
        if self.positions not in POSITION_GROUPS:
            raise PatchError(f"unknown position group {self.positions!r}; expected one of {', '.join(POSITION_GROUPS)}")
        if self.n is not None and (self.positions != "persona_end" or self.n < 1):
            raise PatchError(f"n={self.n} is only for persona_end and must be at least 1")

    def hooks(self, n_layers: int) -> tuple[str, ...]:
        """The hook names patched on a model of `n_layers` blocks, shallowest first (a PatchError naming a bad
        layer)."""
        try:
            return tuple(sorted(resolve_layers(self.layers, n_layers, embed=True), key=table_layer))
        except ValueError as err:
            raise PatchError(str(err)) from None

    @property
    def label(self) -> str:
        """The position group as written in tables: ``persona_end:1``, ``persona_end``, ``persona_mean``, ..."""
        return self.positions if self.n is None else f"{self.positions}:{self.n}"

    @classmethod
    def parse(cls, group: str, layers: Layers = ()) -> "PatchSpec":
        """A spec from a position group label such as ``persona_end:2`` or ``system``, and `layers` as PatchSpec
        takes them."""
        layers = cls(layers).layers  # a bad layer is named as such
        name, _, n = group.partition(":")
        if n and not n.isdigit():
            raise PatchError(f"bad position group {group!r}: expected NAME or NAME:N with N a whole number")
        try:
            return cls(layers, name, int(n) if n else None)
        except ValueError as err:
            raise PatchError(f"bad position group {group!r}: {err}") from None


@dataclass(frozen=True)
class PatchPrompt:
    """Token ids of one rendered prompt and its spans: its other slots', persona (the patched slot), final, and system
    (persona start to the last token of the system text)."""

    ids: tuple[int, ...]
    spans: Mapping[str, TokenSpan] = field(compare=False)

    def __len__(self) -> int:
        return len(self.ids)


def encode(tokenizer, prompt: Prompt, slot: str, chat_format: str | None = None) -> PatchPrompt:
    """Render and tokenize `prompt` as a run does (`chat_format` None: the tokenizer's, as
    behavioral.inference.chat.detect_format finds it), with the spans of its slots, `final`, the patched `slot`'s span as
    ``persona`` and ``system`` (from that span to the last token of the system text); a slot the prompt lacks is a
    SpanError naming it."""
    chat_format = chat_format or chat.detect_format(tokenizer)
    text, rendered = chat.render(tokenizer, prompt, chat_format)
    special = chat_format == chat.PLAIN
    ids, offsets = encode_with_offsets(tokenizer, text, special)
    spans = token_spans(tokenizer, text, rendered, ids, special)
    if slot not in spans:
        names = ", ".join(s.name for s in prompt.slots) or "none"
        raise SpanError(f"the prompt has no slot {slot!r} to patch; its slots: {names}")
    patched = spans.pop(slot)
    persona = spans[PERSONA] = TokenSpan(PERSONA, patched.start, patched.end)
    # The system text is message 0 of the original prompt; folded or plain, it opens message 0 of the rendered one.
    at = text.find(rendered.messages[0]["content"])
    end = at + len(prompt.messages[0]["content"])
    inside = [i for i, (a, b) in enumerate(offsets) if b > a and a < end]
    if at < 0 or not inside or inside[-1] < persona.last:
        raise SpanError(f"cannot locate the end of the system text after slot {slot!r} in the rendered prompt")
    spans[SYSTEM_GROUP] = TokenSpan(SYSTEM_GROUP, persona.start, inside[-1] + 1)
    return PatchPrompt(tuple(ids), spans)


_TRIES: dict = {}


def answer_trie(tokenizer, max_rating: int) -> AnswerTrie:
    """The answer trie of the 0..`max_rating` scale for `tokenizer` (cached; 11 nodes for 0..10, 101 for 0..100)."""
    key = (id(tokenizer), int(max_rating))
    if key not in _TRIES:
        _TRIES[key] = (tokenizer, AnswerTrie.for_scale(tokenizer, key[1]))  # the tokenizer kept alive: ids stay unique
    return _TRIES[key][1]


def align(spec: PatchSpec, source: PatchPrompt, target: PatchPrompt) -> list[tuple[int, tuple[int, ...]]]:
    """(target position, source positions whose mean it receives) pairs, by the rules in the module docstring."""
    if spec.positions == "persona_end":
        pairs = align_from_end(source.spans[PERSONA], target.spans[PERSONA], spec.n)
        return [(t, (s,)) for s, t in reversed(pairs)]
    if spec.positions == "persona_mean":
        src, tgt = source.spans[PERSONA], target.spans[PERSONA]
        return [(t, tuple(range(src.start, src.end))) for t in range(tgt.start, tgt.end)]
    if spec.positions == SYSTEM_GROUP:
        pairs = align_from_end(source.spans[SYSTEM_GROUP], target.spans[SYSTEM_GROUP])
        return [(t, (s,)) for s, t in reversed(pairs)]
    if len(source) != len(target):
        raise PatchError(f"position group 'all' needs prompts of equal length, got {len(source)} (source) and "
                         f"{len(target)} (target) tokens")
    return [(i, (i,)) for i in range(len(target))]
