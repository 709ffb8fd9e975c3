"""A sweep's folder: sweep.json (the config it was last run with, its runs, which finished) beside runs/ and the
analysis; a folder is used only if it is new, empty or a sweep's own."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from behavioral.core.files import read_regular, write_json_atomic
from behavioral.rundir.provenance import provenance
from behavioral.rundir.manifest import MANIFEST, read_manifest
from behavioral.core.options import quoted
from behavioral.rundir.lock import is_lock_file
from behavioral.rundir.parts import finished_units
from behavioral.suite.registry import names
from behavioral.sweep.config import (NAME, RUNS_DIR, Sweep, run_name, run_path, setting_label,
                                       settings_record)

SWEEP_FILE = "sweep.json"
ANALYSIS_DIR = "analysis"


@dataclass(frozen=True)
class RunRecord:
    """A run as sweep.json records it (settings_record): its model's folder name and argument, suite, setting,
    options and analysis options (those the sweep file gives, checked where they are used); its directory is made
    from the checked names, never read from the file."""

    model: str
    model_spec: str
    suite: str
    setting: str
    options: dict[str, Any] | None
    analysis: dict[str, Any]

    @property
    def name(self) -> str:
        """model/suite[--setting]: the run's name in tables."""
        return run_name(self.model, self.suite, self.setting)

    @property
    def label(self) -> str:
        """suite or suite--setting: the suite setting the run belongs to."""
        return setting_label(self.suite, self.setting)

    @property
    def run_dir(self) -> PurePosixPath:
        """The run directory relative to the sweep's folder."""
        return run_path(self.model, self.suite, self.setting)


@dataclass(frozen=True)
class SweepState:
    """What sweep.json holds: the sweep file's path and hash, its data, the runs, the finished runs (name -> run id)
    and the failures of the last invocation (name -> reason)."""

    config_file: str
    sha256: str
    data: dict[str, Any]
    runs: list[RunRecord]
    finished: dict[str, str]
    failed: dict[str, str]


def progress(out: Path) -> tuple[int, int | None] | None:
    """(work units on disk, units planned or None where the manifest records no plan) of a run directory; None where
    no run was started there."""
    if not (out / MANIFEST).is_file():
        return None
    plan = read_manifest(out).plan
    return len(finished_units(out)), None if plan is None else plan.units


def is_complete(out: Path) -> bool:
    """True where every planned work unit of the run directory is on disk."""
    done = progress(out)
    return done is not None and done[1] is not None and done[0] >= done[1]


def is_sweep_folder(folder: str | Path) -> bool:
    """True where `folder` holds a sweep (its sweep.json)."""
    return (Path(folder) / SWEEP_FILE).is_file()


def check_sweep_folder(folder: Path) -> None:
    """Refuse a folder the sweep may not use: a file, or a folder that holds something and no sweep.json."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"sweep folder {folder}: exists and is not a folder")
    if folder.exists() and not is_sweep_folder(folder) and any(not is_lock_file(p) for p in folder.iterdir()):
        raise ValueError(f"sweep folder {folder}: not empty and holds no {SWEEP_FILE}; expected a new folder or an "
                         "earlier sweep's (choose another out)")
    parent = folder if folder.exists() else next(p for p in folder.absolute().parents if p.exists())
    if not os.access(parent, os.W_OK):
        raise ValueError(f"sweep folder {folder}: {parent} is not writable")


def read_state(folder: str | Path) -> SweepState:
    """sweep.json of a sweep folder, every field checked (names as folder names, suites known): a missing, damaged or
    edited one is a ValueError naming the file and the field."""
    path = Path(folder) / SWEEP_FILE
    try:
        data = json.loads(read_regular(path, f"the {SWEEP_FILE} `empathy-gap sweep` writes"))
    except FileNotFoundError:
        raise ValueError(f"{folder}: holds no {SWEEP_FILE}; expected a sweep folder") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err}); expected the file `empathy-gap sweep` writes") from None
    try:
        return _state(data)
    except ValueError as err:
        raise ValueError(f"{path}: {err}; expected the file `empathy-gap sweep` writes (was it edited?)") from None


def _field(data: Any, key: str, kind: type, where: str) -> Any:
    """data[key] where it is of `kind`, else a ValueError naming `where`.`key`."""
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, kind):
        raise ValueError(f"{where}{key} is {quoted(value)}; expected {kind.__name__}")
    return value


def _named(value: str, where: str) -> str:
    """`value` where it is a folder name (letters, digits, '.', '_', '-'), else a ValueError naming `where`."""
    if not NAME.fullmatch(value):
        raise ValueError(f"{where} is {quoted(value)}; expected a folder name (letters, digits, '.', '_' or '-')")
    return value


def _record(data: Any, i: int) -> RunRecord:
    """runs[i] of sweep.json, its names checked."""
    where = f"runs[{i}]."
    suite = _field(data, "suite", str, where)
    if suite not in names():
        raise ValueError(f"{where}suite is {quoted(suite)}; expected one of {', '.join(names())}")
    setting = _field(data, "setting", str, where)
    options = data.get("options")
    if options is not None and not isinstance(options, dict):
        raise ValueError(f"{where}options is {quoted(options)}; expected a table or null")
    analysis = _field(data, "analysis", dict, where) if "analysis" in data else {}  # none before sweeps took it
    record = RunRecord(_named(_field(data, "model", str, where), f"{where}model"),
                       _field(data, "model_spec", str, where), suite,
                       setting and _named(setting, f"{where}setting"), options, analysis)
    if data.get("name") != record.name:
        raise ValueError(f"{where}name is {quoted(data.get('name'))}; expected {record.name!r}, its model, suite and "
                         "setting")
    return record


def _texts(data: Any, key: str) -> dict[str, str]:
    """A table of text by text (finished run ids, failure reasons)."""
    table = _field(data, key, dict, "")
    bad = next((k for k, v in table.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise ValueError(f"{key}[{quoted(bad)}] is {quoted(table[bad])}; expected text")
    return table


def _state(data: Any) -> SweepState:
    """The checked SweepState of sweep.json's data."""
    runs = [_record(r, i) for i, r in enumerate(_field(data, "runs", list, ""))]
    repeated = next((r.name for i, r in enumerate(runs) if r.name in {q.name for q in runs[:i]}), None)
    if repeated:
        raise ValueError(f"runs names {repeated!r} more than once; expected each run once")
    first = {}
    for i, r in enumerate(runs):  # one analysis per suite setting: its runs' options are one table
        j = first.setdefault(r.label, i)
        if r.analysis != runs[j].analysis:
            raise ValueError(f"runs[{i}].analysis is {quoted(r.analysis)}; expected runs[{j}]'s, the analysis of the "
                             f"same suite setting {r.label!r}")
    return SweepState(_field(data, "config_file", str, ""), _field(data, "config_sha256", str, ""),
                      _field(data, "config", dict, ""), runs, _texts(data, "finished"),
                      _texts(data, "failed") if "failed" in data else {})


def slot(folder: Path, record: RunRecord, finished: str | None = None) -> Path:
    """The run directory of `record` inside `folder`: refused where it leads out of the folder (a link), holds a
    run other than the slot's (another suite or model), or, where sweep.json records the run `finished` there (its
    run id), another run of that suite and model."""
    out = folder / record.run_dir
    if not out.resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"{out}: leads out of the sweep folder (to {out.resolve()}); expected the run directory "
                         "the sweep made there")
    if (out / MANIFEST).is_file():
        manifest = read_manifest(out)
        config = manifest.config
        if (config["suite"], config["model"]) != (record.suite, record.model_spec):
            raise ValueError(f"{out}: holds a {config['suite']} run of model {quoted(config['model'])}; expected the "
                             f"sweep's {record.suite} run of {quoted(record.model_spec)} (was it moved in?)")
        if finished is not None and manifest.run_id != finished:
            raise ValueError(f"{out}: holds run {manifest.run_id}, but {SWEEP_FILE} records run {finished} finished "
                             "there; expected the sweep's own run (was another run moved in?)")
    return out


def write_state(folder: Path, sweep: Sweep, finished: dict[str, str], failed: dict[str, str]) -> None:
    """sweep.json for `sweep` (atomically): finished runs of earlier invocations are kept, also those the current
    file no longer lists (their directories stay under runs/)."""
    write_json_atomic(folder / SWEEP_FILE, {
        "config_file": str(sweep.source.resolve()), "config_sha256": sweep.sha256, "config": sweep.data,
        "runs": [settings_record(r) for r in sweep.runs], "finished": finished, "failed": failed,
        "runs_dir": RUNS_DIR, "provenance": provenance()})
