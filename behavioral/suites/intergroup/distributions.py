"""The answer distributions behind seed 000's expected intensity (the toolkit's addition): each cell's mean
distribution over the ratings 0..max, and the in-group against the out-group cells of δ's matrix, so a reader sees
why the mean and the mode differ and where a gap in the expected intensity comes from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from behavioral.analysis import Table
from behavioral.analysis.distributions import group_distributions
from behavioral.analysis.figure_style import PALETTE, n_text, new_figure, styled
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.settings import setting_label

CELL = ("category", "setting", "perceiver", "experiencer")
# {(category, setting, perceiver, experiencer): (mean distribution over 0..max, items it averages)}
Distributions = Mapping[tuple[str, str, str, str], tuple[np.ndarray, int]]


def cell_distributions(rows: pd.DataFrame) -> Distributions:
    """Each cell's mean distribution over the answer set from a run's rows; empty where the run stored none (a
    generate-mode run, or a score run made before distributions were kept)."""
    if "unit_probs" not in rows and "probs" not in rows:
        return {}
    return group_distributions(rows.assign(probs=rows.get("probs")), CELL)


def _pooled(a: SettingAnalysis, dists: Distributions) -> dict[str, tuple[np.ndarray, int]] | None:
    """The mean distribution of δ's in-group cells and of its out-group cells, weighting cells equally as δ does;
    None where some cell of δ's matrix has no stored distribution."""
    same = a.category.in_group()
    names = a.category.identities
    cells = {(i, j): dists.get((a.category.name, a.setting, p, x)) for i, p in enumerate(names)
             for j, x in enumerate(names)}
    if any(v is None for v in cells.values()):
        return None
    pooled = {}
    for label, inside in (("in-group", True), ("out-group", False)):
        chosen = [cells[i, j] for (i, j) in cells if same[i, j] == inside]
        pooled[label] = (np.mean([d for d, _ in chosen], axis=0), sum(n for _, n in chosen))
    return pooled


def _mean(probs: np.ndarray) -> float:
    """The mean rating of a distribution over 0..len-1: the expected intensity it gives."""
    return float(probs @ np.arange(len(probs)))


def _summary(probs: np.ndarray) -> dict:
    """Mean, mode and the mode's probability of a distribution over 0..len-1."""
    mode = int(np.argmax(probs))
    return {"mean": _mean(probs), "mode": mode, "p_mode": float(probs[mode])}


def tables(per_run: Mapping[str, tuple[Sequence[SettingAnalysis], Distributions]]) -> tuple[Table, Table] | None:
    """The per-cell distributions (tidy: a row per cell and rating) and the in-group against out-group summary per run,
    category and setting; None where no run stored distributions."""
    cells, pooled_rows = [], []
    for run, (analyses, dists) in per_run.items():
        for a in analyses:
            same = dict(zip(((p, x) for p in a.category.identities for x in a.category.identities),
                            a.category.in_group().ravel()))
            for (cat, setting, p, x), (probs, n) in dists.items():
                if (cat, setting) == (a.category.name, a.setting):
                    cells.append(pd.DataFrame({"run": run, "category": cat, "setting": setting, "perceiver": p,
                                               "experiencer": x, "in_group": same.get((p, x)), "n_items": n,
                                               "rating": np.arange(len(probs)), "probability": probs}))
            pooled = _pooled(a, dists)
            for label, (probs, n) in (pooled or {}).items():
                pooled_rows.append({"run": run, "category": a.category.name, "setting": a.setting, "cells": label,
                                    "n_items": n, **_summary(probs)})
    if not cells:
        return None
    return (Table("distributions/cells", "Each cell's mean distribution over the ratings (in_group: empty for \"a "
                  "person\" cells, outside δ's matrix)", pd.concat(cells, ignore_index=True)),
            Table("answer_distributions", "The distribution behind the expected intensity, in-group and "
                  "out-group", pd.DataFrame(pooled_rows), formats={"p_mode": "percent", "n_items": "count"},
                  definitions={"cells": "in-group or out-group: the mean distribution over the ratings of δ's "
                                        "cells of that kind, weighted equally as δ weights them.",
                               "mean": "its mean: the expected intensity δ's expected measure averages.",
                               "mode, p_mode": "its most probable rating and that rating's probability.",
                               "n_items": "the scored prompts it averages."}))


@styled
def figure(a: SettingAnalysis, dists: Distributions) -> Figure | None:
    """In-group against out-group mean distributions over the ratings, pooled over δ's cells (left) and for the
    perceiver whose own cell departs most from its row's out-group cells in expected intensity (right); each panel
    titled with the scored prompts it averages."""
    pooled = _pooled(a, dists)
    if pooled is None:
        return None
    same, names = a.category.in_group(), a.category.identities
    key = lambda p, x: dists[(a.category.name, a.setting, p, x)]
    expected = np.array([[_mean(key(p, x)[0]) for x in names] for p in names])
    contrast = [expected[i][same[i]].mean() - expected[i][~same[i]].mean() for i in range(len(names))]
    top = int(np.argmax(np.abs(contrast)))
    row = {label: (np.mean([key(names[top], x)[0] for x, s in zip(names, same[top]) if s == inside], axis=0),
                   sum(key(names[top], x)[1] for x, s in zip(names, same[top]) if s == inside))
           for label, inside in (("in-group", True), ("out-group", False))}
    panels = (("δ's cells, pooled", pooled), (f"perceiver {a.category.short_label(names[top])}, its row", row))
    fig = new_figure(2, 2.6)
    for ax, (title, parts) in zip(fig.subplots(1, 2), panels):
        shown = np.flatnonzero(np.max([probs for probs, _ in parts.values()], axis=0) >= 1e-3)
        ratings = np.arange(shown.min(), shown.max() + 1)
        for k, (label, (probs, _)) in enumerate(parts.items()):
            ax.bar(ratings + (k - 0.5) * 0.4, probs[ratings], width=0.4, color=PALETTE[k],
                   label=f"{label} (mean {_mean(probs):.1f})")
        ax.set_xlabel("rating")
        ax.set_ylabel("mean probability")
        counts = {f"{label} prompts": n for label, (_, n) in parts.items()}
        ax.set_title(f"{title}\n{n_text(**counts)}")
        ax.legend()
    fig.suptitle(f"Answer distributions, {a.category.title}, {setting_label(a.setting)} (scored distribution)")
    return fig
