"""GIEBench figures: the share of each category (Figure 1), COT accuracy per category across runs with Wilson
intervals (Figure 3), and heatmaps of the shift from Raw to COT and ID per run and category (Tables 4 and 5 drawn);
each series or row names its run and measure (the answer it reads)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from behavioral.analysis import Figure, new_figure
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.metrics import OVERALL


def category_shares(counts: pd.Series) -> Figure:
    """Figure 1: each category's share of the items (`counts` by category: the first run's)."""
    counts = counts.reindex([c for c in CATEGORIES if c in counts.index])
    fig = new_figure(6, 6)
    ax = fig.subplots()
    ax.pie(counts.to_numpy(), labels=[f"{c}\n{n / counts.sum():.1%}" for c, n in counts.items()], startangle=90)
    ax.set_title(f"Identity categories ({int(counts.sum())} items)")
    return Figure("figure1_category_shares", "Figure 1: each identity category's share of the (first run's) items",
                  fig)


def cot_accuracy(acc: pd.DataFrame) -> Figure:
    """Figure 3: COT accuracy per category (and Overall) of every run and measure, as grouped bars with their Wilson
    intervals over the questions."""
    cot = acc[acc["prompt_type"] == "cot"]
    columns = list(dict.fromkeys(cot["category"]))
    series = list(cot.groupby(["run", "measure"], sort=False))
    fig = new_figure(max(8, 0.8 * len(columns) * max(1, len(series) / 2)), 4.5)
    ax = fig.subplots()
    width = 0.8 / max(1, len(series))
    for k, ((run, measure), rows) in enumerate(series):
        cells = rows.set_index("category").reindex(columns)
        values = cells["accuracy"].to_numpy()
        bars = np.vstack([values - cells["accuracy_low"].to_numpy(), cells["accuracy_high"].to_numpy() - values])
        ax.bar(np.arange(len(columns)) + k * width, 100 * values, width, yerr=100 * np.nan_to_num(bars), capsize=2,
               label=f"{run} ({measure})")
    ax.set_xticks(np.arange(len(columns)) + width * (len(series) - 1) / 2, columns, rotation=45, ha="right")
    ax.set_ylabel("COT accuracy (%, 95% Wilson interval)")
    ax.set_ylim(0, 100)
    ax.axhline(25, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=8)
    return Figure("figure3_cot_accuracy", "Figure 3: COT accuracy per category with its 95% Wilson interval over the "
                  "questions, every run and measure (the answer read; chance 25%)", fig)


def shift_heatmaps(shifts: pd.DataFrame) -> list[Figure]:
    """Heatmaps of the shift (percentage points) from Raw to COT and to ID: rows run (measure), columns categories."""
    figures = []
    for t in ("cot", "id"):
        rows = shifts[shifts["prompt_type"] == t]
        if rows.empty:
            continue
        table = rows.assign(label=rows["run"] + " (" + rows["measure"] + ")").pivot_table(
            index="label", columns="category", values="shift", sort=False)
        table = table[[c for c in (*CATEGORIES, OVERALL) if c in table.columns]] * 100
        fig = new_figure(1 + 0.7 * table.shape[1], 1.5 + 0.45 * table.shape[0])
        ax = fig.subplots()
        limit = max(1.0, float(np.nanmax(np.abs(table.to_numpy()))))
        image = ax.imshow(table.to_numpy(), cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
        for (i, j), v in np.ndenumerate(table.to_numpy()):
            ax.text(j, i, "" if np.isnan(v) else f"{v:+.1f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(table.shape[1]), table.columns, rotation=45, ha="right")
        ax.set_yticks(range(table.shape[0]), table.index)
        ax.set_title(f"Accuracy shift from Raw to {t.upper()} (pp)")
        fig.colorbar(image, ax=ax)
        figures.append(Figure(f"shift_{t}", f"Accuracy shift from Raw to {t.upper()} per run and category (points; "
                              "each row names its run and measure, the answer read; intervals in shift.csv)", fig))
    return figures
