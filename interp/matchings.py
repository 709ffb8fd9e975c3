"""Wrong matchings of identities: the control of any claim about an in-group labelling.

An in-group labelling pairs each perceiver identity with one target identity (intergroup: persona i with experiencer
i). A wrong matching pairs them by a permutation other than the identity, so "in-group" then means "persona i, target
π(i)": a rule with the same number of cells, the same cell structure and the same fitting procedure, but no meaning.
Whatever a statistic does for the real matching that it also does for most wrong ones (a direction removing "its"
gap, a probe reading "its" label) the procedure does by construction.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd


def wrong_matchings(n: int, k: int, seed: int = 0) -> np.ndarray:
    """[m, n] distinct permutations of range(n) other than the identity: all n! - 1 of them where that is at most
    `k` (so a rank among them is exact), else `k` seeded draws without repeats."""
    if n < 2:
        raise ValueError(f"a wrong matching needs at least 2 identities, got {n}")
    if k < 1:
        raise ValueError(f"the number of wrong matchings must be at least 1, got {k}")
    if math.factorial(n) - 1 <= k:
        return np.array(list(itertools.permutations(range(n)))[1:], dtype=np.int64)
    rng = np.random.default_rng(seed)
    identity = tuple(range(n))
    seen: dict[tuple[int, ...], None] = {}
    while len(seen) < k:
        perm = tuple(int(i) for i in rng.permutation(n))
        if perm != identity:
            seen.setdefault(perm, None)
    return np.array(list(seen), dtype=np.int64)


def matched(rows: np.ndarray, cols: np.ndarray, matching: np.ndarray | None = None) -> np.ndarray:
    """Bool per cell: whether row identity index `rows` is paired with column identity index `cols` under
    `matching` (a permutation; None: the real one, row i with column i). Negative indices (no identity, e.g.
    intergroup's "a person") are never matched."""
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    valid = (rows >= 0) & (cols >= 0)
    partner = rows if matching is None else np.asarray(matching, dtype=np.int64)[np.where(valid, rows, 0)]
    return valid & (partner == cols)


def overlap(matching: np.ndarray) -> int:
    """How many identities a matching pairs as the real one does (its fixed points)."""
    return int((np.asarray(matching) == np.arange(len(matching))).sum())


def involves(rows: np.ndarray, cols: np.ndarray, index: int) -> np.ndarray:
    """Bool per cell: whether identity index `index` is the cell's row or column (the cells a held-out-identity
    control leaves out of a fit)."""
    return (np.asarray(rows, dtype=np.int64) == index) | (np.asarray(cols, dtype=np.int64) == index)


def matched_cells(cells: pd.DataFrame, slots: Sequence[str], groups: Mapping[str, int],
                  matching: np.ndarray | None = None, without: int | None = None) -> pd.Series:
    """Nullable bool per cell (or result row): whether the identities in its two `slots` columns (`groups`: identity
    -> its group index) are paired under `matching` (None: the real one); NA where a slot holds no identity of
    `groups` (intergroup's "a person") or, with `without`, where that group is on either side (a held-out
    identity)."""
    rows, cols = (cells[slot].map(groups).fillna(-1).to_numpy(dtype=np.int64) for slot in slots)
    named = (rows >= 0) & (cols >= 0)
    if without is not None:
        named &= ~involves(rows, cols, without)
    return pd.Series(matched(rows, cols, matching), index=cells.index, dtype="boolean").where(named, pd.NA)
