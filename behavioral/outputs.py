"""Writing what users read: figures as PNG and PDF, tables as tidy CSV beside a Markdown rendering."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

FIGURE_FORMATS = ("png", "pdf")


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
