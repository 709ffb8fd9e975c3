"""What a suite warns beside its headline numbers, each a sentence with its own numbers: answers the model rarely
gives (low answer mass), too few parsable replies, many refusals, one answer for (almost) every item, a partial run.
The thresholds are declared once here, so every suite warns at the same points and a sweep's top page shows the
warnings on the headline rows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from behavioral.report.formats import cell, is_missing

LOW_MASS = 0.5  # mean probability on the answer space below which scores read answers the model rarely gives
FEW_PARSED = 0.5  # share of replies holding an answer below which a generated measure reads few replies
REFUSED = 0.2  # share of items refused or excluded above which the measure stands on what is left
ONE_ANSWER = 0.9  # share of items given the most common answer at or above which the answers carry little signal
MIN_ITEMS = 5  # fewer items than this are too few to call one answer "every item's"


def low_mass(mass: float, above_half: float | None, space: str, of: str = "the first answer token's probability") -> str:
    """A warning where the mean share of `of` on the answer `space` (numbers, letters) is below LOW_MASS, else ""."""
    if is_missing(mass) or mass >= LOW_MASS:
        return ""
    share = "" if above_half is None or is_missing(above_half) else \
        f" ({cell(above_half, 'percent')} of prompts above one half)"
    return f"low answer mass: {cell(mass, 'percent')} of {of} on {space}{share}"


def few_parsed(share: float, what: str) -> str:
    """A warning where the share of replies holding `what` is below FEW_PARSED, else ""."""
    if is_missing(share) or share >= FEW_PARSED:
        return ""
    return f"few parsable replies: {cell(share, 'percent')} hold {what}"


def refused(share: float, what: str) -> str:
    """A warning where the share of `what` refused or excluded is above REFUSED, else ""."""
    if is_missing(share) or share <= REFUSED:
        return ""
    return f"many refusals: {cell(share, 'percent')} of {what} refused or excluded"


def one_answer(answers: Sequence | pd.Series, items: str = "items") -> str:
    """A warning where one answer is given for at least ONE_ANSWER of the `items` (at least MIN_ITEMS of them,
    missing answers not counted), else ""."""
    given = pd.Series(answers).dropna()
    if len(given) < MIN_ITEMS:
        return ""
    counts = given.value_counts()
    if counts.iloc[0] < ONE_ANSWER * len(given):
        return ""
    return f"one answer: {str(counts.index[0])!r} for {counts.iloc[0]} of {len(given)} {items}"


def joined(warnings: Iterable[str]) -> str:
    """The non-empty warnings as one cell, separated by semicolons."""
    return "; ".join(w for w in warnings if w)
