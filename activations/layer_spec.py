"""The --layers grammar (LAYER_GRAMMAR) and the check of a layer spec's entries before any model is known, without
torch: a run's settings are refused before anything loads; which blocks a spec names is read against the model's
blocks in activations.capture."""

from __future__ import annotations

import re

EMBED_HOOK = "hook_embed"
RESID_POST = re.compile(r"blocks\.(\d+)\.hook_resid_post")
LAYER_GRAMMAR = ("all, or a comma list of: embed; first, middle, last; block numbers (negative ones count back from "
                 "the last block: -1 is the last); inclusive ranges a-b such as 0-5 or -4--1; hook names "
                 "(hook_embed, blocks.3.hook_resid_post)")
RANGE = re.compile(r"(-?\d+)-(-?\d+)")


def check_layer_spec(spec: str, flag: str = "--layers") -> None:
    """Refuse, before any model is known, a layer spec with an entry outside LAYER_GRAMMAR; which blocks it names is
    checked against the model (`select_hooks`)."""
    text = spec.strip().lower()
    if text == "all":
        return
    for part in (p.strip() for p in text.split(",")):
        words = part in ("embed", EMBED_HOOK, "first", "middle", "last")
        if not (words or RESID_POST.fullmatch(part) or RANGE.fullmatch(part) or _is_integer_text(part)):
            raise ValueError(f"{flag}: unknown entry {part[:40]!r}; expected {LAYER_GRAMMAR}")


def _is_integer_text(text: str) -> bool:
    """True where `text` reads as a block number."""
    try:
        int(text)
    except ValueError:
        return False
    return True
