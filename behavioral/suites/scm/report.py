"""The written outputs of an scm analysis: fidelity.csv, fpr.csv, quadrants.csv, parse_rates.csv, Table 3,
summary.json and report.md."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from behavioral.outputs import REPORT, write_table
from behavioral.provenance import provenance
from behavioral.suites.scm.parity import THRESHOLD
from behavioral.suites.scm.traits import DIMENSIONS, TRAITS

SEED = "004_50cddb5e32a56268.txt"


def _markdown(frame: pd.DataFrame, digits: int = 3) -> str:
    """A frame as a Markdown table, floats rounded."""
    shown = frame.map(lambda v: f"{v:.{digits}f}" if isinstance(v, float) else v)
    header = "| " + " | ".join(map(str, shown.columns)) + " |"
    rule = "|" + "---|" * len(shown.columns)
    return "\n".join([header, rule, *("| " + " | ".join(map(str, row)) + " |" for row in shown.to_numpy())]) + "\n"


def table3(analysis) -> pd.DataFrame:
    """FPR per attribute (rows) and model (columns), the FPR over all groups last."""
    if analysis.fpr.empty:
        return pd.DataFrame(columns=["attribute"])
    wide = analysis.fpr.pivot(index="attribute", columns="model", values="fpr")
    order = list(dict.fromkeys(analysis.fpr.attribute))
    order = [a for a in order if a != "all groups"] + ["all groups"]
    return wide.reindex(index=order, columns=list(analysis.runs)).reset_index()


def _cells_line(model: str, cells: dict) -> str:
    """The cells a model's agreement with humans uses, as one list item."""
    per_dimension = ", ".join(f"{d} {len(cells[d])} of {sum(TRAITS[t] == d for t in TRAITS)} traits "
                              f"({', '.join(cells[d]) or 'none'})" for d in DIMENSIONS)
    return f"- `{model}`: {cells['groups']} groups, {cells['cells']} cells; {per_dimension}"


def _quadrants_note(analysis) -> str:
    """What the rows of quadrants.csv are computed on."""
    own = "`quadrants.csv` holds each source's quadrants on every trait it rated (`cells` = `all traits`"
    if analysis.human_source is None:
        return own + ")."
    return (own + ": a model's are its own, not compared with humans) and, per model, the human's and the model's "
            "on the cells they share (`shared with ...`), which the agreement and the figures use.")


def _left_out(analysis) -> list[str]:
    """The report's list of what was left out: groups without a rating per source, and the analysis' notes."""
    unrated = "; ".join(f"`{source}`: {', '.join(groups)}" for source, groups in analysis.unrated.items() if groups)
    items = [f"Groups without a rating (absent from that source's rows): {unrated}."] if unrated else []
    return [f"- {item}" for item in [*items, *analysis.notes]]


def write_report(analysis, out: Path, figures: dict[str, list[Path]]) -> Path:
    """Write every table, summary.json and report.md into `out`; returns report.md."""
    analysis.fidelity.to_csv(out / "fidelity.csv", index=False)
    analysis.fpr.to_csv(out / "fpr.csv", index=False)
    analysis.quadrants.to_csv(out / "quadrants.csv", index=False)
    analysis.parse_rates.to_csv(out / "parse_rates.csv", index=False)
    analysis.agreement.to_csv(out / "agreement.csv", index=False)
    t3 = table3(analysis)
    write_table(out, "table3_fpr", "Table 3. Fidelity parity ratio per attribute (below "
                f"{THRESHOLD} flags a risk of epistemic injustice).", t3, _markdown(t3))
    summary = analysis.summary() | {"provenance": provenance()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    lines = [f"# Stereotype content fidelity (seed {SEED})", "",
             f"Group set `{analysis.group_set}`; runs: " + ", ".join(
                 f"`{m}` ({analysis.measures[m]}, {analysis.runs[m]}; {analysis.completeness[m]})"
                 for m in analysis.runs) + "."]
    if analysis.human_source is None:
        lines += ["", "No human ratings (the seed's are unreleased; pass `--human ratings.csv`): model quadrants "
                      "and parse rates only."]
    else:
        h = analysis.human_source
        lines += ["", f"Human ratings: `{h['source']}` ({h['rows']} ratings, sha256 `{h['sha256'][:16]}…`).", "",
                  "## Fidelity (W1 on the 1-5 scale; Eq. 1)", ""]
        rows = []
        for model, s in summary["models"].items():
            rows.append({"model": model, "mean W1": s["mean_w1"],
                         **{f"W1 {d}": s["w1_by_dimension"][d] for d in DIMENSIONS},
                         "FPR (all groups)": s["fpr"]})
        rows.append({"model": "inter-trait baseline (human)", "mean W1": None,
                     **{f"W1 {d}": analysis.baseline.get(d) for d in DIMENSIONS}, "FPR (all groups)": None})
        lines += [_markdown(pd.DataFrame(rows).astype(object).fillna("")), "## Table 3: fidelity parity ratio", "",
                  _markdown(t3), "## Quadrant agreement with humans (averaged over models)", "",
                  "Humans and each model are placed in quadrants on the (group, trait) cells both rate, and only "
                  "there compared:", "", *[_cells_line(m, c) for m, c in analysis.shared_cells.items()], "",
                  _markdown(analysis.agreement)]
        flagged = analysis.fpr[analysis.fpr.flagged.astype(bool)]
        if len(flagged):
            lines += ["FPR below 4/5: " + "; ".join(f"{r.model} {r.attribute} {r.fpr:.3f} (worst {r.worst})"
                                                    for r in flagged.itertuples()), ""]
        dropped = analysis.fpr[analysis.fpr.dropped.astype(str).str.len() > 0]
        if len(dropped):
            lines += ["Groups left out of an FPR for missing cells: " + "; ".join(
                f"{r.model} {r.attribute}: {r.dropped}" for r in dropped.itertuples()), ""]
    lines += ["## Quadrants", "", _quadrants_note(analysis), ""]
    left_out = _left_out(analysis)
    if left_out:
        lines += ["## Left out", "", *left_out, ""]
    rates = pd.DataFrame([{"model": m, **s["parse_rates"]} for m, s in summary["models"].items()])
    lines += ["## Parse rates", "", "Unparsed and ambiguous replies are excluded; per group in `parse_rates.csv`.",
              "", _markdown(rates), "## Figures", ""]
    lines += [f"- `{paths[0].name}`" for paths in figures.values()]
    report = out / REPORT
    report.write_text("\n".join(lines) + "\n")
    return report
