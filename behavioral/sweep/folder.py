"""A sweep's folder: sweep.json (the config it was last run with, its runs, which finished) beside runs/ and the
analysis; a folder is used only if it is new, empty or a sweep's own."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from behavioral.files import write_json_atomic
from behavioral.provenance import provenance
from behavioral.manifest import MANIFEST, read_manifest
from behavioral.store import finished_units, is_lock_file
from behavioral.sweep.config import RUNS_DIR, Sweep, settings_record

SWEEP_FILE = "sweep.json"
ANALYSIS_DIR = "analysis"


@dataclass(frozen=True)
class SweepState:
    """What sweep.json holds: the sweep file's path and hash, its data, the runs (as settings_record writes them),
    the finished runs (name -> run id) and the failures of the last invocation (name -> reason)."""

    config_file: str
    sha256: str
    data: dict[str, Any]
    runs: list[dict[str, Any]]
    finished: dict[str, str]
    failed: dict[str, str]

    def run_dir(self, folder: Path, name: str) -> Path:
        """The run directory of the run called `name`."""
        return folder / next(r["run_dir"] for r in self.runs if r["name"] == name)


def progress(out: Path) -> tuple[int, int | None] | None:
    """(work units on disk, units planned or None where the manifest records no plan) of a run directory; None where
    no run was started there."""
    if not (out / MANIFEST).is_file():
        return None
    plan = read_manifest(out).plan
    return len(finished_units(out)), None if plan is None else plan.units


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
    """sweep.json of a sweep folder; a missing or damaged one is a ValueError naming it."""
    path = Path(folder) / SWEEP_FILE
    try:
        data = json.loads(path.read_text())
        return SweepState(data["config_file"], data["config_sha256"], data["config"], data["runs"],
                          dict(data["finished"]), dict(data.get("failed", {})))
    except FileNotFoundError:
        raise ValueError(f"{folder}: holds no {SWEEP_FILE}; expected a sweep folder") from None
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: damaged ({err!r}); expected the file `empathy-gap sweep` writes") from None


def write_state(folder: Path, sweep: Sweep, finished: dict[str, str], failed: dict[str, str]) -> None:
    """sweep.json for `sweep` (atomically): finished runs of earlier invocations are kept, also those the current
    file no longer lists (their directories stay under runs/)."""
    write_json_atomic(folder / SWEEP_FILE, {
        "config_file": str(sweep.source.resolve()), "config_sha256": sweep.sha256, "config": sweep.data,
        "runs": [settings_record(r) for r in sweep.runs], "finished": finished, "failed": failed,
        "runs_dir": RUNS_DIR, "provenance": provenance()})
