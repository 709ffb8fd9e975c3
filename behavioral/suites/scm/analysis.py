"""The analysis of one or more scm runs (one per model, one group set): fidelity to the human ratings (W1 per cell,
per group and dimension, per trait), the inter-trait baseline, FPR overall and per attribute (Table 3), quadrants
and their agreement with humans, parse rates; computed whole before anything is written."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from behavioral.outputs import REPORT, staged_dir
from behavioral.suites.scm.fidelity import fidelity, inter_trait_baseline
from behavioral.suites.scm.human import SHIPPED, load_human
from behavioral.suites.scm.parity import fpr, fpr_by_attribute
from behavioral.suites.scm.quadrants import agreement, agreement_rates, quadrants
from behavioral.suites.scm.runs import load_model, run_facts
from behavioral.suites.scm.traits import DIMENSIONS

ANALYSIS_DIR = "analysis"
ALL_GROUPS = "all groups"
STATUSES = ("parsed", "unparsed", "ambiguous")


@dataclass
class Analysis:
    """Everything the tables, figures and report show."""

    group_set: str
    runs: dict[str, Path]  # model label -> run directory
    measures: dict[str, str]  # model label -> samples or score
    human_source: dict | None  # source, sha256, rows (None: model quadrants only)
    fidelity: pd.DataFrame  # model, group, trait, dimension, attribute, w1
    fpr: pd.DataFrame  # model, attribute (ALL_GROUPS first), fpr, n_groups, best, worst, dropped, flagged
    quadrants: pd.DataFrame  # source, group, warmth, competence, ..., quadrant, agrees
    agreement: pd.DataFrame  # by, level, rate (averaged over models)
    parse_rates: pd.DataFrame  # model, group, n, parsed, unparsed, ambiguous
    baseline: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict:
        """Per model: mean W1, per-dimension W1 and baseline, FPR, parse rates; and where the data came from."""
        models = {}
        for model in self.runs:
            fid = self.fidelity[self.fidelity.model == model]
            overall = self.fpr[(self.fpr.model == model) & (self.fpr.attribute == ALL_GROUPS)]
            rates = self.parse_rates[self.parse_rates.model == model]
            n = int(rates.n.sum())
            models[model] = {
                "run": str(self.runs[model]), "measure": self.measures[model],
                "mean_w1": _float(fid.w1.mean()) if len(fid) else None,
                "w1_by_dimension": {d: _float(fid[fid.dimension == d].w1.mean()) for d in DIMENSIONS} if len(fid)
                else None,
                "fpr": _float(overall.fpr.iloc[0]) if len(overall) else None,
                "parse_rates": {s: _float((rates[s] * rates.n).sum() / n) if n else None for s in STATUSES},
            }
        return {"group_set": self.group_set, "human": self.human_source, "baseline": self.baseline,
                "models": models}


def _float(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _labels(runs: Sequence[Path], facts: list[dict]) -> list[str]:
    """A short name per run: the model's id (a local path's folder name), the run directory added where two
    runs share a model."""
    names = [Path(f["model"]).name if Path(f["model"]).is_absolute() else f["model"] for f in facts]
    return [f"{n} ({Path(r).name})" if names.count(n) > 1 else n for n, r in zip(names, runs)]


def _lead(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """`frame` with `column` first."""
    return frame[[column, *[c for c in frame.columns if c != column]]]


def _parse_rates(frame: pd.DataFrame, model: str) -> pd.DataFrame:
    """Per group, the share of replies parsed, unparsed and ambiguous (score mode: all parsed)."""
    if "status" in frame.columns:
        status = frame.status.where(frame.status.isin(STATUSES[1:]), "parsed")
    else:
        status = pd.Series("parsed", index=frame.index)
    counts = pd.crosstab(frame.group, status).reindex(columns=STATUSES, fill_value=0)
    counts = counts.reindex([g for g in dict.fromkeys(frame.group)])
    n = counts.sum(axis=1)
    out = counts.div(n, axis=0).reset_index()
    out.insert(0, "model", model)
    out.insert(2, "n", n.to_numpy())
    return out


def compute(run_dirs: Sequence[str | Path], human: str | None = None, measure: str | None = None) -> Analysis:
    """The analysis of `run_dirs` against `human` (default: the shipped ratings of the runs' group set, if any)."""
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
    frames = {label: load_model(r, measure) for label, r in zip(labels, runs)}
    fid_parts, fpr_parts, quad_parts, agree_parts = [], [], [], []
    human_q = quadrants(human_frame) if human_frame is not None else None
    if human_q is not None:
        quad_parts.append(human_q.assign(source="human", agrees=np.nan))
    for label, frame in frames.items():
        model_q = quadrants(frame)
        if human_frame is not None:
            fid = fidelity(human_frame, frame)
            if frame.rating.isna().all():
                raise ValueError(f"{frame.attrs['run']}: no parsed rating (every reply unparsed or ambiguous); "
                                 "expected a run whose model answers A-E (try --mode score)")
            if fid.empty:
                raise ValueError(f"{frame.attrs['run']}: no (group, trait) cell in common with --human "
                                 f"{human_frame.attrs['source']}; expected ratings of the same groups and traits")
            fid_parts.append(fid.assign(model=label))
            overall = pd.DataFrame([{"attribute": ALL_GROUPS, **fpr(fid).row()}])
            fpr_parts.append(pd.concat([overall, fpr_by_attribute(fid)], ignore_index=True).assign(model=label))
            agreed = agreement(human_q, model_q)
            agree_parts.append(agreed.assign(model=label))
            model_q = model_q.merge(agreed[["group", "agrees"]], on="group", how="left")
        quad_parts.append(model_q.assign(source=label))
    fid_all = _lead(pd.concat(fid_parts, ignore_index=True), "model") if fid_parts else \
        pd.DataFrame(columns=["model", "group", "trait", "dimension", "attribute", "w1"])
    fpr_all = _lead(pd.concat(fpr_parts, ignore_index=True), "model") if fpr_parts else \
        pd.DataFrame(columns=["model", "attribute", "fpr", "n_groups", "best", "worst", "dropped", "flagged"])
    quads = pd.concat(quad_parts, ignore_index=True)
    quads = _lead(quads, "source")
    rates = agreement_rates(pd.concat(agree_parts, ignore_index=True)) if agree_parts else \
        pd.DataFrame(columns=["by", "level", "rate"])
    parse = pd.concat([_parse_rates(f, label) for label, f in frames.items()], ignore_index=True)
    return Analysis(group_set, dict(zip(labels, runs)), {k: f.attrs["measure"] for k, f in frames.items()},
                    None if human_frame is None else dict(human_frame.attrs), fid_all, fpr_all, quads, rates, parse,
                    inter_trait_baseline(human_frame) if human_frame is not None else {})


def analyze(run_dirs: Sequence[str | Path], out: str | Path | None = None, human: str | None = None,
            measure: str | None = None) -> Path:
    """Write the tables, figures, summary.json and report.md of `run_dirs` into `out` (default: the first run's
    analysis/); returns report.md. Every check happens before the first file is written."""
    from behavioral.suites.scm import figures, report

    analysis = compute(run_dirs, human, measure)
    final = Path(out) if out is not None else Path(run_dirs[0]) / ANALYSIS_DIR
    with staged_dir(final) as out:
        figure_paths = figures.write_figures(analysis, out)
        report.write_report(analysis, out, figure_paths)
    return final / REPORT
