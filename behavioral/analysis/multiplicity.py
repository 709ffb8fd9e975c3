"""Corrections for running several tests in one analysis: Holm's step-down adjustment of any family of p-values, and
the max-statistic family-wise adjustment of tests that share one set of permutations (as across layers)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values, controlling the family-wise error over the finite entries (NaN entries stay
    NaN and do not count towards the family)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    order = idx[np.argsort(p[idx], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def max_statistic(observed: Sequence[float], null: np.ndarray) -> np.ndarray:
    """Family-wise adjusted one-sided p-values of tests that share permutations (Westfall & Young's single step):
    test k's p is (1 + #{permutations b whose largest statistic over the family >= observed[k]}) / (B + 1).

    null[k, b] is test k's statistic under permutation b, the same permutation b for every k, which keeps the
    dependence between the tests (adjacent layers) that Holm ignores. NaN statistics do not count towards the family.
    """
    observed = np.asarray(observed, dtype=float)
    null = np.asarray(null, dtype=float)
    if null.ndim != 2 or null.shape[0] != len(observed):
        raise ValueError(f"null must be [tests, permutations] with {len(observed)} tests, got shape {null.shape}")
    finite = np.isfinite(observed)
    out = np.full(observed.shape, np.nan)
    if not finite.any():
        return out
    largest = np.nanmax(null[finite], axis=0)
    for k in np.flatnonzero(finite):
        out[k] = (1 + np.count_nonzero(largest >= observed[k] - 1e-12)) / (null.shape[1] + 1)
    return out
