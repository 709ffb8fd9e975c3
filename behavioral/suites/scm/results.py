"""The numbers of an scm analysis of one or more runs (one per model or setting, one group set), computed whole
before anything is written: fidelity to the human ratings (W1 per cell), FPR overall and per attribute (Table 3),
quadrants and their agreement with humans on the cells both rate, parse rates, the inter-trait baseline, and what
was left out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from behavioral.analysis import Run
from behavioral.report.formats import code_span, literal
from behavioral.suites.scm.fidelity import fidelity, group_intervals, inter_trait_baseline
from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.human import SHIPPED, load_human
from behavioral.suites.scm.order import in_order
from behavioral.suites.scm.parity import fpr, fpr_by_attribute
from behavioral.suites.scm.quadrants import (
    ALL_TRAITS, agreement, agreement_rates, describe_cells, dimension_gap, quadrants, shared_cells,
)
from behavioral.suites.scm.runs import measure_of, ratings
from behavioral.suites.scm.traits import DIMENSIONS

ALL_GROUPS = "all groups"
HUMAN = "human"
STATUSES = ("parsed", "unparsed", "ambiguous")
QUADRANT_COLUMNS = ("source", "cells", "group", "warmth", "competence", "high_warmth", "high_competence", "quadrant",
                    "gender", "privileged", "agrees")
AGREEMENT_COLUMNS = ("run", "group", "gender", "privileged", "quadrant_human", "quadrant_model", "agrees")
FIDELITY = ("mean_w1", *(f"w1_{d}" for d in DIMENSIONS))  # the fidelity numbers with an interval over groups


@dataclass
class Results:
    """Every number the tables, figures and report show; tables hold a `run` column (a source column where humans
    are a source too)."""

    group_set: str
    runs: list[str]  # run names, in the order given
    measures: dict[str, str]  # run name -> samples or score
    human: dict | None  # source, sha256, rows of the human ratings (None: model quadrants only)
    fidelity: pd.DataFrame  # run, group, trait, dimension, attribute, w1
    fpr: pd.DataFrame  # run, attribute (ALL_GROUPS first), fpr, n_groups, best, worst, dropped, flagged
    quadrants: pd.DataFrame  # QUADRANT_COLUMNS: each source's own (ALL_TRAITS) and on the cells shared with humans
    agreement: pd.DataFrame  # AGREEMENT_COLUMNS: per run, the groups both it and humans place in a quadrant
    parse_rates: pd.DataFrame  # run, group, n, parsed, unparsed, ambiguous
    baseline: dict[str, float] = field(default_factory=dict)  # dimension -> the human inter-trait W1
    shared_cells: dict[str, dict] = field(default_factory=dict)  # run -> describe_cells of its cells shared with humans
    unrated: dict[str, list[str]] = field(default_factory=dict)  # source -> groups without a rating
    rated: dict[str, dict] = field(default_factory=dict)  # source -> describe_cells of every cell it rated
    notes: list[str] = field(default_factory=list)  # what the analysis left out, and why

    def agreement_rates(self, by_run: bool = False) -> pd.DataFrame:
        """Agreement rate with the human quadrant by gender and by privilege: averaged over runs (Fig. 3), or per
        run (`run` first)."""
        if not by_run:
            return agreement_rates(self.agreement)
        parts = [agreement_rates(part).assign(run=name) for name, part in self.agreement.groupby("run", sort=False)]
        return _concat(parts, ["run", "by", "level", "rate"])

    def intervals(self, n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
        """Per run, the percentile intervals over resamples of its groups of mean W1 and W1 per dimension
        (fidelity.group_intervals): run, <name>_low, <name>_high for each of FIDELITY (no rows without humans)."""
        rows = [{"run": name, **group_intervals(part, n_resamples, seed)}
                for name, part in self.fidelity.groupby("run", sort=False)]
        return pd.DataFrame(rows, columns=["run", *(f"{n}_{end}" for n in FIDELITY for end in ("low", "high"))])

    def summary(self) -> pd.DataFrame:
        """One row per run: its measure, mean W1, W1 per dimension, FPR over all groups, the share of replies parsed,
        unparsed and ambiguous, and the groups and cells it shares with humans (NaN without human ratings)."""
        rows = []
        for name in self.runs:
            fid = self.fidelity[self.fidelity.run == name]
            overall = self.fpr[(self.fpr.run == name) & (self.fpr.attribute == ALL_GROUPS)]
            rates = self.parse_rates[self.parse_rates.run == name]
            n = rates.n.sum()
            cells = self.shared_cells.get(name, {})
            rows.append({"run": name, "measure": self.measures[name], "mean_w1": fid.w1.mean(),
                         **{f"w1_{d}": fid[fid.dimension == d].w1.mean() for d in DIMENSIONS},
                         "fpr": overall.fpr.iloc[0] if len(overall) else math.nan,
                         **{s: (rates[s] * rates.n).sum() / n if n else math.nan for s in STATUSES},
                         "shared_groups": cells.get("groups"), "shared_cells": cells.get("cells")})
        return pd.DataFrame(rows)


def _concat(parts: list[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    """`parts` stacked, `columns` first in that order (no parts: an empty frame of `columns`)."""
    if not parts:
        return pd.DataFrame(columns=list(columns))
    frame = pd.concat(parts, ignore_index=True)
    return frame.reindex(columns=[*columns, *[c for c in frame.columns if c not in columns]])


def _parse_rates(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """Per group, the share of replies parsed, unparsed and ambiguous (score measure: all parsed)."""
    if "status" in frame.columns:
        status = frame.status.where(frame.status.isin(STATUSES[1:]), "parsed")
    else:
        status = pd.Series("parsed", index=frame.index)
    counts = pd.crosstab(frame.group, status).reindex(columns=STATUSES, fill_value=0)
    n = counts.sum(axis=1)
    out = counts.div(n, axis=0).reset_index()
    out.insert(0, "run", name)
    out.insert(2, "n", n.to_numpy())
    return in_order(out, ("group",))


def _unrated(frame: pd.DataFrame, group_set: str) -> list[str]:
    """The groups of `group_set` that `frame` holds no rating of, in the set's order."""
    rated = set(frame.dropna(subset=["rating"]).group)
    return [g.name for g in GROUPS[group_set] if g.name not in rated]


def _own_quadrants(source: str, frame: pd.DataFrame, notes: list[str]) -> list[pd.DataFrame]:
    """The quadrants of `source` on every trait it rated (cells ALL_TRAITS), or none and a note where it lacks a
    dimension."""
    gap = dimension_gap(frame)
    if gap is not None:
        notes.append(f"No quadrants for {code_span(source)}: {gap}; quadrants need warmth and competence.")
        return []
    return [quadrants(frame).assign(source=source, cells=ALL_TRAITS)]


def _versus_human(run: Run, human: pd.DataFrame, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """W1 per cell of `run` against `human` and its FPR overall and per attribute; a run without a parsed rating or
    a cell in common is a ValueError."""
    if frame.rating.isna().all():
        raise ValueError(f"{run.run_dir}: no parsed rating (every reply unparsed or ambiguous); expected a run whose "
                         "model answers A-E (try --mode score)")
    fid = fidelity(human, frame)
    if fid.empty:
        raise ValueError(f"{run.run_dir}: no (group, trait) cell in common with --human {human.attrs['source']}; "
                         "expected ratings of the same groups and traits")
    overall = pd.DataFrame([{"attribute": ALL_GROUPS, **fpr(fid).row()}])
    parity = pd.concat([overall, fpr_by_attribute(fid)], ignore_index=True)
    return fid.assign(run=run.name), parity.assign(run=run.name)


def _agreement(name: str, human: pd.DataFrame, model: pd.DataFrame,
               notes: list[str]) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """The quadrants of `human` and of run `name` on the (group, trait) cells both rate (the run's with `agrees`),
    and their agreement() rows; neither, and a note, where those cells lack a dimension."""
    gap = dimension_gap(model)  # the shared cells are the same on both sides
    if gap is not None:
        notes.append(f"No quadrant agreement for {code_span(name)}: the cells it shares with the human ratings have "
                     f"{gap}; quadrants need warmth and competence.")
        return [], []
    human_q, model_q = quadrants(human), quadrants(model)
    agreed = agreement(human_q, model_q).assign(run=name)
    model_q = model_q.merge(agreed[["group", "agrees"]], on="group", how="left")
    return [human_q.assign(source=HUMAN, cells=f"shared with {name}"),
            model_q.assign(source=name, cells=f"shared with {HUMAN}")], [agreed]


def _no_quadrant_notes(quads: pd.DataFrame) -> list[str]:
    """A note per source and cells naming the groups that have no quadrant (no rating on one dimension)."""
    missing = quads[quads.quadrant.isna()]
    return [f"No quadrant for {', '.join(part.group)} in {code_span(source)} ({literal(cells)}): no rating on one "
            "dimension."
            for (source, cells), part in missing.groupby(["source", "cells"], sort=False)]


def _group_set(runs: Sequence[Run]) -> str:
    """The one group set the runs rate, or a ValueError listing each run's."""
    sets = [run.options.get("groups", "seed") for run in runs]
    if len(set(sets)) > 1:
        listed = "; ".join(f"{run.run_dir}: {s}" for run, s in zip(runs, sets))
        raise ValueError(f"the runs rate different group sets ({listed}); expected runs of one --groups set")
    return sets[0]


def _human(source: str | None, group_set: str) -> pd.DataFrame | None:
    """The human ratings of `source` (default: the shipped ratings of `group_set`, if any; None where there are
    none); shipped ratings of another group set are a ValueError."""
    source = source if source is not None else (group_set if group_set in SHIPPED else None)
    if source in SHIPPED and source != group_set:
        raise ValueError(f"--human {source} rates the {source} groups, these runs the {group_set} groups; expected "
                         f"runs made with --groups {source}, or a CSV of ratings of the {group_set} groups")
    return load_human(source, group_set) if source is not None else None


def compute(runs: Sequence[Run], human: str | None = None, measure: str | None = None) -> Results:
    """The analysis of `runs` (each read by its own measure, a `both` run by `measure`) against the `human` ratings
    (a shipped set's name or a CSV; default: the shipped ratings of the runs' group set, if any)."""
    group_set = _group_set(runs)
    measures = {run.name: measure_of(run.config["mode"], measure, run.run_dir) for run in runs}
    human_frame = _human(human, group_set)
    frames = {run.name: ratings(run.rows, measures[run.name]) for run in runs}
    sources = ({} if human_frame is None else {HUMAN: human_frame}) | frames
    notes: list[str] = []
    quad_parts = [q for name, frame in sources.items() for q in _own_quadrants(name, frame, notes)]
    fid_parts, fpr_parts, agree_parts, cells = [], [], [], {}
    for run in runs if human_frame is not None else ():  # fidelity and agreement need human ratings
        fid, parity = _versus_human(run, human_frame, frames[run.name])
        fid_parts.append(fid)
        fpr_parts.append(parity)
        shared_human, shared_model = shared_cells(human_frame, frames[run.name])
        cells[run.name] = describe_cells(shared_model)
        placed, agreed = _agreement(run.name, shared_human, shared_model, notes)
        quad_parts += placed
        agree_parts += agreed
    quads = _concat(quad_parts, QUADRANT_COLUMNS)
    return Results(
        group_set, [run.name for run in runs], measures, None if human_frame is None else dict(human_frame.attrs),
        _concat(fid_parts, ["run", "group", "trait", "dimension", "attribute", "w1"]),
        _concat(fpr_parts, ["run", "attribute", "fpr", "n_groups", "best", "worst", "dropped", "flagged"]),
        quads, _concat(agree_parts, AGREEMENT_COLUMNS),
        pd.concat([_parse_rates(f, name) for name, f in frames.items()], ignore_index=True),
        baseline=inter_trait_baseline(human_frame) if human_frame is not None else {}, shared_cells=cells,
        unrated={name: _unrated(frame, group_set) for name, frame in sources.items()},
        rated={name: describe_cells(frame) for name, frame in sources.items()},
        notes=notes + _no_quadrant_notes(quads))
