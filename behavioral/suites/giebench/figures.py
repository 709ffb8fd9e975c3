"""GIEBench figures: the share of each category (Figure 1), COT accuracy per category across runs with Wilson
intervals (Figure 3), and heatmaps of the shift from Raw to COT and ID per run and category (Tables 4 and 5 drawn);
each series or row names its run and measure (the answer it reads)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure as MplFigure

from behavioral.analysis import Figure
from behavioral.analysis.figure_style import (
    GREY, LABEL_SIZE, PALETTE, count_range, heatmap_ticks, legend_below, n_text, new_figure, styled,
)
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.metrics import OVERALL


@styled
def _pie(counts: pd.Series) -> MplFigure:
    """Each category's share of the items as a pie, a column wide, titled with the items."""
    fig = new_figure(1, 3.4)
    ax = fig.subplots()
    ax.pie(counts.to_numpy(), labels=[f"{c}\n{n / counts.sum():.1%}" for c, n in counts.items()], startangle=90,
           colors=[PALETTE[i % len(PALETTE)] for i in range(len(counts))], textprops={"fontsize": LABEL_SIZE},
           wedgeprops={"linewidth": 0.5, "edgecolor": "white"})
    ax.set_title(f"Identity categories\n{n_text(items=int(counts.sum()))}")
    return fig


def category_shares(counts: pd.Series) -> Figure:
    """Figure 1: each category's share of the items (`counts` by category: the first run's)."""
    counts = counts.reindex([c for c in CATEGORIES if c in counts.index])
    return Figure("figure1_category_shares", "Figure 1: each identity category's share of the (first run's) items",
                  _pie(counts))


@styled
def _bars(acc: pd.DataFrame) -> MplFigure:
    """COT accuracy per category of every run and measure as grouped bars with their Wilson intervals, two columns
    wide, the title carrying the questions per bar."""
    cot = acc[acc["prompt_type"] == "cot"]
    columns = list(dict.fromkeys(cot["category"]))
    series = list(cot.groupby(["run", "measure"], sort=False))
    fig = new_figure(2, 3.0)
    ax = fig.subplots()
    width = 0.8 / max(1, len(series))
    for k, ((run, measure), rows) in enumerate(series):
        cells = rows.set_index("category").reindex(columns)
        values = cells["accuracy"].to_numpy()
        bars = np.vstack([values - cells["accuracy_low"].to_numpy(), cells["accuracy_high"].to_numpy() - values])
        ax.bar(np.arange(len(columns)) + k * width, 100 * values, width, yerr=100 * np.nan_to_num(bars), capsize=1.5,
               color=PALETTE[k % len(PALETTE)], error_kw={"linewidth": 0.6}, label=f"{run} ({measure})")
    ax.set_xticks(np.arange(len(columns)) + width * (len(series) - 1) / 2, columns, rotation=45, ha="right")
    ax.set_ylabel("COT accuracy (%, 95% Wilson interval)")
    ax.set_ylim(0, 100)
    ax.axhline(25, color=GREY, lw=0.6, ls="--")
    ax.set_title(f"COT accuracy per category\n{n_text(questions=count_range(cot['n']))} per bar")
    legend_below(fig, *ax.get_legend_handles_labels(), columns=3)
    return fig


def cot_accuracy(acc: pd.DataFrame) -> Figure:
    """Figure 3: COT accuracy per category (and Overall) of every run and measure, as grouped bars with their Wilson
    intervals over the questions."""
    return Figure("figure3_cot_accuracy", "Figure 3: COT accuracy per category with its 95% Wilson interval over the "
                  "questions, every run and measure (the answer read; chance 25%)", _bars(acc))


@styled
def _shift_heatmap(rows: pd.DataFrame, prompt_type: str) -> MplFigure:
    """The shift (percentage points) from Raw to `prompt_type`: rows run (measure), columns categories, each cell's
    value printed; the title carries the questions per cell."""
    table = rows.assign(label=rows["run"] + " (" + rows["measure"] + ")").pivot_table(
        index="label", columns="category", values="shift", sort=False)
    table = table[[c for c in (*CATEGORIES, OVERALL) if c in table.columns]] * 100
    fig = new_figure(2, 1.6 + 0.3 * table.shape[0])
    ax = fig.subplots()
    limit = max(1.0, float(np.nanmax(np.abs(table.to_numpy()))))
    image = ax.imshow(table.to_numpy(), cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    for (i, j), v in np.ndenumerate(table.to_numpy()):
        ax.text(j, i, "" if np.isnan(v) else f"{v:+.1f}", ha="center", va="center", fontsize=LABEL_SIZE)
    fig.colorbar(image, ax=ax)
    ax.set_title(f"Accuracy shift from Raw to {prompt_type.upper()} (pp)\n"
                 f"{n_text(questions=count_range(rows['n']))} per cell")
    heatmap_ticks(ax, list(table.columns), list(table.index))
    return fig


def shift_heatmaps(shifts: pd.DataFrame) -> list[Figure]:
    """Heatmaps of the shift (percentage points) from Raw to COT and to ID: rows run (measure), columns categories."""
    return [Figure(f"shift_{t}", f"Accuracy shift from Raw to {t.upper()} per run and category (points; each row "
                   "names its run and measure, the answer read; intervals in shift.csv)",
                   _shift_heatmap(shifts[shifts["prompt_type"] == t], t))
            for t in ("cot", "id") if (shifts["prompt_type"] == t).any()]
