"""What a layer-by-layer patching profile supports: the first layer from which patching stops mattering, shown by an
equivalence test on the intervals over events of the effect closed (an interval that merely includes 0 says the data
cannot tell, not that the effect is gone), so that a claim about where a slot's information is read names a layer
with its interval and its margin instead of a point estimate. A layer before it is said to matter only where its
interval lies beyond the margin (`beyond`), never because it failed the equivalence test."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# The default equivalence margin of the gap closed: an effect within ±10% of the unpatched gap counts as none.
EQUIVALENCE_MARGIN = 0.10


def includes_zero(low: float, high: float) -> bool:
    """Whether the interval [low, high] holds 0 (False where either end is NaN)."""
    return bool(low <= 0 <= high)


def equivalent(low: float, high: float, margin: float = EQUIVALENCE_MARGIN) -> bool:
    """Whether [low, high] lies within [-margin, margin]: with a 95% interval, both one-sided tests of an effect
    beyond the margin reject at 0.025 (a TOST at 0.025 per side; False where either end is NaN). For the patch
    studies' intervals over n events these are Student's t-tests with n − 1 degrees of freedom (for a share closed,
    Fieller's interval lies inside ±margin exactly where both one-sided paired t-tests of closed ∓ margin × before
    reject), so the test keeps its size at any event count where the per-event values are near normal."""
    return bool(-margin <= low and high <= margin)


def beyond(low: float, high: float, margin: float = EQUIVALENCE_MARGIN) -> bool:
    """Whether [low, high] lies wholly beyond ±margin: with a 95% interval, the one-sided test of an effect within
    the margin rejects at 0.025, so the effect is shown to matter (False where either end is NaN)."""
    return bool(low > margin or high < -margin)


def _first_from(layers: Sequence[int], low: Sequence[float], high: Sequence[float],
                holds: Callable[[float, float], bool]) -> int | None:
    """The first of `layers` (in increasing order) from which on `holds` is true of every tested layer's interval."""
    found = None
    for k in np.argsort(np.asarray(layers), kind="stable")[::-1]:
        if not holds(low[k], high[k]):
            break
        found = layers[k]
    return found


def stops_mattering(layers: Sequence[int], low: Sequence[float], high: Sequence[float],
                    margin: float = EQUIVALENCE_MARGIN) -> int | None:
    """The first of `layers` from which on every tested layer's effect closed is shown to lie within ±margin (its
    interval inside [-margin, margin]; each layer's test at its own level, which is the level of the claim about
    all of them together: an intersection-union test needs no correction). None where the last layer's is not
    (or is undefined: no interval, say why). `low` and `high` follow `layers`."""
    return _first_from(layers, low, high, lambda lo, hi: equivalent(lo, hi, margin))


def undetermined_from(layers: Sequence[int], low: Sequence[float], high: Sequence[float]) -> int | None:
    """The first of `layers` from which on every tested layer's interval includes 0: from there the data cannot
    tell the effect from 0, which is not evidence that it is 0 (`stops_mattering` is)."""
    return _first_from(layers, low, high, includes_zero)
