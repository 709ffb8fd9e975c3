"""The distribution behind an expected value: each group's mean distribution over the answer set, rebuilt from stored
rows (each work unit's `unit_probs`, or each row's `probs` where a run kept them)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress

import numpy as np
import pandas as pd


def group_distributions(rows: pd.DataFrame, by: Sequence[str]) -> dict[tuple, tuple[np.ndarray, int]]:
    """{group key (the `by` values): (mean distribution over the answer set in label order, items it averages)}.

    Items are rows of sample 0. A work unit whose rows all fall in one group counts through its `unit_probs`,
    weighted by its items; any other unit through its rows' own `probs`, where stored. Groups with neither are
    absent; a unit with `unit_probs` that spans several groups and keeps no `probs` is a ValueError naming it."""
    by = list(by)
    items = rows[rows["sample"] == 0]
    if "unit_probs" not in items:
        items = items.assign(unit_probs=None)
    sums: dict[tuple, np.ndarray] = {}
    counts: dict[tuple, int] = {}

    def add(key: tuple, probs, n: int) -> None:
        probs = n * np.asarray(probs, dtype=float)
        if key in sums and len(sums[key]) != len(probs):
            raise ValueError(f"group {key} mixes answer sets of {len(sums[key])} and {len(probs)} labels; expected "
                             f"one answer set per group of {by}")
        sums[key] = sums[key] + probs if key in sums else probs
        counts[key] = counts.get(key, 0) + n

    for unit, unit_rows in items.groupby("unit_id", sort=False):
        keys = list(unit_rows[by].itertuples(index=False, name=None))
        stored = unit_rows["unit_probs"].dropna()
        if len(stored) and len(set(keys)) == 1:
            add(keys[0], stored.iloc[0], len(unit_rows))
            continue
        kept = unit_rows["probs"].notna()
        if len(stored) and not kept.all():
            raise ValueError(f"work unit {unit!r} spans several groups of {by} and its rows keep no probs, so its "
                             "unit_probs cannot be split between them; expected `by` fields constant within a "
                             "work unit, or a run made with --store-probs")
        for key, probs in zip(compress(keys, kept), unit_rows["probs"][kept]):
            add(key, probs, 1)
    return {key: (sums[key] / counts[key], counts[key]) for key in sums}
