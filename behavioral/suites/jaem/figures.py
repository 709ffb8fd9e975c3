"""Figures, a panel per run: z of each sexuality × pronoun cell of a metric, and the labels and letters chosen per
template. Drawn on behavioral.analysis.new_figure (no pyplot, no global backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from behavioral.analysis.figure_style import (
    LABEL_SIZE, MIN_FONT, PALETTE, count_range, grid_shape, heatmap_ticks, n_text, new_figure, styled,
)
from behavioral.suites.jaem.samples import LETTERS
from behavioral.suites.jaem.templates import LABELS

CELL = "sexuality × pronoun"


@styled
def z_heatmap(per_value: pd.DataFrame, metric: str, axes: Mapping[str, tuple[Sequence[str], Sequence[str]]]) -> Figure:
    """Heatmaps of z for the sexuality × pronoun cells of one metric, one per run (`axes`: run -> its sexuality
    and pronoun values, the rows and columns), at most two to a row, each titled with the samples per cell."""
    rows, columns = grid_shape(len(axes))
    height = 0.22 * max(len(s) for s, _ in axes.values()) + 1.2
    fig = new_figure(columns, height * rows)
    for ax, (run, (sexualities, pronouns)) in zip(fig.subplots(rows, columns, squeeze=False).ravel(), axes.items()):
        cells = per_value[(per_value["run"] == run) & (per_value["metric"] == metric)
                          & (per_value["attribute"] == CELL)]
        z = cells.set_index("value")["z"]
        grid = np.array([[z.get(f"{s}/{p}", np.nan) for p in pronouns] for s in sexualities], dtype=float)
        bound = max(2.0, float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 2.0)
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
        for i in range(len(sexualities)):
            for j in range(len(pronouns)):
                if np.isfinite(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=MIN_FONT)
        n = n_text(samples=count_range(cells["n"]) if len(cells) else 0) + " per cell"
        ax.set_title(f"z of {metric}: {run}\n{n}" if len(axes) > 1 else f"z of {metric}\n{n}")
        fig.colorbar(image, ax=ax, shrink=0.8)
        heatmap_ticks(ax, pronouns, sexualities)
    return fig


@styled
def choices(runs: Mapping[str, pd.DataFrame]) -> Figure:
    """Per run and template, the share of CE answers by label (left) and by letter (right), each panel titled with
    the samples it counts."""
    heights = [0.25 * samples["template"].nunique() + 1.2 for samples in runs.values()]
    fig = new_figure(2, sum(heights))
    grid = fig.subplots(len(runs), 2, squeeze=False, gridspec_kw={"height_ratios": heights})
    for (left_ax, right_ax), (run, samples) in zip(grid, runs.items()):
        ce = samples[samples["ce_correct"].notna()]
        templates = sorted(ce["template"].unique())
        for ax, column, names in ((left_ax, "ce_label", [*LABELS, "none"]),
                                  (right_ax, "ce_letter", [*LETTERS, "none"])):
            shares = pd.crosstab(ce["template"], ce[column].fillna("none"), normalize="index").reindex(templates)
            left = np.zeros(len(templates))
            for k, name in enumerate(names):
                width = shares[name].to_numpy() if name in shares else np.zeros(len(templates))
                ax.barh(templates, width, left=left, color=PALETTE[k % len(PALETTE)], label=name)
                left += width
            ax.set_xlim(0, 1)
            title = f"chosen {column.split('_')[1]}"
            title = f"{title}: {run}" if len(runs) > 1 else title
            ax.set_title(f"{title}\n{n_text(samples=len(ce))}")
            ax.legend(fontsize=LABEL_SIZE - 0.5, loc="lower right")
    return fig
