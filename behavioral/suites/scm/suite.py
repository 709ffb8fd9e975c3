"""Seed 004 as a suite: every (template, group, trait) question of Tables 1, 2 and 6, answered A-E."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from behavioral.core.options import SEED, check_bounds, option
from behavioral.suites.scm.card import CARD
from behavioral.suite.protocol import Suite
from behavioral.core.selection import select_rows
from behavioral.suites.scm.groups import group_set
from behavioral.suites.scm.items import ScmItem, items
from behavioral.suites.scm.options import GROUP, Options, ScmDeclaration
from behavioral.suites.scm.quadrants import scores
from behavioral.suites.scm.runs import MEASURES, measure_of, ratings, view

if TYPE_CHECKING:
    import pandas as pd

    from behavioral.analysis import Analysis, Run


@dataclass(frozen=True)
class AnalyzeOptions:
    """What an scm analysis compares the runs with, what a `--mode both` run is read by, and how the fidelity
    intervals resample the groups."""

    human: str | None = option(None, "us-stereotypes or a CSV of group,trait,rater,rating; none: us-stereotypes "
                                     "for that group set, no human ratings for the seed's groups", metavar="SOURCE")
    measure: str | None = option(None, "what a --mode both run is read by: its sampled replies or its answer-set "
                                       "scores; none: samples (generate and score runs are read by their own)",
                                 choices=MEASURES)
    bootstrap: int = option(1000, "resamples of the groups (with replacement, each with all its cells) for the "
                                  "intervals of mean W1 and W1 per dimension", metavar="N", minimum=1)
    seed: int = option(0, "seed of the resamples", name="--bootstrap-seed", metavar="N", **SEED)

    def __post_init__(self):
        if self.measure is not None and self.measure not in MEASURES:
            raise ValueError(f"unknown --measure {self.measure!r}; expected one of {', '.join(MEASURES)}")
        check_bounds(self)


class Scm(ScmDeclaration, Suite):
    """Seed 004: stereotype content (warmth, competence) of 50 intersectional groups, fidelity to human raters."""

    rows_hold = "group names, traits and question ids"
    card = CARD
    AnalyzeOptions = AnalyzeOptions

    def dataset(self, config) -> list[ScmItem]:
        options = config.options or Options()
        return items(group_set(options.groups), options.traits, options.templates)

    def facts(self, data: list[ScmItem]) -> dict:
        return {"n_items": len(data), "n_groups": len({i.group.name for i in data})}

    def groups(self, data: list[ScmItem]) -> Iterable[tuple[str, list[ScmItem]]]:
        """One group per (template, group): its traits share the prompt up to the question's first slot."""
        cells: dict[str, list[ScmItem]] = {}
        for item in data:
            cells.setdefault(f"{item.template}|{item.group.name}", []).append(item)
        return cells.items()

    def view(self, rows: pd.DataFrame, config: dict) -> pd.DataFrame:
        """A run's rows as the analysis reads them (runs.view)."""
        return view(rows, config)

    def behaviour(self, run: Run, **where) -> pd.DataFrame:
        """Per group of kind `group` (each group of the rows, in the suite's order): its warmth and competence
        scores (quadrants.scores) from the ratings of the run's measure (a `both` run: its samples), of the rows
        `where` selects; NaN where it has no rating of a dimension."""
        rows = select_rows(run.rows, where, "the run's rows")
        rated = ratings(rows, measure_of(run.config["mode"], None, run.run_dir))
        groups = rows["group"].drop_duplicates()
        out = scores(rated).set_index("group").reindex(groups).reset_index()
        out.insert(0, "kind", GROUP)
        return out.rename(columns={"group": "identity"})

    def analyze(self, runs: Sequence[Run], options: AnalyzeOptions) -> Analysis:
        from behavioral.suites.scm.analysis import analyze

        return analyze(runs, options)


SUITE = Scm()
