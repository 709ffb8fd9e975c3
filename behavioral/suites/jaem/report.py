"""report.md of a jaem analysis: runs, how each measure was obtained (or why it is unavailable), answer rates,
Table 1, per-attribute findings, comparisons, and every output written."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from behavioral.outputs import REPORT, Table
from behavioral.run_reader import Completeness
from behavioral.suites.jaem.lexicon import LEE_RULE, RULE

UNAVAILABLE = "unavailable"


def _cell(value, digits: int) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.{digits}g}" if abs(value) < 1e-3 and value else \
            f"{value:.{digits}f}"
    return str(value)


def markdown(frame: pd.DataFrame, digits: int = 4) -> str:
    """A pipe table of `frame` (NaN shown as —)."""
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(_cell(v, digits) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def _measures(facts: dict) -> list[str]:
    lexicon, era = facts["vad_lexicon"], facts["era_model"]
    if lexicon is None:
        ae = f"AE (VAD): {UNAVAILABLE}: no --vad-lexicon given (the NRC VAD Lexicon is research-only; supply it)."
    else:
        ae = (f"AE (VAD): `{lexicon['source']}`, {lexicon['terms']} terms on {lexicon['scale']}, sha256 "
              f"`{lexicon['sha256'][:16]}…`. Scoring rule: {RULE}. {LEE_RULE}.")
        if lexicon["demo"]:
            ae += (" **Demo lexicon: ~80 words written by this project; the VAD numbers below only show the "
                   "pipeline working and are not research results.**")
    era_line = (f"ERA (EPITOME IP/EX/ER): {UNAVAILABLE}: no --era-model given (no EPITOME weights ship)."
                if era is None else f"ERA (EPITOME IP/EX/ER): classifiers `{era}`; labels 0/1/2, argmax.")
    return ["## Measures", "", "- CE: accuracy of choosing the Empathetic answer (unparsed replies count as wrong).",
            f"- {ae}", f"- {era_line}", ""]


def _rates(runs: dict[str, pd.DataFrame]) -> list[str]:
    lines = ["## Answers", "", "| Run | Samples | CE from | CE unparsed | Gen empty | VAD unmatched |",
             "|---|---|---|---|---|---|"]
    for label, m in runs.items():
        ce = m[m["ce_source"].notna()]
        gen = m[m["reply"].notna()]
        unparsed = f"{(ce['ce_letter'].isna()).mean():.1%}" if len(ce) else "—"
        empty = f"{(gen['reply'] == '').mean():.1%}" if len(gen) else "—"
        unmatched = f"{int(gen['vad_v'].isna().sum())} of {len(gen)}" if len(gen) and gen["vad_v"].notna().any() \
            else "—"
        source = ", ".join(sorted(ce["ce_source"].unique())) if len(ce) else "—"
        lines.append(f"| {label} | {len(m)} | {source} | {unparsed} | {empty} | {unmatched} |")
    return lines + ["", "*CE unparsed*: generated replies with no letter (a leading letter, else `Answer: X` or "
                    "`answer is X`). *Gen empty*: replies empty after the cut at the speaker's next turn. "
                    "*VAD unmatched*: replies or utterances with no lexicon word (NaN, left out of means).", ""]


def _findings(effects: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> list[str]:
    lines = ["## Per attribute", "",
             "z = (mean of a value − run mean) / (run sd / √n), normal p, Holm over the values of the attribute; "
             "omnibus χ² (CE) or Kruskal-Wallis (others), Holm over the 8 attributes (7 and sexuality × pronoun). "
             "**The paper names no test: these are ours.**", ""]
    for label, (per_value, per_attr) in effects.items():
        lines += [f"### {label}", ""]
        if per_value.empty:
            lines += ["No metric available.", ""]
            continue
        significant = per_value[per_value["p_holm"] < 0.05]
        omni = per_attr[per_attr["p_holm"] < 0.05]
        lines.append(f"- Values with p_holm < 0.05: {len(significant)}; attributes with omnibus p_holm < 0.05: "
                     f"{len(omni)}.")
        for metric, group in per_value.groupby("metric", sort=False):
            top = group.loc[group["z"].abs().idxmax()] if group["z"].notna().any() else None
            if top is not None:
                lines.append(f"- {metric}: largest |z| {top['z']:.2f} for {top['attribute']} = {top['value']} "
                             f"(n {top['n']}, p_holm {top['p_holm']:.3g}).")
        lines += ["", markdown(per_attr), ""]
    return lines


def write_report(out: Path, run_dirs: list[Path], manifests: list[dict], runs: dict[str, pd.DataFrame],
                 effects: dict, written: list[Table], facts: dict, done: Sequence[Completeness]) -> Path:
    """Write report.md into `out`; returns its path."""
    lines = ["# JaEm-ST: intersectional empathy", "", "## Runs", ""]
    for label, d, m, finished in zip(runs, run_dirs, manifests, done):
        c = m["config"]
        o = c.get("options") or {}
        lines.append(f"- **{label}**: `{d}`; model `{c.get('model')}`; mode `{c.get('mode')}`; tasks "
                     f"{', '.join(o.get('tasks') or [])}; templates {', '.join(sorted(c.get('templates') or {}))}; "
                     f"{c.get('n_samples')} samples (full dims {', '.join(o.get('full_dims') or [])}, "
                     f"{o.get('repeats')} repeats, limit {o.get('limit')}); layout `{o.get('layout')}`; seed "
                     f"{c.get('seed')}; {finished.describe()}")
    lines += ["", *_measures(facts), *_rates(runs), "## Table 1", "", written[0].markdown, "",
              *_findings(effects), "## Between templates and runs", "",
              "χ² (CE) or Mann-Whitney (others), Holm over the 7 metrics of each pair. **Ours, not the paper's.** "
              f"See `comparisons.csv` ({sum(1 for _ in written[-1].frame.itertuples())} rows).", "",
              "## Outputs", ""]
    lines += [f"- `{t.csv.name}` / `{t.md.name}`: {t.title}" for t in written]
    figures = sorted(p.name for p in out.glob("*.png"))
    lines += [f"- `{name}`" for name in figures]
    path = out / REPORT
    path.write_text("\n".join(lines) + "\n")
    return path
