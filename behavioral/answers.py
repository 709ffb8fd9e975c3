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
