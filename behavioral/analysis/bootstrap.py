"""Percentile bootstrap over the sampled items (events, questions, contexts): the uncertainty from which items were
drawn, for any statistic a suite computes from a subset of its items."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

LEVEL = 0.95
# The fewest units (events, contexts) a 95% percentile interval of a mean is printed over: on simulated means it
# covered 0.48 at 2 units, 0.81 at 5, 0.89 at 8 and 0.90 at 10 (normal; 0.83 for a skewed exponential;
# docs/BENCHMARKS.md)
MIN_UNITS = 10


def resamples(n_items: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """int[n_resamples, n_items]: item indices drawn with replacement, seeded."""
    if n_items < 1:
        raise ValueError(f"nothing to resample: expected at least one item, got {n_items}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    return np.random.default_rng(seed).integers(0, n_items, size=(n_resamples, n_items))


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The central `level` percentile interval of the finite `values` (NaN, NaN without any)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if not len(values):
        return float("nan"), float("nan")
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def item_bootstrap(statistic: Callable[[np.ndarray], float], n_items: int, n_resamples: int = 1000, seed: int = 0,
                   level: float = LEVEL) -> tuple[float, float, int]:
    """(low, high, n_valid): the percentile interval of `statistic(indices)` over resamples of the items, and how many
    resamples gave a finite value (a statistic undefined on a draw, e.g. a group left empty, returns NaN)."""
    values = np.array([statistic(draw) for draw in resamples(n_items, n_resamples, seed)], dtype=float)
    low, high = percentile_interval(values, level)
    return low, high, int(np.isfinite(values).sum())
