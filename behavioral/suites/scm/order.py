"""The suite's declared row order: groups as their group set lists them, traits as Table 2, templates as Table 6,
dimensions warmth then competence, attributes as Table 1. Every table is sorted by it, so the same rows read in any
order (a resumed run's parts, a shuffled CSV) give the same bytes."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from behavioral.suites.scm.groups import ATTRIBUTES, GROUPS
from behavioral.suites.scm.prompts import TEMPLATES
from behavioral.suites.scm.traits import DIMENSIONS, TRAITS


def _ranks(names) -> dict[str, int]:
    return {name: i for i, name in enumerate(names)}


# column -> value -> rank; group names are unique across the group sets, so one rank serves every set
ORDERS: dict[str, dict[str, int]] = {
    "group": _ranks(g.name for members in GROUPS.values() for g in members), "trait": _ranks(TRAITS),
    "template": _ranks(TEMPLATES), "dimension": _ranks(DIMENSIONS), "attribute": _ranks(ATTRIBUTES),
}


def _key(column: pd.Series) -> pd.Series:
    """A column's sort key: its declared rank, or its own values for a column without a declared order."""
    ranks = ORDERS.get(column.name)
    return column if ranks is None else column.map(ranks)


def in_order(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """`frame` sorted by `columns` (the first most significant), each in the suite's declared order."""
    return frame.sort_values(list(columns), key=_key, kind="stable").reset_index(drop=True)
