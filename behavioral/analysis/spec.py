"""What a suite's analysis declares: tables, figures and report sections, gathered in an Analysis; the framework
(behavioral.analysis.write) writes them, so every suite's files, numbers and report have one shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from matplotlib.figure import Figure as MplFigure

from behavioral.analysis.formats import markdown


@dataclass(frozen=True, eq=False)
class Table:
    """A tidy table: written as `name`.csv (the frame) and `name`.md (its title, note and the frame printed by its
    column formats, see formats.cell; or `display`, a layout for reading such as a paper's wide table whose cells
    were composed with formats.cell). `name` may hold a sub-folder (`matrices/x`)."""

    name: str
    title: str
    frame: pd.DataFrame
    formats: Mapping[str, str] = field(default_factory=dict)
    digits: int = 3
    note: str = ""
    display: pd.DataFrame | None = None

    def shown(self) -> pd.DataFrame:
        """The frame the report prints (by its formats): `display` where given, else the frame."""
        return self.frame if self.display is None else self.display

    def markdown(self) -> str:
        """The table as Markdown: the shown frame by its formats."""
        return markdown(self.shown(), self.formats, self.digits)


@dataclass(frozen=True, eq=False)
class Figure:
    """A figure: written as `name`.png and `name`.pdf; built on a matplotlib Figure (see new_figure), never pyplot,
    so no global backend is switched."""

    name: str
    title: str
    figure: MplFigure


@dataclass(frozen=True, eq=False)
class Section:
    """One section of report.md: a heading, text, then its tables (printed) and figures (shown)."""

    title: str
    text: str = ""
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()


@dataclass(eq=False)
class Analysis:
    """A suite's analysis of one or more runs: the report's title and source (the seed paper), method notes, its
    sections, tables written but not printed (`files`), JSON files (name -> data) and what the manifest records
    besides the runs and options (`record`)."""

    title: str
    source: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[Table] = field(default_factory=list)
    json: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)

    def tables(self) -> list[Table]:
        """Every table, in report order, then the files-only ones."""
        return [t for s in self.sections for t in s.tables] + self.files

    def figures(self) -> list[Figure]:
        """Every figure, in report order."""
        return [f for s in self.sections for f in s.figures]


def new_figure(width: float = 6.4, height: float = 4.8) -> MplFigure:
    """A matplotlib Figure of that size in inches, outside pyplot (safe in threads and without a display)."""
    return MplFigure(figsize=(width, height))


def scope(can: Sequence[str], cannot: Sequence[str]) -> Section:
    """The "what this can and cannot show" section of a study's report: one bullet per reading, each sentence built
    by the study from its own settings (events, held-out or not, controls run), so the limits printed are this
    run's."""
    text = "**Can show:**\n" + "".join(f"- {line}\n" for line in can)
    text += "\n**Cannot show:**\n" + "".join(f"- {line}\n" for line in cannot)
    return Section("What this can and cannot show", text.rstrip("\n"))
