"""Seed 004 as a suite: every (template, group, trait) question of Tables 1, 2 and 6, answered A-E."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from behavioral.options import check_minimums, option
from behavioral.suites.scm.card import CARD
from behavioral.suite import CaptureSpec, Suite
from behavioral.selection import select_rows
from behavioral.suites.scm.groups import GROUPS, group_set
from behavioral.suites.scm.items import FIELDS, ScmItem, items
from behavioral.suites.scm.prompts import TEMPLATES, check_template
from behavioral.suites.scm.quadrants import scores
from behavioral.suites.scm.runs import MEASURES, measure_of, ratings, view
from behavioral.suites.scm.traits import TRAITS, check_trait

if TYPE_CHECKING:
    import pandas as pd

    from behavioral.analysis import Analysis, Run

GROUP = "group"  # the capture kind of the group a question asks about


@dataclass(frozen=True)
class Options:
    """What decides an scm run's items: the group set, traits (Table 2) and templates (Table 6)."""

    groups: str = option("seed", "seed: Table 1's 50 groups; us-stereotypes: the 16 groups of the shipped ratings",
                         choices=tuple(GROUPS))
    traits: tuple[str, ...] = option(tuple(TRAITS), "comma list of Table 2's traits", metavar="TRAITS")
    templates: tuple[str, ...] = option(TEMPLATES, "comma list of Table 6's question ids f01..f10, i01..i10",
                                        metavar="TEMPLATES")

    def __post_init__(self):
        group_set(self.groups)
        for flag, names, known in (("--traits", self.traits, "Table 2's traits (" + ", ".join(TRAITS) + ")"),
                                   ("--templates", self.templates, "Table 6's question ids f01..f10, i01..i10")):
            if not names:
                raise ValueError(f"{flag} names none; expected a comma list of {known}, or no {flag} for all")
        for name in self.traits:
            check_trait(name)
        for name in self.templates:
            check_template(name)
        object.__setattr__(self, "traits", tuple(self.traits))
        object.__setattr__(self, "templates", tuple(self.templates))


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
    seed: int = option(0, "seed of the resamples", name="--bootstrap-seed", metavar="N")

    def __post_init__(self):
        if self.measure is not None and self.measure not in MEASURES:
            raise ValueError(f"unknown --measure {self.measure!r}; expected one of {', '.join(MEASURES)}")
        check_minimums(self)


class Scm(Suite):
    """Seed 004: stereotype content (warmth, competence) of 50 intersectional groups, fidelity to human raters."""

    name = "scm"
    description = "seed 004: stereotype content A-E ratings of groups × traits, W1 fidelity to humans, FPR, quadrants"
    rows_hold = "group names, traits and question ids"
    card = CARD
    fields = FIELDS
    # `group`: the group a question asks about, decided up to its end by the phrasing (template), the trait (which
    # some phrasings put first) and the group. A final-token cell pools one group's question on one trait over the
    # phrasings.
    capture = CaptureSpec(spans={GROUP: ("identity", ("template", "trait", "group"))}, cell=("group", "trait"))
    Options = Options
    AnalyzeOptions = AnalyzeOptions
    # the seed's sampling: raw text, temperature 1, two samples per template (its two runs); replies are short (a
    # letter, cut at the first `###`)
    run_defaults = {"prompt_format": "plain", "temperature": 1.0, "samples": 2, "max_new_tokens": 16}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The Options' flags, and the seed's names of two shared run flags (they set RunConfig fields, not
        Options, so no option declares them)."""
        super().add_arguments(parser)
        parser.add_argument("--format", dest="prompt_format", choices=("plain", "chat"),
                            help="plain (default, as the seed): the raw text; chat: one user turn, no system message "
                                 "(same as --prompt-format)")
        parser.add_argument("--samples-per-template", dest="samples", type=int,
                            help="sampled replies per item (default 2, the seed's two runs; 1 with --mode score; "
                                 "same as --samples)")

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
