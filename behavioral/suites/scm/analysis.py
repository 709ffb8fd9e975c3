"""The analysis of one or more scm runs (one per model, one group set): fidelity to the human ratings (W1 per cell,
per group and dimension, per trait), the inter-trait baseline, FPR overall and per attribute (Table 3), quadrants
and their agreement with humans on the cells both rate, parse rates, what was left out; computed whole before
anything is written."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from behavioral.output_folder import output_folder
from behavioral.outputs import REPORT
from behavioral.run_labels import run_labels
from behavioral.suites.scm.fidelity import fidelity, inter_trait_baseline
from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.human import SHIPPED, load_human
from behavioral.suites.scm.order import in_order
from behavioral.suites.scm.parity import fpr, fpr_by_attribute
from behavioral.suites.scm.quadrants import (
    ALL_TRAITS, agreement, agreement_rates, describe_cells, dimension_gap, quadrants, shared_cells,
)
from behavioral.suites.scm.runs import load_model, run_facts
from behavioral.suites.scm.traits import DIMENSIONS

ANALYSIS_DIR = "analysis"
ALL_GROUPS = "all groups"
STATUSES = ("parsed", "unparsed", "ambiguous")
QUADRANT_COLUMNS = ("source", "cells", "group", "warmth", "competence", "high_warmth", "high_competence", "quadrant",
                    "gender", "privileged", "agrees")


@dataclass
class Analysis:
    """Everything the tables, figures and report show."""

    group_set: str
    runs: dict[str, Path]  # model label -> run directory
    measures: dict[str, str]  # model label -> samples or score
    completeness: dict[str, str]  # model label -> how much of its plan the run holds (Completeness.describe)
    human_source: dict | None  # source, sha256, rows (None: model quadrants only)
    fidelity: pd.DataFrame  # model, group, trait, dimension, attribute, w1
    fpr: pd.DataFrame  # model, attribute (ALL_GROUPS first), fpr, n_groups, best, worst, dropped, flagged
    quadrants: pd.DataFrame  # source, cells (ALL_TRAITS or shared with ...), group, warmth, ..., quadrant, agrees
    agreement: pd.DataFrame  # by, level, rate (averaged over models, on the cells each shares with humans)
    parse_rates: pd.DataFrame  # model, group, n, parsed, unparsed, ambiguous
    baseline: dict[str, float] = field(default_factory=dict)
    shared_cells: dict[str, dict] = field(default_factory=dict)  # model label -> describe_cells of its shared cells
    unrated: dict[str, list[str]] = field(default_factory=dict)  # human or model label -> groups without a rating
    notes: list[str] = field(default_factory=list)  # what the analysis left out, and why

    def summary(self) -> dict:
        """Per model: mean W1, per-dimension W1 and baseline, FPR, parse rates, the cells compared with humans; the
        groups without a rating, the notes; and where the data came from."""
        models = {}
        for model in self.runs:
            fid = self.fidelity[self.fidelity.model == model]
            overall = self.fpr[(self.fpr.model == model) & (self.fpr.attribute == ALL_GROUPS)]
            rates = self.parse_rates[self.parse_rates.model == model]
            n = int(rates.n.sum())
            models[model] = {
                "run": str(self.runs[model]), "measure": self.measures[model],
                "completeness": self.completeness[model],
                "mean_w1": _float(fid.w1.mean()) if len(fid) else None,
                "w1_by_dimension": {d: _float(fid[fid.dimension == d].w1.mean()) for d in DIMENSIONS} if len(fid)
                else None,
                "fpr": _float(overall.fpr.iloc[0]) if len(overall) else None,
                "parse_rates": {s: _float((rates[s] * rates.n).sum() / n) if n else None for s in STATUSES},
                "shared_cells": self.shared_cells.get(model),
            }
        return {"group_set": self.group_set, "human": self.human_source, "baseline": self.baseline,
                "models": models, "groups_without_ratings": self.unrated, "notes": self.notes}


def _float(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _labels(runs: Sequence[Path], facts: list[dict]) -> list[str]:
    """A unique short name per run: the model's id (a local path's folder name), with as much of the run's path as
    tells apart runs of one model (behavioral.run_labels)."""
    return run_labels([Path(f["model"]).name if Path(f["model"]).is_absolute() else f["model"] for f in facts], runs)


def _concat(parts: list[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    """`parts` stacked, `columns` first in that order (no parts: an empty frame of `columns`)."""
    if not parts:
        return pd.DataFrame(columns=list(columns))
    frame = pd.concat(parts, ignore_index=True)
    return frame.reindex(columns=[*columns, *[c for c in frame.columns if c not in columns]])


def _parse_rates(frame: pd.DataFrame, model: str) -> pd.DataFrame:
    """Per group, the share of replies parsed, unparsed and ambiguous (score mode: all parsed)."""
    if "status" in frame.columns:
        status = frame.status.where(frame.status.isin(STATUSES[1:]), "parsed")
    else:
        status = pd.Series("parsed", index=frame.index)
    counts = pd.crosstab(frame.group, status).reindex(columns=STATUSES, fill_value=0)
    n = counts.sum(axis=1)
    out = counts.div(n, axis=0).reset_index()
    out.insert(0, "model", model)
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
        notes.append(f"No quadrants for `{source}`: {gap}; quadrants need warmth and competence.")
        return []
    return [quadrants(frame).assign(source=source, cells=ALL_TRAITS)]


def _versus_human(label: str, human: pd.DataFrame, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """W1 per cell of model `label` against `human` and its FPR overall and per attribute; a model without a
    parsed rating or a cell in common is a ValueError."""
    fid = fidelity(human, frame)
    if frame.rating.isna().all():
        raise ValueError(f"{frame.attrs['run']}: no parsed rating (every reply unparsed or ambiguous); "
                         "expected a run whose model answers A-E (try --mode score)")
    if fid.empty:
        raise ValueError(f"{frame.attrs['run']}: no (group, trait) cell in common with --human "
                         f"{human.attrs['source']}; expected ratings of the same groups and traits")
    overall = pd.DataFrame([{"attribute": ALL_GROUPS, **fpr(fid).row()}])
    return fid.assign(model=label), pd.concat([overall, fpr_by_attribute(fid)], ignore_index=True).assign(model=label)


def _agreement(label: str, human: pd.DataFrame, model: pd.DataFrame,
               notes: list[str]) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """The quadrants of `human` and of model `label` on the (group, trait) cells both rate (the model's with
    `agrees`), and their agreement() rows; neither, and a note, where those cells lack a dimension."""
    gap = dimension_gap(model)  # the shared cells are the same on both sides
    if gap is not None:
        notes.append(f"No quadrant agreement for `{label}`: the cells it shares with the human ratings have {gap}; "
                     "quadrants need warmth and competence.")
        return [], []
    human_q, model_q = quadrants(human), quadrants(model)
    agreed = agreement(human_q, model_q).assign(model=label)
    model_q = model_q.merge(agreed[["group", "agrees"]], on="group", how="left")
    return [human_q.assign(source="human", cells=f"shared with {label}"),
            model_q.assign(source=label, cells="shared with human")], [agreed]


def _no_quadrant_notes(quads: pd.DataFrame) -> list[str]:
    """A note per source and cells naming the groups that have no quadrant (no rating on one dimension)."""
    missing = quads[quads.quadrant.isna()]
    return [f"No quadrant for {', '.join(part.group)} in `{source}` ({cells}): no rating on one dimension."
            for (source, cells), part in missing.groupby(["source", "cells"], sort=False)]


def compute(run_dirs: Sequence[str | Path], human: str | None = None, measure: str | None = None,
            allow_partial: bool = False) -> Analysis:
    """The analysis of `run_dirs` against `human` (default: the shipped ratings of the runs' group set, if any); a
    run that has not finished is refused unless `allow_partial`."""
    runs = [Path(r) for r in run_dirs]
    facts = [run_facts(r) for r in runs]
    sets = {f["group_set"] for f in facts}
    if len(sets) > 1:
        listed = "; ".join(f"{r}: {f['group_set']}" for r, f in zip(runs, facts))
        raise ValueError(f"the runs rate different group sets ({listed}); expected runs of one --groups set")
    group_set = sets.pop()
    source = human if human is not None else (group_set if group_set in SHIPPED else None)
    if source in SHIPPED and source != group_set:
        raise ValueError(f"--human {source} rates the {source} groups, these runs the {group_set} groups; expected "
                         f"runs made with --groups {source}, or a CSV of ratings of the {group_set} groups")
    human_frame = load_human(source, group_set) if source is not None else None
    labels = _labels(runs, facts)
    frames = {label: load_model(r, measure, allow_partial) for label, r in zip(labels, runs)}
    sources = ({} if human_frame is None else {"human": human_frame}) | frames
    notes: list[str] = []
    quad_parts = [q for name, frame in sources.items() for q in _own_quadrants(name, frame, notes)]
    fid_parts, fpr_parts, agree_parts, cells = [], [], [], {}
    compared = frames if human_frame is not None else {}  # fidelity and agreement need human ratings
    for label, frame in compared.items():
        fid, parity = _versus_human(label, human_frame, frame)
        fid_parts.append(fid)
        fpr_parts.append(parity)
        shared_human, shared_model = shared_cells(human_frame, frame)
        cells[label] = describe_cells(shared_model)
        placed, agreed = _agreement(label, shared_human, shared_model, notes)
        quad_parts += placed
        agree_parts += agreed
    quads = _concat(quad_parts, QUADRANT_COLUMNS)
    return Analysis(
        group_set, dict(zip(labels, runs)), {k: f.attrs["measure"] for k, f in frames.items()},
        {k: f.attrs["completeness"] for k, f in frames.items()},
        None if human_frame is None else dict(human_frame.attrs),
        _concat(fid_parts, ["model", "group", "trait", "dimension", "attribute", "w1"]),
        _concat(fpr_parts, ["model", "attribute", "fpr", "n_groups", "best", "worst", "dropped", "flagged"]),
        quads, agreement_rates(_concat(agree_parts, ["model", "group", "gender", "privileged", "agrees"])),
        pd.concat([_parse_rates(f, label) for label, f in frames.items()], ignore_index=True),
        baseline=inter_trait_baseline(human_frame) if human_frame is not None else {}, shared_cells=cells,
        unrated={name: _unrated(frame, group_set) for name, frame in sources.items()},
        notes=notes + _no_quadrant_notes(quads))


def analyze(run_dirs: Sequence[str | Path], out: str | Path | None = None, human: str | None = None,
            measure: str | None = None, allow_partial: bool = False) -> Path:
    """Write the tables, figures, summary.json and report.md of `run_dirs` into `out` (default: the first run's
    analysis/); returns report.md. Every check happens before the first file is written."""
    from behavioral.suites.scm import figures, report

    analysis = compute(run_dirs, human, measure, allow_partial)
    final = Path(out) if out is not None else Path(run_dirs[0]) / ANALYSIS_DIR
    record = {"runs": {label: str(Path(run).resolve()) for label, run in analysis.runs.items()},
              "analysis": {"group_set": analysis.group_set, "human": analysis.human_source, "measure": measure}}
    with output_folder(final, "analyze scm", record) as out:
        figure_paths = figures.write_figures(analysis, out.path)
        report.write_report(analysis, out.path, figure_paths)
    return final / REPORT
