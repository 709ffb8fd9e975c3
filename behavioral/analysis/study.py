"""How a study runs: a mechanistic question (a Study, behavioral.analysis.studies) asked of run directories with
capture (of any suites), its options declared once, a plan printed before the work, and its Analysis written by the
analysis framework (staged files, report.md, manifest.json)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from behavioral.analysis.runs import Run, file_stem, model_name, read_runs
from behavioral.report.blocks import Table
from behavioral.analysis.outside_runs import INTERP_DIR, check_outside_runs
from behavioral.analysis.report import REPORT, caption, definitions, unset_meanings
from behavioral.analysis.write import recorded, runs_record, write
from behavioral.core.options import comma_values
from behavioral.analysis.output_folder import MANIFEST, output_folder
from behavioral.analysis.run_labels import run_labels
from behavioral.rundir.manifest import read_manifest
from behavioral.analysis.studies import Study, get_study
from behavioral.suite.registry import get_suite

if TYPE_CHECKING:
    import pandas as pd


@dataclasses.dataclass(frozen=True)
class StudyResult:
    """What `run_study` made: its output folder, report.md, the record its manifest.json holds and its declared
    tables by name (`printed`): `tables` gives their frames (every CSV column), `show` one as the report prints it."""

    folder: Path
    report: Path
    manifest: dict[str, Any]
    printed: dict[str, Table] = dataclasses.field(repr=False)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """The frames the CSVs were written from, by table name."""
        return {name: table.frame for name, table in self.printed.items()}

    def show(self, name: str) -> str:
        """Table `name` as the report prints it, to read in a terminal: its caption, the printed columns (one
        quantity each, formatted) and what they hold; every column is in `tables[name]`."""
        if name not in self.printed:
            raise KeyError(f"no table {name!r}; expected one of {', '.join(self.printed)}")
        table = self.printed[name]
        defined = f"\n{definitions(table)}\n" if table.definitions else ""
        return f"{caption(table)}\n\n{table.markdown()}{defined}"


def read_study_runs(run_dirs: Sequence[str | Path], names: Sequence[str] | None = None,
                    allow_partial: bool = False) -> list[Run]:
    """The runs a study reads, each through its own suite's view (a study may span suites), named by `names` or by
    suite and model, made unique as analyses name runs."""
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


def study_options(study: Study, options: Any = None, **values: Any) -> Any:
    """`study`'s Options from an instance of them, a dict and/or keyword arguments (a tuple field also takes a list
    or a comma-separated string); a key that is no option of the study is a ValueError naming both."""
    if study.Options is None:
        if options is not None or values:
            raise ValueError(f"study {study.name} takes no options")
        return None
    if options is not None and not isinstance(options, (study.Options, Mapping)):
        raise ValueError(f"options of study {study.name}: expected its Options, a dict or None, got "
                         f"{type(options).__name__}")
    fields = {f.name: f for f in dataclasses.fields(study.Options)}
    given = {**(options if isinstance(options, Mapping) else {}), **values}
    for key, value in given.items():
        if key not in fields:
            raise ValueError(f"unknown option {key!r} of study {study.name}; expected one of {', '.join(fields)}")
        if isinstance(fields[key].default, tuple) and not isinstance(value, tuple):
            given[key] = tuple(comma_values(value)) if isinstance(value, str) else tuple(value)
    if isinstance(options, study.Options):
        return dataclasses.replace(options, **given)
    return study.Options(**given)


def run_study(study: Study | str, run_dirs: Sequence[str | Path], options: Any = None,
              out: str | Path | None = None, names: Sequence[str] | None = None, allow_partial: bool = False,
              progress: bool = True, model: tuple | None = None, **values: Any) -> StudyResult:
    """Run `study` (or the study of that name) on run directories into `out` (default RUN_DIR/interp/STUDY of the
    first) with its options (`options` and/or keyword arguments, see study_options) and return what it made; the
    same function serves `empathy-gap interp` and scripts. `model`, a loaded (model, tokenizer, info) as
    behavioral.inference.models.load returns, is used by a study that reruns the run's model instead of loading it, checked
    against the run's recorded model as a loaded one is. Nothing is written if it fails.

    >>> from behavioral import run_study
    >>> result = run_study("clusters", [run_dir], out="clusters", progress=False, permutations=5,
    ...                    where=("category=religion",))
    clusters: intergroup smollm2-135m: 5 persona identities ... 5 permutations (seed 0).
    >>> result.report.name
    'report.md'
    """
    study = get_study(study) if isinstance(study, str) else study
    if model is not None and not study.reruns_model:
        raise ValueError(f"study {study.name} runs no model; model= goes to a study that reruns the run's model")
    options = study_options(study, options, **values)
    if out is not None:  # the default is the run directory's own interp/
        check_outside_runs(out)
    runs = read_study_runs(run_dirs, names, allow_partial)
    settings = {f.name: recorded(getattr(options, f.name)) for f in dataclasses.fields(options)} if options else {}
    final = Path(out) if out is not None else Path(run_dirs[0]) / INTERP_DIR / study.name
    record = {"study": study.name, "options": settings, "runs": runs_record(runs)}
    with output_folder(final, f"interp {study.name}", record, keep=study.keep,
                       within=None if out is not None else run_dirs[0]) as folder:
        print(f"{study.name}: {study.plan(runs, options)}", flush=True)
        analysis = study.analyze(runs, options, final, progress, **({"model": model} if model is not None else {}))
        analysis.unset = unset_meanings(options)
        folder.record.update(analysis.record)
        write(analysis, runs, settings, folder.path)
    return StudyResult(final, final / REPORT, json.loads((final / MANIFEST).read_text()),
                       {t.name: t for t in analysis.tables()})
