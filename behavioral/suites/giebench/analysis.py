"""`empathy-gap analyze` for GIEBench runs: accuracy (and the paper's denominators), shifts, swaps, figures and
report.md, for one or more runs side by side."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from behavioral.output_folder import output_folder
from behavioral.outputs import REPORT, write_table
from behavioral.store import RunDirError, read_manifest
from behavioral.suites.giebench import figures, metrics
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.report import markdown, percent, points, write_report
from behavioral.suites.giebench.results import results


def wide(acc: pd.DataFrame, value: str) -> pd.DataFrame:
    """`value` of the accuracy rows as the paper's tables: a row per run, mode and type, categories as columns."""
    table = acc.pivot_table(index=["run", "mode", "prompt_type"], columns="category", values=value, sort=False)
    columns = [c for c in (*CATEGORIES, metrics.OVERALL) if c in table.columns]
    return table[columns].reset_index()


def analyze(run_dirs: Sequence[str | Path], out: str | Path | None = None, allow_partial: bool = False) -> Path:
    """Tables, figures and report.md of GIEBench runs, written to `out` (default: the first run's analysis/); a run
    that has not finished is refused unless `allow_partial`."""
    run_dirs = [Path(d) for d in run_dirs]
    frames = [results(d, allow_partial=allow_partial) for d in run_dirs]
    manifests = [read_manifest(d) for d in run_dirs]
    names = [f["run"].iloc[0] for f in frames]
    if len(set(names)) < len(names):
        raise RunDirError(f"runs share a name ({', '.join(names)}); expected run directories of distinct names")
    done = [f.attrs["completeness"] for f in frames]
    rows = pd.concat(frames, ignore_index=True)
    final = Path(out) if out else run_dirs[0] / "analysis"
    record = {"runs": {n: {"run_dir": str(d.resolve()), "config": m["config"], "completeness": c.describe()}
                       for n, d, m, c in zip(names, run_dirs, manifests, done)}}
    with output_folder(final, "analyze giebench", record) as folder:
        out = folder.path
        acc = metrics.accuracy(rows)
        shifts = metrics.shift(rows, acc)
        swaps = metrics.swap(rows)
        tables = {
            "accuracy": write_table(out, "accuracy", "# Accuracy (correct / n; Tables 1, 2, 6)",
                                    wide(acc, "accuracy"), markdown(wide(acc, "accuracy"), default=percent)),
            "accuracy_paper": write_table(
                out, "accuracy_paper", "# Accuracy as the paper computed it (correct / (n + 1) per category)",
                wide(acc, "accuracy_paper"), markdown(wide(acc, "accuracy_paper"), default=percent)),
            "shift": write_table(out, "shift", "# Shift from Raw (Tables 4, 5)", shifts,
                                 markdown(shifts, {"shift": points, "shift_paper": points})),
            "swap": write_table(out, "swap", "# Identity swaps (Tables 3, 7)", swaps,
                                markdown(swaps, default=percent)),
        }
        counts = rows[(rows["run"] == names[0]) & (rows["prompt_type"] == rows["prompt_type"].iloc[0])]
        figs = figures.category_shares(counts.drop_duplicates("item_id")["category"].value_counts(), out)
        figs += figures.cot_accuracy(acc, out) if (acc["prompt_type"] == "cot").any() else []
        figs += figures.shift_heatmaps(shifts, out) if not shifts.empty else []
        write_report(out, dict(zip(names, zip(run_dirs, manifests, done))), rows, acc, tables, figs)
    return final / REPORT
