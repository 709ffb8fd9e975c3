"""What a suite's analysis declares: tables, figures and report sections, gathered in an Analysis; the framework
(behavioral.analysis.write) writes them, so every suite's files, numbers and report have one shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from matplotlib.figure import Figure as MplFigure

from behavioral.report.formats import cells, pipe_table


@dataclass(frozen=True, eq=False)
class Table:
    """A tidy table: written as `name`.csv (the frame) and `name`.md (its title, note and the printed columns). The
    report prints `columns` (frame column -> its header; empty: every column under its own name), one quantity per
    column, each cell by its column's format (see formats.cell); `definitions` (header -> what it holds) go to the
    report's "How to read" section, so the caption (`title`, `note`) stays a sentence. `name` may hold a sub-folder
    (`matrices/x`)."""

    name: str
    title: str
    frame: pd.DataFrame
    formats: Mapping[str, str] = field(default_factory=dict)
    digits: int = 3
    note: str = ""
    columns: Mapping[str, str] = field(default_factory=dict)
    definitions: Mapping[str, str] = field(default_factory=dict)

    def shown(self) -> pd.DataFrame:
        """The printed columns under their headers (the frame's own where `columns` is empty)."""
        if not self.columns:
            return self.frame
        return self.frame[[c for c in self.columns if c in self.frame.columns]].rename(columns=dict(self.columns))

    def printed(self) -> tuple[list[str], list[list[str]]]:
        """The headers and each row's cell texts, as report.md and report.html print them."""
        shown = self.shown()
        formats = {self.columns.get(c, c): fmt for c, fmt in self.formats.items()}
        return [str(c) for c in shown.columns], cells(shown, formats, self.digits)

    def markdown(self) -> str:
        """The table as Markdown: its printed headers and cells."""
        return pipe_table(*self.printed())


@dataclass(frozen=True, eq=False)
class Figure:
    """A figure: written as `name`.png and `name`.pdf; built on a matplotlib Figure (see sized_figure), never pyplot,
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
    sections, tables written but not printed (`files`), JSON files (name -> data), what the manifest records
    besides the runs and options (`record`) and what each option means left unset (`unset`, set by the framework
    from the options' flags for the report's options line)."""

    title: str
    source: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[Table] = field(default_factory=list)
    json: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
    unset: dict[str, str] = field(default_factory=dict)

    def tables(self) -> list[Table]:
        """Every table, in report order, then the files-only ones."""
        return [t for s in self.sections for t in s.tables] + self.files

    def figures(self) -> list[Figure]:
        """Every figure, in report order."""
        return [f for s in self.sections for f in s.figures]


def sized_figure(width: float = 6.4, height: float = 4.8) -> MplFigure:
    """A matplotlib Figure of that size in inches, outside pyplot (safe in threads and without a display)."""
    return MplFigure(figsize=(width, height))


def scope(can: Sequence[str], cannot: Sequence[str]) -> Section:
    """The "what this can and cannot show" section of a study's report: one bullet per reading, each sentence built
    by the study from its own settings (events, held-out or not, controls run), so the limits printed are this
    run's; a heading with no reading under it is left out."""
    lists = [f"**{heading}:**\n" + "".join(f"- {line}\n" for line in lines)
             for heading, lines in (("Can show", can), ("Cannot show", cannot)) if lines]
    return Section("What this can and cannot show", "\n".join(lists).rstrip("\n"))
