"""A suite's headline numbers, one row per run (and per grouping the suite reports): the number a sweep's top page
prints per model and suite, with its interval, what that interval is over and the sample size, so every suite's
`headline.csv` has one shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import pandas as pd

from behavioral.analysis.spec import Section, Table


@dataclass(frozen=True)
class Headline:
    """One headline number of one run: `measure` names it (and its grouping), `low`/`high` bound its interval (NaN
    where it has none), `interval` says what that interval is, over `n` `n_unit` (events, questions, ...); `note`
    what the number cannot show, or ""."""

    run: str
    measure: str
    value: float
    low: float
    high: float
    interval: str
    n: int
    n_unit: str
    note: str = ""


COLUMNS = [f.name for f in fields(Headline)]
FORMATS = dict.fromkeys(("run", "measure", "interval", "n_unit", "note"), "text") | {"n": "count"}
TEXT = ("Each run's headline numbers: the value, its interval (what it is over in `interval`), the sample size `n` "
        "that interval is over, and what the number cannot show (`note`). Written as headline.csv for a sweep's top "
        "page.")


def headline_table(rows: Sequence[Headline]) -> Table:
    """The `headline` table of `rows` in the columns of Headline, in order."""
    frame = pd.DataFrame([asdict(row) for row in rows], columns=COLUMNS)
    return Table("headline", "Headline numbers", frame, formats=FORMATS)


def headline_section(rows: Sequence[Headline]) -> Section:
    """The report's first section, "Headline": the headline table of `rows`."""
    return Section("Headline", TEXT, (headline_table(rows),))
