"""One way to print a number: a table cell's text from its value and its column's format, with one rule for a
missing value (NaN, None, NA: an em dash), one for a yes-or-no value and one precision for the numbers printed
together (a column, a value and its interval); one way to print any other value in running text (`readable`); and
one way to put any text into Markdown so that no viewer makes markup or a link of it (`literal`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

MISSING = "—"
YES, NO = "yes", "no"  # a yes-or-no value (a flag, a test's outcome) as a reader reads it
SMALL = 1e-3  # nonzero numbers all below this print in significant digits (three decimals would show 0.000)
# Column formats a table may declare; any other float is printed with `digits` decimals.
FORMATS = ("percent", "points", "p", "count", "signed", "text")
# Characters a viewer may show unlike the text they are in: control characters (line breaks among them, Unicode's
# too) as \xNN, the bidirectional controls that reorder the text around them and the line separators as \uNNNN.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_UNICODE_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
# Text no Markdown renderer (CommonMark, GFM and its autolinks, markdown-it with linkify) makes markup or a link of:
# letters, digits, spaces inside, a few marks that open nothing, "_" only inside a word, "." only inside a number (so
# no domain or address), ":" only before a space or between digits (no scheme, a time of day), "/" and "=" never
# doubled, ">" not first and no list marker first (a value may follow "- "), and not an IPv4-like run of dots.
_PLAIN = re.compile(r"(?! |[-+] |\d+\) |>)(?:[^\W_]|[ ,;%+'()>\-—–−±×·…≤≥]|(?<=[^\W_])_(?=[^\W_])|(?<=\d)[.:](?=\d)"
                    r"|:(?= )|(?<!/)/(?!/)|(?<!=)=(?!=))*(?<! )")
_DOTTED = re.compile(r"\d\.\d+\.\d")


def visible(text: str) -> str:
    """`text` with every control character as \\xNN and every bidirectional control and line separator as
    \\uNNNN, so that what a reader sees is what it holds, in its order."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)
    return _UNICODE_CONTROLS.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def code_span(value: object) -> str:
    """`value` as a Markdown code span that shows it as it is, whatever it holds: fenced by more backticks than any
    run of them inside, control characters (a line break among them) and bidirectional controls escaped (visible)."""
    text = visible(str(value))
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if {text[:1], text[-1:]} & {"`", " "} else ""  # CommonMark drops one space either side
    return f"{fence}{pad}{text}{pad}{fence}"


def literal(value: object) -> str:
    """`value` (a name, a path, a label read from a file, a table cell) as Markdown that shows it as written and
    makes nothing of it: plain where it is made only of characters that form no markup or link (words, numbers such
    as 12.3% or +1.2, an em dash), else a code span."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) and not _DOTTED.search(text) else code_span(text)


def is_missing(value) -> bool:
    """True for None, NaN and pandas' NA."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def readable(value) -> str:
    """A value in running text (an option, a parameter) as a reader reads it: yes or no, "none" for a value left
    unset, a list's items separated by commas, anything else as written."""
    if isinstance(value, (bool, np.bool_)):
        return YES if value else NO
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(readable, value))
    return str(value)


def _decimal(value) -> bool:
    """Whether `value` is a number printed with decimals (a float; not a whole number or a yes-or-no value)."""
    return isinstance(value, float) and not is_missing(value)


def significant(values: Sequence) -> bool:
    """Whether numbers printed together go in significant digits: every nonzero decimal among them below SMALL
    (and at least one), so that fixed decimals would show none of them."""
    nonzero = [abs(v) for v in values if _decimal(v) and v and math.isfinite(v)]
    return bool(nonzero) and max(nonzero) < SMALL


def cell(value, fmt: str | None = None, digits: int = 3, scientific: bool | None = None) -> str:
    """`value` as a table prints it: `percent` (a share, one decimal and %), `points` (a difference of shares, signed
    percentage points), `p` (a p-value, 3 significant digits), `count` (a whole number), `signed` (a difference with
    its sign), `text`; a yes-or-no value as yes or no; floats otherwise with `digits` decimals, or in `digits`
    significant digits where `scientific` (a column's choice, see `column`; None: when nonzero and below SMALL)."""
    if is_missing(value):
        return MISSING
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown column format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if isinstance(value, (bool, np.bool_)):
        return readable(value)
    if fmt == "text" or isinstance(value, str) or not isinstance(value, (int, float)):
        return str(value)
    if fmt == "percent":
        return f"{100 * value:.1f}%"
    if fmt == "points":
        return f"{100 * value:+.1f}"
    if fmt == "p":
        return f"{value:.3g}"
    if fmt == "count" or isinstance(value, int):
        return f"{value:,.0f}" if fmt == "count" else str(value)
    sign = "+" if fmt == "signed" else ""
    if scientific is None and value and abs(value) < SMALL:
        return f"{value:{sign}.{digits}g}"
    return f"{value:{sign}.{max(digits - 1, 0)}e}" if scientific else f"{value:{sign}.{digits}f}"


def column(values: Sequence, fmt: str | None = None, digits: int = 3) -> list[str]:
    """Numbers printed together (a table's column, a value and its interval) at one precision: all in `digits`
    decimals, or all in `digits` significant digits where `significant` (see `cell`)."""
    scientific = significant(values)
    return [cell(v, fmt, digits, scientific) for v in values]


def cells(frame: pd.DataFrame, formats: Mapping[str, str] | None = None, digits: int = 3) -> list[list[str]]:
    """Each row of `frame` as a table prints it: every column by its format in `formats` and at one precision (see
    `column`); the Markdown and the HTML report print these same texts."""
    formats = formats or {}
    rows = [list(row) for row in frame.itertuples(index=False)]
    printed = [column([row[k] for row in rows], formats.get(c), digits) for k, c in enumerate(frame.columns)]
    return [[texts[i] for texts in printed] for i in range(len(rows))]


def pipe_table(headers: list[str], rows: list[list[str]]) -> str:
    """Printed `headers` and cell texts as a Markdown pipe table, each `literal` (a line break inside shown as
    \\x0a) with its `|` escaped (GFM needs it inside a code span too), so no text splits or ends a row or becomes
    markup."""
    def line(texts: list[str]) -> str:
        return "| " + " | ".join(literal(t).replace("|", "\\|") for t in texts) + " |"
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
