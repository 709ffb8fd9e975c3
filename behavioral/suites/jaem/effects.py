"""Per-attribute effects and between-template / between-run comparisons of the metrics. The paper names no test;
these are ours: z of a group mean against the run's mean with the run's sd (our reading of the paper's σ = 3.36),
normal p, Holm over the values; omnibus χ² (CE) or Kruskal-Wallis (the others); χ² (CE) or Mann-Whitney between
two sets."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from behavioral.analysis.multiplicity import holm

BINARY = ("ce_correct",)  # metrics tested with χ²
METRICS = ("ce_correct", "vad_v", "vad_a", "vad_d", "era_ip", "era_ex", "era_er")


def _omnibus(groups: list[np.ndarray], binary: bool) -> tuple[str, float]:
    """(test name, p) across the groups; NaN where there is nothing to test (one group, or no variation)."""
    groups = [g for g in groups if len(g)]
    if len(groups) < 2 or np.ptp(np.concatenate(groups)) == 0:
        return ("chi2" if binary else "kruskal"), math.nan
    if binary:
        table = np.array([[np.sum(g == 1), np.sum(g != 1)] for g in groups])
        return "chi2", float(stats.chi2_contingency(table, correction=False).pvalue)
    return "kruskal", float(stats.kruskal(*groups).pvalue)


def attribute_effects(df: pd.DataFrame, metric: str, by: str | Sequence[str]) -> pd.DataFrame:
    """One row per value of `by` (an attribute, or a tuple such as ("sexuality", "pronoun"), values joined by
    "/"): value, n, mean, z = (mean_g − mean) / (sd / √n_g) with mean and sd over every row of `df`, two-sided normal
    p, p_holm over the values. attrs: omnibus_test, omnibus_p (χ² for ce_correct, Kruskal-Wallis otherwise)."""
    by = [by] if isinstance(by, str) else list(by)
    data = df.loc[df[metric].notna(), [*by, metric]]
    values = data[metric].to_numpy(dtype=float)
    mean, sd = (values.mean(), values.std(ddof=1)) if len(values) > 1 else (math.nan, math.nan)
    keys = data[by[0]].astype(str)
    for column in by[1:]:  # "value/value" keys, joined column by column (a row-wise join took seconds)
        keys = keys + "/" + data[column].astype(str)
    rows, groups = [], []
    for value, group in data.groupby(keys, sort=False)[metric]:
        g = group.to_numpy(dtype=float)
        groups.append(g)
        z = (g.mean() - mean) / (sd / math.sqrt(len(g))) if sd > 0 else math.nan
        rows.append({"value": value, "n": len(g), "mean": g.mean(), "z": z,
                     "p": 2 * stats.norm.sf(abs(z)) if not math.isnan(z) else math.nan})
    out = pd.DataFrame(rows, columns=["value", "n", "mean", "z", "p"])
    out["p_holm"] = holm(out["p"])
    out.attrs["omnibus_test"], out.attrs["omnibus_p"] = _omnibus(groups, metric in BINARY)
    return out


def compare(a: pd.Series, b: pd.Series, metric: str) -> tuple[str, float]:
    """(test, p) between two sets of one metric: χ² for ce_correct, Mann-Whitney otherwise; NaN if untestable."""
    x, y = a.dropna().to_numpy(dtype=float), b.dropna().to_numpy(dtype=float)
    if not len(x) or not len(y):
        return ("chi2" if metric in BINARY else "mannwhitney"), math.nan
    if metric in BINARY:
        return _omnibus([x, y], True)
    if np.ptp(np.concatenate([x, y])) == 0:
        return "mannwhitney", math.nan
    return "mannwhitney", float(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)


def by_value(samples: pd.DataFrame, attributes: Sequence[str]) -> pd.DataFrame:
    """Per value of each attribute (`kind` the attribute, `identity` the value, values in order of first appearance):
    the mean CE accuracy `ce_correct` and its z against the samples' mean (`attribute_effects`, as the analysis's
    `attributes` table gives them) and the mean `p_gold`; NaN where no sample of the value has that metric."""
    frames = []
    for attribute in attributes:
        values = samples[attribute].astype(str).drop_duplicates().to_numpy()
        ce = attribute_effects(samples, "ce_correct", attribute).set_index("value").reindex(values)
        gold = attribute_effects(samples, "p_gold", attribute).set_index("value").reindex(values)
        frames.append(pd.DataFrame({"kind": attribute, "identity": values, "ce_correct": ce["mean"].to_numpy(),
                                    "ce_correct_z": ce["z"].to_numpy(), "p_gold": gold["mean"].to_numpy()}))
    return pd.concat(frames, ignore_index=True)
