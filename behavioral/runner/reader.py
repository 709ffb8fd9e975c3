"""A run directory read for analysis: of the suite asked for, with rows that match its manifest's mode and are its
own, and either complete (every work unit of its plan on disk) or knowingly partial, with the counts said."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from behavioral.rundir.run import Completeness
from behavioral.rundir.manifest import MANIFEST, Manifest, RunDirError, options_of, read_manifest
from behavioral.suite.registry import get_declaration
from behavioral.runner.config import check_recorded
from behavioral.runner.plan import derived_plan
from behavioral.rundir.parts import read_results, result_schema


def completeness(run_dir: Path, manifest: Manifest, rows: pd.DataFrame) -> Completeness:
    """The finished share of a run's plan: the manifest's, or for a run made before manifests recorded it, the plan
    derived without the model from the manifest's configuration and data (behavioral.runner.plan.derived_plan)."""
    plan, derived, unknown = manifest.plan, False, ""
    if plan is None:
        try:
            plan, derived = derived_plan(run_dir, manifest), True
        except ValueError as err:
            unknown = f"the manifest records no plan and it cannot be derived: {err}"
    planned = (None, None) if plan is None else (plan.units, plan.rows)
    return Completeness(int(rows["unit_id"].nunique()), len(rows), *planned, derived, unknown,
                        manifest.seals is not None)


def _check_mode(run_dir: Path, mode: str, rows: pd.DataFrame) -> None:
    """Refuse rows that cannot come from the manifest's mode (an edited or damaged manifest)."""
    scored, replied = rows["valid_mass"].notna(), rows["response"].notna()
    wrong = {"generate": "holds answer-set scores" if scored.any() else None,
             "score": "holds rows with neither a reply nor a score" if (~scored & ~replied).any() else None,
             "both": "holds no generated reply" if not replied.any() else None}[mode]
    if wrong:
        raise RunDirError(f"{run_dir}: its manifest says mode {mode!r} but its results {wrong}; expected rows "
                          "written in that mode (was the manifest edited?)")


def read_run(run_dir: str | Path, suite: str, allow_partial: bool = False
             ) -> tuple[Manifest, pd.DataFrame, Completeness]:
    """(manifest, rows, completeness) of a run of `suite`; another suite's run, a manifest field of the wrong type,
    rows that do not fit the manifest or come from another run, a run without rows, and a partial run (unless
    `allow_partial`) are RunDirErrors that say what to do."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    check_recorded(manifest.config, run_dir / MANIFEST)
    if manifest.suite != suite:
        raise RunDirError(f"{run_dir} holds a run of suite {manifest.suite!r}; expected a {suite} run")
    declared = get_declaration(suite)
    options_of(manifest, declared.Options, run_dir / MANIFEST)
    rows = read_results(run_dir)
    if rows.empty:
        raise RunDirError(f"{run_dir}: holds no results yet; run it first (rerun its command to resume)")
    expected = result_schema(declared.fields).names
    if list(rows.columns) != expected:
        differ = sorted(set(expected) ^ set(rows.columns))
        raise RunDirError(f"{run_dir}: its results have other columns than a {suite} run ({', '.join(differ)}); "
                          f"expected rows written by `empathy-gap run {suite}` (was the manifest edited?)")
    _check_mode(run_dir, manifest.mode, rows)
    done = completeness(run_dir, manifest, rows)
    if not done.complete and not allow_partial:
        what = (f"is partial: {done.units} of {done.planned_units} work units ({done.rows} of {done.planned_rows} "
                "rows) finished") if done.known else f"may be partial: {done.unknown}"
        raise RunDirError(f"{run_dir} {what}; finish it (rerun its command) or pass --allow-partial")
    return manifest, rows, done
