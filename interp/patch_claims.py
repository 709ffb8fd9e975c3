"""What a layer-by-layer patching profile supports: the first layer from which patching stops mattering, read off the
intervals over events of the effect closed, so that a claim about where a slot's information is read names a layer
with its interval instead of a point estimate."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def includes_zero(low: float, high: float) -> bool:
    """Whether the interval [low, high] holds 0 (False where either end is NaN)."""
    return bool(low <= 0 <= high)


def stops_mattering(layers: Sequence[int], low: Sequence[float], high: Sequence[float]) -> int | None:
    """The first of `layers` (in increasing order) from which on every tested layer's interval of the effect closed
    includes 0: from there, patching the slot at one layer no longer moves the measure beyond what resampling the
    events does. None where the last layer's interval excludes 0 or is undefined (NaN: no interval, say why): no
    such layer among those tested. `low` and `high` follow `layers`."""
    order = np.argsort(np.asarray(layers), kind="stable")
    found = None
    for k in order[::-1]:
        if not includes_zero(low[k], high[k]):
            break
        found = layers[k]
    return found
