"""A suite's headline numbers, one row per run (and per grouping the suite reports): the number a sweep's top page
prints per model and suite, with its interval, what that interval is over and the sample size, so every suite's
`headline.csv` has one shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace

import pandas as pd

from behavioral.analysis.caveats import joined
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Section, Table


@dataclass(frozen=True)
class Headline:
    """One headline number of one run: `measure` names it (and its grouping), `low`/`high` bound its interval (NaN
    where it has none), `interval` says what that interval is, over `n` `n_unit` (events, questions, ...); `note`
    what the number cannot show, or ""; `warning` what about the run makes the number doubtful (behavioral.analysis.
    caveats: low answer mass, one answer for every item, refusals, a partial run), or ""."""

    run: str
    measure: str
    value: float
    low: float
    high: float
    interval: str
    n: int
    n_unit: str
    note: str = ""
    warning: str = ""


COLUMNS = [f.name for f in fields(Headline)]
FORMATS = dict.fromkeys(("run", "measure", "interval", "n_unit", "note", "warning"), "text") | {"n": "count"}
TEXT = ("Each run's headline numbers: the value, its interval (what it is over in `interval`), the sample size `n` "
        "that interval is over, what the number cannot show (`note`) and what about the run makes it doubtful "
        "(`warning`). Written as headline.csv for a sweep's top page.")


def headline_table(rows: Sequence[Headline]) -> Table:
    """The `headline` table of `rows` in the columns of Headline, in order."""
    frame = pd.DataFrame([asdict(row) for row in rows], columns=COLUMNS)
    shown = [*COLUMNS[:-2], "warning", "note"]  # the warning before the note: what a reader must see first
    return Table("headline", "Headline numbers", frame, formats=FORMATS, columns=dict(zip(shown, shown)))


def headline_section(rows: Sequence[Headline], runs: Sequence[Run]) -> Section:
    """The report's first section, "Headline": the headline table of `rows`, a partial run's rows warned so."""
    partial = {run.name: run.completeness.describe() for run in runs
               if not run.completeness.complete}
    warned = [replace(row, warning=joined((partial.get(row.run, ""), row.warning))) for row in rows]
    return Section("Headline", TEXT, (headline_table(warned),))
