"""Writing what users read: figures as PNG and PDF, tables as tidy CSV beside a Markdown rendering."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

FIGURE_FORMATS = ("png", "pdf")
REPORT = "report.md"


@contextmanager
def staged_dir(final: str | Path) -> Iterator[Path]:
    """A fresh folder beside `final` to write an analysis into: it replaces `final` whole once the block ends, and is
    removed if the block fails, so outputs appear together or not at all. An existing `final` must be an earlier
    output (it holds report.md) or empty: nothing else is ever replaced."""
    final = Path(final)
    if final.exists() and (not final.is_dir() or (any(final.iterdir()) and not (final / REPORT).is_file())):
        raise ValueError(f"--out {final}: exists and is not an earlier analysis (no {REPORT}); expected a new or "
                         "empty folder, or an earlier analysis output to replace")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    try:
        yield tmp
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace_dir(tmp: Path, final: Path) -> None:
    """Move the finished `tmp` directory to `final`; an older `final` is deleted only once the new one is in place."""
    tmp.chmod(0o755)  # mkdtemp makes it private to its owner
    if not final.exists():
        os.replace(tmp, final)
        return
    trash = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.old-"))
    os.replace(final, trash / final.name)
    try:
        os.replace(tmp, final)
    except OSError:
        os.replace(trash / final.name, final)
        raise
    finally:
        shutil.rmtree(trash)


def save_figure(fig: Figure, out_dir: str | Path, stem: str, dpi: int = 200) -> list[Path]:
    """Save `fig` as `stem`.png and `stem`.pdf in `out_dir`; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.{fmt}" for fmt in FIGURE_FORMATS]
    for path in paths:
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return paths


@dataclass(frozen=True, eq=False)
class Table:
    """One written table: its tidy frame (as in the CSV), its Markdown and where both were written."""

    name: str
    title: str
    frame: pd.DataFrame
    markdown: str
    csv: Path
    md: Path


def write_table(out_dir: str | Path, name: str, title: str, frame: pd.DataFrame, markdown: str) -> Table:
    """Write `name`.csv (the tidy frame) and `name`.md (title, then `markdown`) into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, md = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    frame.to_csv(csv, index=False)
    md.write_text(f"{title}\n\n{markdown}")
    return Table(name, title, frame, markdown, csv, md)


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
