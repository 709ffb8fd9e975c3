"""The scm analysis declared for behavioral.analysis: per run, fidelity to the human ratings, parity, quadrants and
parse rates; across runs, the fidelity summary (with intervals over the groups, our addition), Table 3 with a column
per run and the quadrant agreement; figures 1-5; the method and what was left out. Every table and figure names the
measure each run is read by."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from behavioral.analysis import Analysis, Figure, Run, Section, Table
from behavioral.analysis.caveats import few_parsed, joined, low_mass, one_answer
from behavioral.report.formats import code_span, is_missing, literal
from behavioral.analysis.headline import Headline, headline_section
from behavioral.suites.scm import figures
from behavioral.suites.scm.fidelity import P_COLUMNS
from behavioral.suites.scm.parity import THRESHOLD
from behavioral.suites.scm.results import ALL_GROUPS, FIDELITY, STATUSES, Results, compute
from behavioral.suites.scm.runs import ratings
from behavioral.suites.scm.traits import DIMENSIONS, TRAITS

RATES = dict.fromkeys(STATUSES, "percent")
MEASURE = {"measure": "samples: each generated reply's parsed rating (sampled at the run's temperature); score: the "
                      "scored distribution over A-E (its expected rating for quadrants)."}
INTERVALS = {"*_low, *_high": "95% percentile bootstrap interval over resamples of the shared groups, each with all "
                              "its cells (our addition; FPR, a ratio of the two extreme groups, has none)."}

W1_NOTE = ("over {cells} cells; the interval covers which groups were rated, not the raters or replies within a "
           "cell, the traits or the templates")


def warning(run: Run, measure: str) -> str:
    """What makes a run's ratings doubtful: few parsed replies or one rating for almost every reply (samples), little
    mass on the five letters or one most probable rating for almost every prompt (score)."""
    rated = ratings(run.rows, measure)
    if measure == "samples":
        return joined((few_parsed(rated["rating"].notna().mean(), "a rating"),
                       one_answer(rated["rating"], "replies")))
    scored = rated[list(P_COLUMNS)].dropna()
    return joined((low_mass(rated["answer_mass"].mean(), None, "the five letters"),
                   one_answer(scored.idxmax(axis=1).str[1:], "prompts")))


def headlines(summary: pd.DataFrame, n_resamples: int, warned: dict[str, str]) -> list[Headline]:
    """Per run of the fidelity summary, mean W1 over the cells shared with humans and its bootstrap interval over
    the groups, with what makes it doubtful (`warned`: run -> warning); without human ratings a row without a
    number."""
    rows = []
    for r in summary.itertuples(index=False):
        groups = 0 if is_missing(r.shared_groups) else int(r.shared_groups)
        interval = (f"95% percentile bootstrap over {groups} groups, each with all its cells ({n_resamples} "
                    "resamples)") if groups else "none"
        note = W1_NOTE.format(cells=int(r.shared_cells)) if groups else \
            "no W1: no human rating shares a cell with this run (see --human)"
        rows.append(Headline(r.run, f"mean W1 ({r.measure})", r.mean_w1, r.mean_w1_low, r.mean_w1_high, interval,
                             groups, "groups", note, warned.get(r.run, "")))
    return rows


def _read_by(results: Results) -> str:
    """Which measure each run is read by, for a title."""
    return "runs read by their measure: " + ", ".join(f"{code_span(n)} by {m}" for n, m in results.measures.items())


def table3(results: Results) -> pd.DataFrame:
    """FPR per attribute (rows) and run (columns), the FPR over all groups last."""
    if results.fpr.empty:
        return pd.DataFrame(columns=["attribute"])
    wide = results.fpr.pivot(index="attribute", columns="run", values="fpr")
    order = [a for a in dict.fromkeys(results.fpr.attribute) if a != ALL_GROUPS] + [ALL_GROUPS]
    return wide.reindex(index=order, columns=results.runs).reset_index().rename_axis(columns=None)


def _cells_line(name: str, cells: dict) -> str:
    """The cells a run's agreement with humans uses, as one list item."""
    per_dimension = ", ".join(f"{d} {len(cells[d])} of {sum(TRAITS[t] == d for t in TRAITS)} traits "
                              f"({', '.join(cells[d]) or 'none'})" for d in DIMENSIONS)
    return f"- {code_span(name)}: {cells['groups']} groups, {cells['cells']} cells; {per_dimension}"


def _parity_text(results: Results) -> str:
    """The FPRs below the threshold and the groups left out of an FPR, one line each where there are any."""
    flagged = results.fpr[results.fpr.flagged.astype(bool)]
    dropped = results.fpr[results.fpr.dropped.astype(str).str.len() > 0]
    lines = []
    if len(flagged):
        lines.append(f"FPR below {THRESHOLD}: " + "; ".join(
            f"{literal(r.run)} {r.attribute} {r.fpr:.3f} (worst {r.worst})" for r in flagged.itertuples()) + ".")
    if len(dropped):
        lines.append("Groups left out of an FPR for missing cells: " + "; ".join(
            f"{literal(r.run)} {r.attribute}: {r.dropped}" for r in dropped.itertuples()) + ".")
    return "\n\n".join(lines)


def _quadrants_text(results: Results) -> str:
    """What the rows of quadrants.csv are computed on."""
    own = "`quadrants.csv` holds each source's quadrants on every trait it rated (`cells` = `all traits`"
    if results.human is None:
        return own + ")."
    return (own + ": a run's are its own, not compared with humans) and, per run, the human's and the run's on the "
                  "cells they share (`shared with ...`), which the agreement and the figures use.")


def _left_out(results: Results) -> str:
    """What was left out: groups without a rating per source, and the notes of the computation; one item each."""
    unrated = "; ".join(f"{code_span(source)}: {', '.join(groups)}" for source, groups in results.unrated.items()
                        if groups)
    items = [f"Groups without a rating (absent from that source's rows): {unrated}."] if unrated else []
    return "\n".join(f"- {item}" for item in [*items, *results.notes])


def _notes(results: Results) -> list[str]:
    """The method: the human reference, the measure each run is read by, and what each number is."""
    if results.human is None:
        human = ("No human ratings (the seed's are unreleased; pass `--human ratings.csv`): model quadrants and parse "
                 "rates only.")
    else:
        h = results.human
        human = f"Human ratings: {code_span(h['source'])} ({h['rows']} ratings, sha256 `{h['sha256'][:16]}…`)."
    read = "; ".join(f"{code_span(name)} by {measure}" for name, measure in results.measures.items())
    return [f"Group set {code_span(results.group_set)}. " + human,
            f"Runs read by their measure ({read}): `samples`, each reply's parsed rating (A = 5 … E = 1; unparsed and "
            "ambiguous replies excluded); `score`, per template the A-E probabilities renormalised, their expected "
            "rating for quadrants.",
            "W1 (Eq. 1) per (group, trait) cell compares the human and the run's rating distributions on 1..5; the "
            "inter-trait baseline is the mean W1 between two traits of one dimension for one human-rated group.",
            f"FPR (Eq. 2): min over groups of summed W1 over traits divided by the max; below {THRESHOLD} (the 4/5ths "
            "rule) flags a risk of epistemic injustice; 0/0 is 1, fewer than two groups —.",
            "Quadrants: a group's warmth and competence are the means of its cell means, high when strictly above the "
            "source's mean over groups; a group without a rating on one dimension has no quadrant.",
            "Our addition: mean W1 and W1 per dimension carry a 95% percentile bootstrap interval over resamples of "
            "the groups shared with humans (each drawn group with all its cells; `--bootstrap`, `--bootstrap-seed`). "
            "It says how much the mean depends on which groups were rated; it does not cover the sampling of raters "
            "or replies within a cell, the choice of traits or templates, and FPR (a ratio of the two extreme "
            "groups) has none."]


def _float(value) -> float | None:
    return None if is_missing(value) else float(value)


def _summary_json(results: Results, summary: pd.DataFrame) -> dict:
    """summary.json: per run its measure, mean W1, W1 per dimension, FPR, parse rates and the cells shared with
    humans; the baseline, the human source, the groups without a rating and the notes."""
    runs = {r["run"]: {"measure": r["measure"], "mean_w1": _float(r["mean_w1"]),
                       "w1_by_dimension": {d: _float(r[f"w1_{d}"]) for d in DIMENSIONS},
                       "fpr": _float(r["fpr"]), "parse_rates": {s: _float(r[s]) for s in STATUSES},
                       "shared_cells": results.shared_cells.get(r["run"])} for r in summary.to_dict("records")}
    return {"group_set": results.group_set, "human": results.human, "baseline": results.baseline, "runs": runs,
            "groups_without_ratings": results.unrated, "notes": results.notes}


def analyze(runs: Sequence[Run], options) -> Analysis:
    """The declared tables, figures and report of `runs` (options: scm's AnalyzeOptions)."""
    results = compute(runs, options.human, options.measure)
    summary = results.summary().merge(results.intervals(options.bootstrap, options.seed), on="run", how="left")
    read_by = _read_by(results)
    warned = {run.name: warning(run, results.measures[run.name]) for run in runs}
    sections = [headline_section(headlines(summary, options.bootstrap, warned), runs)]
    if results.human is not None:
        baseline = pd.DataFrame({"dimension": list(results.baseline), "w1": list(results.baseline.values())})
        fidelity = [c for name in FIDELITY for c in (name, f"{name}_low", f"{name}_high")]
        sections += [
            Section("Fidelity (W1 on the 1-5 scale; Eq. 1)", tables=(
                Table("fidelity_summary", "Fidelity per run: mean W1 over cells and per dimension, and FPR.",
                      summary[["run", "measure", *fidelity, "fpr", "shared_groups", "shared_cells"]],
                      formats={"shared_groups": "count", "shared_cells": "count"},
                      definitions=MEASURE | INTERVALS | {
                          "shared_groups, shared_cells": "the groups and (group, trait) cells the run shares with "
                                                         "the human ratings."}),
                Table("baseline", "Inter-trait baseline (human ratings): W1 between two traits of one dimension.",
                      baseline)),
                figures=(Figure("fig4_fidelity", "W1 per group and dimension against the inter-trait baseline "
                                f"({read_by})", figures.fig4_fidelity(results)),
                         Figure("fig5_traits", f"W1 per trait ({read_by})", figures.fig5_traits(results)))),
            Section("Table 3: fidelity parity ratio", _parity_text(results), tables=(
                Table("table3_fpr", f"Table 3: fidelity parity ratio per attribute ({read_by}).", table3(results),
                      definitions={"a column per run": "its fidelity parity ratio, the ratio of the two extreme "
                                                       f"groups' fidelity; below {THRESHOLD} flags a risk of epistemic "
                                                       "injustice. It has no interval over groups."}),)),
            Section("Quadrant agreement with humans (averaged over runs)",
                    "Humans and each run are placed in quadrants on the (group, trait) cells both rate, and only there "
                    "compared:\n\n" + "\n".join(_cells_line(n, c) for n, c in results.shared_cells.items()),
                    tables=(Table("agreement", f"Agreement with the human quadrant, averaged over runs ({read_by}).",
                                  results.agreement_rates(), formats={"rate": "percent"}),
                            *([Table("agreement_by_run", f"Agreement with the human quadrant per run ({read_by}).",
                                     results.agreement_rates(by_run=True), formats={"rate": "percent"})]
                              if len(runs) > 1 else [])),
                    figures=() if results.agreement.empty else (
                        Figure("fig3_agreement", f"Agreement with the human quadrant by gender and by privilege "
                               f"({read_by})", figures.fig3_agreement(results)),))]
    placed = () if results.quadrants.quadrant.isna().all() else (
        Figure("fig1_quadrants", f"Warmth against competence ({read_by})", figures.fig1_quadrants(results)),
        Figure("fig2_assignments", f"Quadrant of every group ({read_by})", figures.fig2_assignments(results)))
    sections.append(Section("Quadrants", _quadrants_text(results), figures=placed))
    left_out = _left_out(results)
    if left_out:
        sections.append(Section("Left out", left_out))
    sections.append(Section("Parse rates", "Unparsed and ambiguous replies are excluded; per group in "
                                           "`parse_rates.csv`.", tables=(
        Table("parse_rates_summary", "Share of replies parsed, unparsed and ambiguous per run.",
              summary[["run", "measure", *STATUSES]], formats=RATES, definitions=MEASURE),)))
    return Analysis(
        title="Stereotype content fidelity (seed 004)",
        source="Seed 004: *Quantifying Risk of Epistemic Harm from the Use of AI Surrogates in Social Science "
               "Research* (an anonymous ICML submission). The card (behavioral/suites/scm/README.md) lists every "
               "deviation from the authors.",
        sections=sections, notes=_notes(results),
        files=[Table("fidelity", f"W1 per run, group and trait ({read_by}).", results.fidelity),
               Table("fpr", f"FPR per run over all groups and per attribute ({read_by}).", results.fpr,
                     formats={"n_groups": "count"}),
               Table("quadrants", f"Quadrants per source and cells ({read_by}).", results.quadrants),
               Table("agreement_groups", f"Human and run quadrant per group on their shared cells ({read_by}).",
                     results.agreement),
               Table("parse_rates", f"Parse rates per run and group ({read_by}).", results.parse_rates,
                     formats={"n": "count", **RATES})],
        json={"summary.json": _summary_json(results, summary)},
        record={"group_set": results.group_set, "human": results.human})
