"""The runs an analysis reads: each run directory checked against the suite (behavioral.runner.reader), named once by
one rule, and turned into the suite's view of its rows."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


from behavioral.core.files import read_regular
from behavioral.analysis.run_labels import run_labels
from behavioral.runner.reader import read_run
from behavioral.rundir.run import Run, file_stem
from behavioral.rundir.manifest import Manifest, RunDirError, read_manifest


def provenance_fields(manifest: Manifest) -> dict[str, Any]:
    """What a table of runs says made each one: model, weights hash, revision, dtype, mode, code and date."""
    config, made = manifest.config, manifest.provenance
    return {"model": config.get("model"), "model_hash": config.get("model_hash"), "revision": config.get("revision"),
            "dtype": config.get("dtype"), "mode": config.get("mode"), "git_commit": made.get("git_commit"),
            "created": made.get("created")}


def model_name(config: dict) -> str:
    """A run's model as tables name it: a local folder's or file's name, else the hub id or imported name."""
    model = str(config.get("model"))
    return Path(model).name if Path(model).is_absolute() else model


def suite_of(run_dirs: Sequence[str | Path]) -> str:
    """The one suite the run directories hold; runs of several suites are a RunDirError naming them."""
    suites = {read_manifest(d).suite for d in run_dirs}
    if len(suites) > 1:
        raise RunDirError(f"the run directories hold runs of different suites ({', '.join(sorted(suites))}); "
                          "expected runs of one suite")
    return suites.pop()


def read_runs(suite, run_dirs: Sequence[str | Path], allow_partial: bool = False,
              names: Sequence[str] | None = None) -> list[Run]:
    """The runs of `suite` (a Suite), in the order given: named by `names` or by their models (made unique by as
    much of their paths as tells them apart), rows as the suite's `view` gives them.

    >>> from behavioral import read_runs
    >>> [religion] = read_runs(suite, [run_dir])
    >>> religion.name, religion.completeness.complete, len(religion.rows) == religion.completeness.planned_rows
    ('smollm2-135m', True, True)
    """
    if not run_dirs:
        raise ValueError("no run directory given; expected at least one")
    read = [read_run(d, suite.name, allow_partial) for d in run_dirs]
    if names is not None:
        if len(names) != len(run_dirs) or len(set(map(file_stem, names))) != len(names):
            raise ValueError(f"--names gives {len(names)} names ({', '.join(names)}) for {len(run_dirs)} runs; "
                             "expected one name per run, in the order of the run directories, that differ in more "
                             "than punctuation")
        labels = list(names)
    else:
        labels = run_labels([model_name(m.config) for m, _, _ in read], run_dirs, key=file_stem)
    return [Run(label, Path(d), manifest, suite.view(rows, manifest.config), done)
            for label, d, (manifest, rows, done) in zip(labels, run_dirs, read)]


def prepared_data(run: Run, config, suite, model=None, tokenizer=None) -> Any:
    """The `suite`'s data of `config`, prepared as `run` prepared it: the run's caches (e.g. intergroup's T2
    rewrites) copied into a temporary folder, extended there where they lack something (with `model`), so the run
    directory is never written."""
    with tempfile.TemporaryDirectory() as folder:
        for name in suite.caches:
            if (run.run_dir / name).is_file():
                (Path(folder) / name).write_bytes(read_regular(run.run_dir / name, f"the run's {name} cache",
                                                               limit=None, error=RunDirError))
        return suite.prepare(suite.dataset(config), config, model, tokenizer, Path(folder))
