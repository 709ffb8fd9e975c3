"""Figures, a panel per run: z of each sexuality × pronoun cell of a metric, and the labels and letters chosen per
template. Drawn on behavioral.analysis.new_figure (no pyplot, no global backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from behavioral.analysis import new_figure
from behavioral.suites.jaem.samples import LETTERS
from behavioral.suites.jaem.templates import LABELS

CELL = "sexuality × pronoun"


def z_heatmap(per_value: pd.DataFrame, metric: str, axes: Mapping[str, tuple[Sequence[str], Sequence[str]]]) -> Figure:
    """Heatmaps of z for the sexuality × pronoun cells of one metric, one per run (`axes`: run -> its sexuality
    and pronoun values, the rows and columns)."""
    fig = new_figure(3.4 * len(axes), 0.35 * max(len(s) for s, _ in axes.values()) + 1.4)
    for ax, (run, (sexualities, pronouns)) in zip(fig.subplots(1, len(axes), squeeze=False)[0], axes.items()):
        cells = per_value[(per_value["run"] == run) & (per_value["metric"] == metric)
                          & (per_value["attribute"] == CELL)]
        z = cells.set_index("value")["z"]
        grid = np.array([[z.get(f"{s}/{p}", np.nan) for p in pronouns] for s in sexualities], dtype=float)
        bound = max(2.0, float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 2.0)
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
        ax.set_xticks(range(len(pronouns)), pronouns)
        ax.set_yticks(range(len(sexualities)), sexualities)
        for i in range(len(sexualities)):
            for j in range(len(pronouns)):
                if np.isfinite(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=7)
        ax.set_title(f"z of {metric}: {run}" if len(axes) > 1 else f"z of {metric}", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.tight_layout()
    return fig


def choices(runs: Mapping[str, pd.DataFrame]) -> Figure:
    """Per run and template, the share of CE answers by label (left) and by letter (right)."""
    heights = [0.5 * samples["template"].nunique() + 1.5 for samples in runs.values()]
    fig = new_figure(9, sum(heights))
    grid = fig.subplots(len(runs), 2, squeeze=False, gridspec_kw={"height_ratios": heights})
    for (left_ax, right_ax), (run, samples) in zip(grid, runs.items()):
        ce = samples[samples["ce_correct"].notna()]
        templates = sorted(ce["template"].unique())
        for ax, column, names in ((left_ax, "ce_label", [*LABELS, "none"]),
                                  (right_ax, "ce_letter", [*LETTERS, "none"])):
            shares = pd.crosstab(ce["template"], ce[column].fillna("none"), normalize="index").reindex(templates)
            left = np.zeros(len(templates))
            for name in names:
                width = shares[name].to_numpy() if name in shares else np.zeros(len(templates))
                ax.barh(templates, width, left=left, label=name)
                left += width
            ax.set_xlim(0, 1)
            title = f"chosen {column.split('_')[1]}"
            ax.set_title(f"{title}: {run}" if len(runs) > 1 else title, fontsize=9)
            ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    return fig
