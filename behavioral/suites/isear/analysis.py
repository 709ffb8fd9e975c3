"""An isear run's analysis: GenderBench's metrics with bootstrap CIs and mark per mode, p(e|g), figure, report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from behavioral.output_folder import output_folder
from behavioral.outputs import REPORT
from behavioral import store
from behavioral.run_reader import read_run
from behavioral.suites.isear import attempts as attempts_mod
from behavioral.suites.isear import figures, report
from behavioral.suites.isear.metrics import Counts, bootstrap, counts, mark, statistics, table

ANALYSIS_DIR = "analysis"
MODES = {"generate": ("generate",), "score": ("score",), "both": ("generate", "score")}


@dataclass(frozen=True)
class ModeResult:
    """One mode's metrics (value and CI), mark, p(e|g) table and sizes."""

    mode: str
    metrics: dict[str, dict[str, float]]
    mark: str | None
    emotions: pd.DataFrame
    n_items: int
    n_attempts: int


def analyze_attempts(mode: str, attempts: pd.DataFrame, cycles: int, alpha: float, seed: int) -> ModeResult:
    """Point metrics, CIs from one set of resamples (metrics and p(e|g) alike) and the mark of max_diff's CI."""
    c: Counts = counts(attempts)
    point, cis = statistics(c), bootstrap(c, cycles, alpha, seed)
    values = {k: {"value": v, "ci_low": cis[k][0], "ci_high": cis[k][1]} for k, v in point.items()
              if not k.startswith("p|")}
    emotions = table(c, point, cis).assign(mode=mode)
    return ModeResult(mode, values, mark(cis["max_diff"]), emotions[["mode", *emotions.columns[:-1]]],
                      len(c.items), len(attempts))


def analyze(run_dir: str | Path, out: str | Path | None = None, cycles: int = 1000, alpha: float = 0.95,
            allow_partial: bool = False) -> Path:
    """Write metrics.json, emotion_by_gender.csv, emotion_by_gender.png/.pdf and report.md of an isear run into
    `out` (RUN_DIR/analysis); returns report.md. The metrics of every mode are computed before anything is written."""
    run_dir = Path(run_dir)
    manifest, rows, done = read_run(run_dir, "isear", allow_partial)
    config = manifest["config"]
    seed = int(config["seed"])
    results = [analyze_attempts(m, attempts_mod.from_rows(rows, m, run_dir), cycles, alpha, seed)
               for m in MODES[config["mode"]]]
    final = Path(out) if out is not None else run_dir / ANALYSIS_DIR
    options = {"bootstrap_cycles": cycles, "bootstrap_alpha": alpha, "random_seed": seed,
               "completeness": done.describe()}
    record = {"run_dir": str(run_dir.resolve()), "run": {k: manifest.get(k) for k in ("config", "model")},
              "analysis": options}
    with output_folder(final, "analyze isear", record) as folder:
        out = folder.path
        store.write_json_atomic(out / "metrics.json", {
            r.mode: {"metrics": r.metrics, "mark": r.mark, "n_items": r.n_items, "n_attempts": r.n_attempts}
            for r in results})
        pd.concat([r.emotions for r in results]).to_csv(out / "emotion_by_gender.csv", index=False)
        figure_paths = figures.write_emotion_figure(results, out)
        report.write_report(out, run_dir, manifest, results, figure_paths, options)
    return final / REPORT
