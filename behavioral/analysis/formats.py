"""One way to print a number: a table cell's text from its value and its column's format, with one rule for a
missing value (NaN, None, NA: an em dash)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

MISSING = "—"
# Column formats a table may declare; any other float is printed with `digits` decimals.
FORMATS = ("percent", "points", "p", "count", "signed", "text")


def is_missing(value) -> bool:
    """True for None, NaN and pandas' NA."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def cell(value, fmt: str | None = None, digits: int = 3) -> str:
    """`value` as a table prints it: `percent` (a share, one decimal and %), `points` (a difference of shares, signed
    percentage points), `p` (a p-value, 3 significant digits), `count` (a whole number), `signed` (a difference with
    its sign), `text`; floats otherwise with `digits` decimals, or significant digits when nonzero and below 10⁻³."""
    if is_missing(value):
        return MISSING
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown column format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "text" or isinstance(value, (str, bool)) or not isinstance(value, (int, float)):
        return str(value)
    if fmt == "percent":
        return f"{100 * value:.1f}%"
    if fmt == "points":
        return f"{100 * value:+.1f}"
    if fmt == "p":
        return f"{value:.3g}"
    if fmt == "count" or isinstance(value, int):
        return f"{value:,.0f}" if fmt == "count" else str(value)
    if value and abs(value) < 1e-3:
        return f"{value:+.{digits}g}" if fmt == "signed" else f"{value:.{digits}g}"
    return f"{value:+.{digits}f}" if fmt == "signed" else f"{value:.{digits}f}"


def cells(frame: pd.DataFrame, formats: Mapping[str, str] | None = None, digits: int = 3) -> list[list[str]]:
    """Each row of `frame` as a table prints it: every column by its format in `formats` (see `cell`); the Markdown
    and the HTML report print these same texts."""
    formats = formats or {}
    return [[cell(v, formats.get(c), digits) for c, v in zip(frame.columns, row)]
            for row in frame.itertuples(index=False)]


def pipe_table(headers: list[str], rows: list[list[str]]) -> str:
    """Printed `headers` and cell texts as a Markdown pipe table; a `|` or line break inside a cell is escaped, so
    no text splits or ends a row."""
    def line(texts: list[str]) -> str:
        return "| " + " | ".join(t.replace("|", "\\|").replace("\r", " ").replace("\n", " ") for t in texts) + " |"
    return "\n".join([line(headers), "|" + "---|" * len(headers), *map(line, rows)]) + "\n"


def markdown(frame: pd.DataFrame, formats: Mapping[str, str] | None = None, digits: int = 3) -> str:
    """`frame` as a Markdown pipe table: each column printed by its format in `formats` (see `cell`)."""
    return pipe_table(list(map(str, frame.columns)), cells(frame, formats, digits))


def finite_number(text: str) -> float | None:
    """The finite number `text` holds as written (a table cell, a lexicon column), else None (text, empty, NaN or
    an infinity)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
