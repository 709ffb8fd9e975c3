"""What a study is: a mechanistic question asked of run directories with capture (of any suites), with options
declared once, a plan printed before the work, and an Analysis written by the analysis framework (staged files,
report.md, manifest.json)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from behavioral.analysis.runs import Run, file_stem, model_name, read_runs
from behavioral.analysis.spec import Analysis
from behavioral.analysis.report import REPORT
from behavioral.analysis.write import recorded, runs_record, write
from behavioral.output_folder import output_folder
from behavioral.run_labels import run_labels
from behavioral.manifest import read_manifest

INTERP_DIR = "interp"  # a study's default output folder: RUN_DIR/interp/STUDY of the first run


class Study:
    """A study: subclasses set `name`, `description` and `Options` (a frozen dataclass whose fields carry their
    flags, behavioral.options) and implement `plan` and `analyze`."""

    name: str = ""
    description: str = ""
    Options: type | None = None
    keep: tuple[str, ...] = ()  # sub-folders of the output folder the study makes and resumes (e.g. reruns)

    def plan(self, runs: Sequence[Run], options: Any) -> str:
        """What the study will compute, in one paragraph (counts, forwards, an estimate): printed before the work."""
        raise NotImplementedError

    def analyze(self, runs: Sequence[Run], options: Any, out: Path, progress: bool = True) -> Analysis:
        """The study's tables, figures and report sections for the runs (`out`: the output folder, where the
        sub-folders in `keep` go); bad input raises ValueError naming it."""
        raise NotImplementedError


def read_study_runs(run_dirs: Sequence[str | Path], names: Sequence[str] | None = None,
                    allow_partial: bool = False) -> list[Run]:
    """The runs a study reads, each through its own suite's view (a study may span suites), named by `names` or by
    suite and model, made unique as analyses name runs."""
    from behavioral.suites import get_suite

    if not run_dirs:
        raise ValueError("no run directory given; expected at least one")
    runs = [read_runs(get_suite(read_manifest(d).suite), [d], allow_partial)[0] for d in run_dirs]
    if names is not None:
        if len(names) != len(runs) or len(set(map(file_stem, names))) != len(names):
            raise ValueError(f"--names gives {len(names)} names for {len(runs)} runs; expected one distinct name per "
                             "run directory, in order")
        labels = list(names)
    else:
        labels = run_labels([f"{r.config['suite']} {model_name(r.config)}" for r in runs], run_dirs, key=file_stem)
    return [dataclasses.replace(r, name=label) for r, label in zip(runs, labels)]


def run_study(study: Study, run_dirs: Sequence[str | Path], options: Any = None, out: str | Path | None = None,
              names: Sequence[str] | None = None, allow_partial: bool = False, progress: bool = True) -> Path:
    """Run `study` on run directories into `out` (default RUN_DIR/interp/STUDY of the first) and return its
    report.md; the same function serves `empathy-gap interp` and scripts. Nothing is written if it fails."""
    if options is None and study.Options is not None:
        options = study.Options()
    runs = read_study_runs(run_dirs, names, allow_partial)
    settings = {f.name: recorded(getattr(options, f.name)) for f in dataclasses.fields(options)} if options else {}
    final = Path(out) if out is not None else Path(run_dirs[0]) / INTERP_DIR / study.name
    record = {"study": study.name, "options": settings, "runs": runs_record(runs)}
    with output_folder(final, f"interp {study.name}", record, keep=study.keep) as folder:
        print(f"{study.name}: {study.plan(runs, options)}", flush=True)
        analysis = study.analyze(runs, options, final, progress)
        folder.record.update(analysis.record)
        write(analysis, runs, settings, folder)
    return final / REPORT
