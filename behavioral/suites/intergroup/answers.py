"""Reading an intensity out of a model's reply, with the authors' regex rules."""

from __future__ import annotations

import re

REFUSAL_PREFIXES = ("I cannot", "I can't", "I'm not rating")
_INTEGER = re.compile(r"\b\d+\b")


def parse_intensity(response: str, max_rating: int) -> int | None:
    """The rating in `response`, or None for a refusal.

    As in the authors' code: a reply starting "I cannot", "I can't" or "I'm not rating" is a refusal; otherwise the
    first integer counts if it lies in 0..max_rating, else the second; no such integer is a refusal. The authors
    checked 0..100 for both scales; we check the setting's own maximum (10 for S1).
    """
    if response.startswith(REFUSAL_PREFIXES):
        return None
    numbers = [int(m) for m in _INTEGER.findall(response)[:2]]
    for value in numbers:
        if 0 <= value <= max_rating:
            return value
    return None


def answer_decided(response: str, max_rating: int) -> bool:
    """True once no continuation of `response` can change parse_intensity(response, max_rating), so decoding may stop.

    That is when the reply starts with a refusal prefix, or (once it can no longer become one) when its first integer
    is complete and in range, or its first two integers are complete. An integer is complete when a non-word character
    follows it; a trailing U+FFFD (a multi-byte character cut in half) may still become a letter, so it closes nothing.
    """
    text = response.rstrip("\ufffd")
    if text.startswith(REFUSAL_PREFIXES):
        return True
    if any(prefix.startswith(text) for prefix in REFUSAL_PREFIXES):
        return False
    complete = [int(m.group()) for m in _INTEGER.finditer(text) if m.end() < len(text)][:2]
    return bool(complete) and (0 <= complete[0] <= max_rating or len(complete) == 2)
