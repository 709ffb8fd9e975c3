"""Algorithmic fidelity: the Wasserstein-1 distance between human and model rating distributions on the 1-5 scale
(Eq. 1) per group and trait, the within-human inter-trait baseline (Fig. 4's dashed line), and (our addition) the
percentile intervals of mean W1 over resamples of the groups."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from behavioral.analysis.bootstrap import item_bootstrap
from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.order import in_order
from behavioral.suites.scm.traits import DIMENSIONS, TRAITS

LEVELS = (1, 2, 3, 4, 5)
P_COLUMNS = tuple(f"p{k}" for k in LEVELS)
_ATTRIBUTE = {g.name: g.attribute for members in GROUPS.values() for g in members}


def w1(p, q) -> float:
    """W1 between two distributions on 1..5 given as length-5 probabilities or counts: sum over k=1..4 of
    |F(k) - G(k)|."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.shape != (5,) or q.shape != (5,):
        raise ValueError(f"w1 takes two length-5 distributions over 1..5, got shapes {p.shape} and {q.shape}")
    if p.sum() <= 0 or q.sum() <= 0:
        raise ValueError("w1 needs two distributions with positive mass")
    return float(np.abs(np.cumsum(p / p.sum())[:4] - np.cumsum(q / q.sum())[:4]).sum())


def distributions(frame: pd.DataFrame) -> pd.Series:
    """(group, trait) -> length-5 distribution: the mean of p1..p5 over a score-mode frame's rows (templates), else
    the counts of the parsed ratings 1..5 (cells without one left out)."""
    if set(P_COLUMNS) <= set(frame.columns):
        means = frame.groupby(["group", "trait"], sort=False)[list(P_COLUMNS)].mean()
        return pd.Series(list(means.to_numpy()), index=means.index, dtype=object)
    rated = frame.dropna(subset=["rating"])
    counts = pd.crosstab([rated.group, rated.trait], rated.rating.astype(int)).reindex(columns=LEVELS, fill_value=0)
    return pd.Series(list(counts.to_numpy(dtype=float)), index=counts.index, dtype=object)


def fidelity(human: pd.DataFrame, model: pd.DataFrame) -> pd.DataFrame:
    """W1 per cell the two frames share: group, trait, dimension, attribute, w1 (in the suite's order)."""
    h, m = distributions(human), distributions(model)
    shared = [key for key in h.index if key in m.index]
    return in_order(pd.DataFrame({
        "group": [g for g, _ in shared], "trait": [t for _, t in shared],
        "dimension": [TRAITS[t] for _, t in shared], "attribute": [_ATTRIBUTE[g] for g, _ in shared],
        "w1": [w1(h[key], m[key]) for key in shared],
    }, columns=["group", "trait", "dimension", "attribute", "w1"]), ("group", "trait"))


def inter_trait_baseline(human: pd.DataFrame) -> dict[str, float]:
    """Per dimension, the mean over groups and unordered pairs of the dimension's traits of W1 between the human
    distributions of the two traits of one group (NaN where no group has two of its traits)."""
    h = distributions(human)
    out = {}
    for dimension in DIMENSIONS:
        values = []
        for group in dict.fromkeys(g for g, _ in h.index):
            traits = [t for t in TRAITS if TRAITS[t] == dimension and (group, t) in h.index]
            values += [w1(h[(group, a)], h[(group, b)]) for a, b in combinations(traits, 2)]
        out[dimension] = float(np.mean(values)) if values else float("nan")
    return out


def group_intervals(fid: pd.DataFrame, n_resamples: int = 1000, seed: int = 0) -> dict[str, float]:
    """Percentile intervals over `n_resamples` seeded resamples of the groups of `fid` (a fidelity() frame; each drawn
    group brings all its cells) of mean W1 over cells and per dimension: mean_w1_low, mean_w1_high, w1_<dimension>_low,
    ... (NaN where no draw holds a cell of that dimension)."""
    index, groups = pd.factorize(fid.group)
    out = {}
    for name, cells in (("mean_w1", np.ones(len(fid), dtype=bool)),
                        *((f"w1_{d}", (fid.dimension == d).to_numpy()) for d in DIMENSIONS)):
        sums = np.bincount(index[cells], weights=fid.w1.to_numpy()[cells], minlength=len(groups))
        counts = np.bincount(index[cells], minlength=len(groups))

        def mean(draw: np.ndarray) -> float:
            return sums[draw].sum() / counts[draw].sum() if counts[draw].sum() else float("nan")

        out[f"{name}_low"], out[f"{name}_high"], _ = item_bootstrap(mean, len(groups), n_resamples, seed)
    return out
