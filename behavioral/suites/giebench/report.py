"""report.md of a GIEBench analysis: the runs and their provenance, answer rates, the accuracy, shift and swap
tables, and links to every output."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from behavioral.outputs import REPORT, Table
from behavioral.run_reader import Completeness


def markdown(frame: pd.DataFrame, formats: Mapping[str, Callable] | None = None,
             default: Callable | None = None) -> str:
    """`frame` as a Markdown table, each column's cells written by its format (or `default` for floats)."""
    formats = formats or {}

    def cell(column: str, value) -> str:
        if isinstance(value, float) and pd.isna(value):
            return "—"
        if column in formats:
            return formats[column](value)
        return default(value) if default and isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(c, v) for c, v in zip(frame.columns, row)) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def percent(value: float) -> str:
    """A share as the paper prints it: one decimal, percent sign."""
    return f"{100 * value:.1f}%"


def points(value: float) -> str:
    """A difference of shares in percentage points, signed."""
    return f"{100 * value:+.1f}"


def _runs_section(runs: Mapping[str, tuple[Path, dict, Completeness]], rows: pd.DataFrame) -> list[str]:
    lines = ["## Runs", ""]
    for name, (run_dir, manifest, done) in runs.items():
        config, prov = manifest["config"], manifest.get("provenance", {})
        mine = rows[rows["run"] == name]
        source = config.get("imported_from") or config.get("items_source", "?")
        lines.append(f"- **{name}**: `{run_dir}`; model `{config.get('model')}`; mode `{config.get('mode')}`; "
                     f"items {config.get('n_items')} from `{source}` (sha256 `{config.get('items_sha256', '?')}`); "
                     f"prompt format `{config.get('chat_format', 'as imported')}`; max new tokens "
                     f"{config.get('max_new_tokens', '?')}; git `{prov.get('git_commit')}`; created "
                     f"{prov.get('created')}")
        lines.append(f"  - {done.describe()}")
        for mode, group in mine.groupby("mode", sort=False):
            if mode == "generate":
                verdicts = group["answer_select"].notna().mean()
                lines.append(f"  - generate: {percent(verdicts)} of {len(group)} replies hold a verdict eval.py "
                             "reads; the others count as wrong")
            else:
                lines.append(f"  - score: mean mass of the four letters after `[[`: "
                             f"{group['letter_mass'].mean():.3f} over {len(group)} prompts")
    return lines


def write_report(out: Path, runs: Mapping[str, tuple[Path, dict, Completeness]], rows: pd.DataFrame, acc: pd.DataFrame,
                 tables: Mapping[str, Table], figures: list[Path]) -> Path:
    """Write report.md into `out`; returns its path."""
    wide = tables["accuracy"].frame
    paper = tables["accuracy_paper"].frame
    score_counts = ["run", "mode", "prompt_type"]
    lines = ["# GIEBench analysis", "", "Seed 001: Wang et al., *GIEBench: Towards Holistic Evaluation of Group "
             "Identity-based Empathy for Large Language Models* (arXiv 2406.14903). The card "
             "(behavioral/suites/giebench/README.md) lists every deviation from the authors.", ""]
    lines += _runs_section(runs, rows)
    lines += ["", "## Accuracy (Tables 1, 2, 6)", "", "Correct / n per category; a reply without a verdict is "
              "wrong and stays in the denominator.", "", markdown(wide, default=percent),
              "The same as the paper computed it (its first eval.py counted each category's first item twice: "
              "correct / (n + 1), 3 places; Overall correct / N):", "", markdown(paper, default=percent)]
    p_correct = acc[acc["mode"] == "score"]
    if not p_correct.empty:
        table = p_correct.pivot_table(index=score_counts, columns="category", values="p_correct", sort=False)
        lines += ["Mean probability of the correct letter (score mode):", "",
                  markdown(table[list(dict.fromkeys(p_correct["category"]))].reset_index(), default=percent)]
    shifts = tables["shift"].frame
    if not shifts.empty:
        lines += ["## Shift from Raw (Tables 4, 5)", "", "`shift` = accuracy(type) − accuracy(raw) in points; "
                  "`shift_paper` the difference of the paper's rounded accuracies; `plus`: items right under the "
                  "type and wrong under Raw, `minus` the reverse; `mcnemar_p` exact two-sided (our addition).", "",
                  markdown(shifts, {"shift": points, "shift_paper": points, "mcnemar_p": lambda p: f"{p:.3g}"})]
    swaps = tables["swap"].frame
    if not swaps.empty:
        lines += ["## Identity swaps (Tables 3, 7)", "", "S_i's COT and ID prompts name S_j; the correct letter is "
                  "S_i's. `no_mismatch` is the unswapped COT accuracy.", "", markdown(swaps, default=percent)]
    lines += ["## Files", ""] + [f"- [{t.csv.name}]({t.csv.name}), [{t.md.name}]({t.md.name})"
                                 for t in tables.values()]
    lines += [f"- [{p.name}]({p.name})" for p in figures if p.suffix == ".png"]
    path = out / REPORT
    path.write_text("\n".join(lines) + "\n")
    return path
