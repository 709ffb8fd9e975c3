"""A run directory read for analysis: of the suite asked for, with rows that match its manifest's mode, and either
complete (every work unit of its plan on disk) or knowingly partial, with the counts said."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from behavioral.store import MANIFEST, MODES, RunDirError, read_manifest, read_results, result_schema

PLAN = "plan"  # the manifest key that records the work units and rows a run will write


@dataclass(frozen=True)
class Completeness:
    """How much of its plan a run directory holds: finished work units and rows, against those planned (None where
    the run was made before runs recorded their plan)."""

    units: int
    rows: int
    planned_units: int | None
    planned_rows: int | None

    @property
    def known(self) -> bool:
        """True where the manifest records the plan."""
        return self.planned_units is not None

    @property
    def complete(self) -> bool:
        """True where every planned work unit and row is on disk."""
        return self.known and self.units >= self.planned_units and self.rows >= self.planned_rows

    def describe(self) -> str:
        """One line for reports: complete, or partial with the counts."""
        if not self.known:
            return f"completeness unknown: {self.units} work units ({self.rows} rows) on disk; the run's manifest " \
                   "records no plan (made by an older version)"
        counts = f"{self.units} of {self.planned_units} work units ({self.rows} of {self.planned_rows} rows)"
        return f"complete: {counts}" if self.complete else f"PARTIAL run: {counts} finished"


def completeness(manifest: dict, rows: pd.DataFrame) -> Completeness:
    """The finished share of a run's plan (its manifest's `plan`)."""
    plan = manifest.get(PLAN) or {}
    return Completeness(int(rows["unit_id"].nunique()), len(rows), plan.get("units"), plan.get("rows"))


def _check_mode(run_dir: Path, mode: str, rows: pd.DataFrame) -> None:
    """Refuse rows that cannot come from the manifest's mode (an edited or damaged manifest)."""
    if mode not in MODES:
        raise RunDirError(f"{run_dir / MANIFEST}: config.mode {mode!r} is not a mode; expected one of "
                          f"{', '.join(MODES)} (was the manifest edited?)")
    scored, replied = rows["valid_mass"].notna(), rows["response"].notna()
    wrong = {"generate": "holds answer-set scores" if scored.any() else None,
             "score": "holds rows with neither a reply nor a score" if (~scored & ~replied).any() else None,
             "both": "holds no generated reply" if not replied.any() else None}[mode]
    if wrong:
        raise RunDirError(f"{run_dir}: its manifest says mode {mode!r} but its results {wrong}; expected rows "
                          "written in that mode (was the manifest edited?)")


def read_run(run_dir: str | Path, suite: str, allow_partial: bool = False) -> tuple[dict, pd.DataFrame, Completeness]:
    """(manifest, rows, completeness) of a run of `suite`; another suite's run, rows that do not fit the manifest,
    a run without rows, and a partial run (unless `allow_partial`) are RunDirErrors that say what to do."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such run directory")  # before read_manifest, which calls it "no manifest"
    manifest = read_manifest(run_dir)
    stored = manifest["config"]["suite"]
    if stored != suite:
        raise RunDirError(f"{run_dir} holds a run of suite {stored!r}; expected a {suite} run")
    rows = read_results(run_dir)
    if rows.empty:
        raise RunDirError(f"{run_dir}: holds no results yet; run it first (rerun its command to resume)")
    from behavioral.suites import get_suite  # the registry imports the suites, which import this module

    expected = result_schema(get_suite(suite).fields).names
    if list(rows.columns) != expected:
        differ = sorted(set(expected) ^ set(rows.columns))
        raise RunDirError(f"{run_dir}: its results have other columns than a {suite} run ({', '.join(differ)}); "
                          f"expected rows written by `empathy-gap run {suite}` (was the manifest edited?)")
    _check_mode(run_dir, manifest["config"].get("mode"), rows)
    done = completeness(manifest, rows)
    if not done.complete and not allow_partial:
        what = (f"is partial: {done.units} of {done.planned_units} work units ({done.rows} of {done.planned_rows} "
                "rows) finished") if done.known else "records no plan (made by an older version), so it may be partial"
        raise RunDirError(f"{run_dir} {what}; finish it (rerun its command) or pass --allow-partial")
    return manifest, rows, done
