"""Figures as users read them: saved as PNG and PDF, points labelled so coinciding ones stay readable (tables and
reports: behavioral.analysis)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

FIGURE_FORMATS = ("png", "pdf")
DPI = 200  # the PNG's resolution when a caller names none (the tests lower it: they read no pixels)


def save_figure(fig: Figure, out_dir: str | Path, stem: str, dpi: int | None = None) -> list[Path]:
    """Save `fig` as `stem`.png and `stem`.pdf in `out_dir` (the PNG at `dpi`, default DPI); returns the paths."""
    dpi = DPI if dpi is None else dpi
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.{fmt}" for fmt in FIGURE_FORMATS]
    for path in paths:
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return paths


def label_points(ax: Axes, points: np.ndarray, names: Sequence[str], fontsize: float = 7,
                 tolerance: float = 1e-3) -> None:
    """Annotate 2-D points with their names; points that coincide (closer than `tolerance` of the plot's span, as
    identical rows do after t-SNE or UMAP) get one label listing every name instead of names printed over each
    other."""
    points = np.asarray(points, dtype=float)
    span = float(np.ptp(points, axis=0).max()) if len(points) else 0.0
    groups: list[list[int]] = []
    for i, point in enumerate(points):
        same = next((g for g in groups if np.abs(points[g[0]] - point).max() <= tolerance * span), None)
        if same is None:
            groups.append([i])
        else:
            same.append(i)
    for members in groups:
        x, y = points[members[0]]
        ax.annotate(", ".join(names[i] for i in members), (x, y), textcoords="offset points", xytext=(4, 3),
                    fontsize=fontsize)
