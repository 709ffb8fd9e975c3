"""The one analysis command for every suite: read the runs, let the suite declare its analysis, and write its
tables (CSV and Markdown), figures (PNG and PDF), JSON files, report.md and manifest.json into a staged output
folder (behavioral.analysis.output_folder: all files appear together, and only over an earlier analysis), with report.html,
the same report as one page to open in a browser."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from behavioral.analysis.html import render_html
from behavioral.analysis.outside_runs import ANALYSIS_DIR, check_outside_runs
from behavioral.analysis.report import REPORT, REPORT_HTML, definitions, render, unset_meanings
from behavioral.analysis.runs import Run, read_runs, suite_of
from behavioral.report.blocks import Analysis
from behavioral.suite.registry import get_suite
from behavioral.analysis.output_folder import output_folder
from behavioral.analysis.figure_files import save_figure


def _write_tables(analysis, out: Path) -> None:
    for table in analysis.tables():
        csv = out / f"{table.name}.csv"
        csv.parent.mkdir(parents=True, exist_ok=True)
        table.frame.to_csv(csv, index=False)
        note = f"{table.note}\n\n" if table.note else ""
        defined = f"\n## How to read\n\n{definitions(table)}\n" if table.definitions else ""
        (out / f"{table.name}.md").write_text(f"# {table.title}\n\n{note}{table.markdown()}{defined}")


def recorded(value):
    """An option's value as the manifest records it: plain data as it is, an object (e.g. a scorer given from
    Python) by its type's name."""
    return value if isinstance(value, (str, int, float, bool, type(None), list, tuple, dict)) else type(value).__name__


def runs_record(runs: Sequence[Run]) -> dict:
    """What a manifest records of each run read: directory, configuration, model, provenance, completeness."""
    return {r.name: {"run_dir": str(r.run_dir.resolve()), "config": r.config, "model": r.manifest.model,
                     "run_provenance": r.manifest.provenance, "completeness": r.completeness.describe()}
            for r in runs}


def suite_analysis(run_dirs: Sequence[str | Path], options=None, names: Sequence[str] | None = None,
                   allow_partial: bool = False) -> tuple[Analysis, list[Run], dict, dict]:
    """The declared analysis of runs of one suite, computed and not written: (analysis, runs read, the options as
    recorded, the manifest's record). `options` is the suite's AnalyzeOptions (None: the defaults); a partial run
    is refused unless `allow_partial`; runs are named by `names` or by their models."""
    suite = get_suite(suite_of(run_dirs))
    if options is None and suite.AnalyzeOptions is not None:
        options = suite.AnalyzeOptions()
    runs = read_runs(suite, run_dirs, allow_partial, names)
    analysis = suite.analyze(runs, options)
    analysis.unset = unset_meanings(options)
    settings = {f.name: recorded(getattr(options, f.name)) for f in dataclasses.fields(options)} if options else {}
    record = {"suite": suite.name, "analysis": settings | {"allow_partial": allow_partial},
              "runs": runs_record(runs)} | analysis.record
    return analysis, runs, settings, record


def analyze(run_dirs: Sequence[str | Path], out: str | Path | None = None, options=None,
            names: Sequence[str] | None = None, allow_partial: bool = False) -> Path:
    """Analyze runs of one suite into `out` (default: the first run's analysis/) with the suite's analysis
    `options` (see suite_analysis) and return report.md's path; every number is computed before anything is
    written. The same function serves the CLI and scripts.

    >>> from behavioral import analyze
    >>> analyze([run_dir], "analysis").name
    'report.md'
    """
    if out is not None:  # the default is the run directory's own analysis/
        check_outside_runs(out)
    analysis, runs, settings, record = suite_analysis(run_dirs, options, names, allow_partial)
    final = Path(out) if out is not None else Path(run_dirs[0]) / ANALYSIS_DIR
    with output_folder(final, f"analyze {record['suite']}", record,
                       within=None if out is not None else run_dirs[0]) as folder:
        write(analysis, runs, settings, folder.path)
    return final / REPORT


def write(analysis: Analysis, runs: Sequence[Run], settings: dict, out: Path) -> None:
    """Write a declared analysis (tables, figures, JSON files, report.md, report.html) into `out`, a folder inside a
    command's staged output folder; suites' analyses, the studies and a sweep's analysis share it."""
    out.mkdir(parents=True, exist_ok=True)
    _write_tables(analysis, out)
    for figure in analysis.figures():
        path = out / figure.name
        save_figure(figure.figure, path.parent, path.name)
    for name, data in analysis.json.items():
        (out / name).write_text(json.dumps(data, indent=2, default=str) + "\n")
    (out / REPORT).write_text(render(analysis, runs, settings))
    (out / REPORT_HTML).write_text(render_html(analysis, runs, settings, out))
