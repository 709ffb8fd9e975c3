"""Selecting rows by field values, one rule for run rows and activation indexes: a value or a list of values per
field."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd


def values_of(value: object) -> list:
    """A selection's values for one field: the list, tuple or set given, or the single value."""
    return list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]


def select_rows(frame: pd.DataFrame, where: Mapping[str, object], what: str = "the rows") -> pd.DataFrame:
    """The rows of `frame` whose columns hold the values of `where` (a value or a list of values per column); a
    column `frame` lacks is a ValueError naming `what` and the columns it has."""
    for column, value in where.items():
        if column not in frame.columns:
            fields = ", ".join(c for c in frame.columns if not str(c).startswith("_"))
            raise ValueError(f"{what} have no field {column!r}; fields: {fields}")
        frame = frame[frame[column].isin(values_of(value))]
    return frame


def field_values(frame: pd.DataFrame, field: str, where: Mapping[str, object], what: str = "the rows") -> list:
    """The distinct values of `field` among the rows of `frame` that `where` selects (fields `frame` lacks
    ignored), sorted: e.g. the events of one block of a run."""
    rows = select_rows(frame, {k: v for k, v in where.items() if k in frame.columns}, what)
    return sorted(rows[field].dropna().unique(), key=str)
