"""Figures: z of each sexuality × pronoun cell per metric, and the labels and letters chosen per template."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from behavioral.outputs import save_figure  # noqa: E402
from behavioral.suites.jaem.samples import LETTERS  # noqa: E402
from behavioral.suites.jaem.templates import LABELS  # noqa: E402


def z_heatmap(per_value: pd.DataFrame, metric: str, sexualities: list[str], pronouns: list[str], out: Path,
              stem: str) -> list[Path]:
    """Heatmap of z for the sexuality × pronoun cells of one metric (rows sexuality, columns pronoun)."""
    cells = per_value[(per_value["metric"] == metric) & (per_value["attribute"] == "sexuality × pronoun")]
    z = cells.set_index("value")["z"]
    grid = np.array([[z.get(f"{s}/{p}", np.nan) for p in pronouns] for s in sexualities], dtype=float)
    bound = max(2.0, float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 2.0)
    fig, ax = plt.subplots(figsize=(3.2, 0.35 * len(sexualities) + 1.2))
    image = ax.imshow(grid, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
    ax.set_xticks(range(len(pronouns)), pronouns)
    ax.set_yticks(range(len(sexualities)), sexualities)
    for i in range(len(sexualities)):
        for j in range(len(pronouns)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=7)
    ax.set_title(f"z of {metric}", fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.8)
    paths = save_figure(fig, out, stem)
    plt.close(fig)
    return paths


def choices(metrics: pd.DataFrame, out: Path, stem: str) -> list[Path]:
    """Per template, the share of CE answers by label (left) and by letter (right)."""
    ce = metrics[metrics["ce_correct"].notna()]
    templates = sorted(ce["template"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.5 * len(templates) + 1.5))
    for ax, column, names in ((axes[0], "ce_label", [*LABELS, "none"]), (axes[1], "ce_letter", [*LETTERS, None])):
        shares = pd.crosstab(ce["template"], ce[column].fillna("none"), normalize="index")
        names = [n or "none" for n in names]
        left = np.zeros(len(templates))
        for name in names:
            width = shares.reindex(templates)[name].to_numpy() if name in shares else np.zeros(len(templates))
            ax.barh(templates, width, left=left, label=name)
            left += width
        ax.set_xlim(0, 1)
        ax.set_title(f"chosen {column.split('_')[1]}", fontsize=9)
        ax.legend(fontsize=6, loc="lower right")
    paths = save_figure(fig, out, stem)
    plt.close(fig)
    return paths
