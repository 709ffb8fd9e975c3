"""The commands over many runs: `sweep` (models × suites from one TOML file, then its analysis) and `export` (a run
or a sweep as a tidy Parquet dataset with its card)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from pathlib import Path

from behavioral.analysis.export import export_runs
from behavioral.analysis.sweep import analyze_sweep
from behavioral.distributed import place
from behavioral.sweep.config import read_sweep
from behavioral.manifest import MANIFEST
from behavioral.sweep.folder import is_sweep_folder, read_state, slot
from behavioral.sweep.plan import describe_plan, plan_sweep
from behavioral.sweep.runner import run_sweep


def sweep(args: argparse.Namespace) -> None:
    """Plan (`--dry-run`: its own cost first, then the plan) or run the sweep, then analyze it on the main process;
    failed runs end in a ValueError after the others ran."""
    config = read_sweep(args.config, args.out)
    if args.dry_run:
        planned = plan_sweep(config, not args.no_calibrate, args.trust_remote_code,
                             say=functools.partial(print, flush=True))
        print(describe_plan(config, planned))
        return
    outcome = run_sweep(config, progress=not args.no_progress, trust_remote_code=args.trust_remote_code)
    print(outcome.describe(len(config.runs)))
    if place().is_main and not args.no_analyze:
        print(f"report in {analyze_sweep(config.out, allow_partial=bool(outcome.failed))}")
    if outcome.failed:
        raise ValueError(f"{len(outcome.failed)} of {len(config.runs)} runs failed (listed above); fix what they name "
                         "and rerun the same command to continue")


def is_sweep(paths: Sequence[str]) -> bool:
    """True where `empathy-gap analyze` was given one folder and it holds a sweep."""
    return len(paths) == 1 and is_sweep_folder(Path(paths[0]))


def analyze(args: argparse.Namespace) -> None:
    """`empathy-gap analyze SWEEP_DIR`: the sweep's analysis (its runs are named by their models)."""
    if args.names:
        raise ValueError("--names: a sweep's runs are named by their models' names in the sweep file; leave it out")
    print(f"report in {analyze_sweep(args.run_dirs[0], args.out, args.allow_partial)}")


def export(args: argparse.Namespace) -> None:
    """`empathy-gap export RUN_OR_SWEEP... --to DIR`: run directories as they are, or a sweep's started runs labelled
    by their model and setting in the sweep file."""
    if is_sweep(args.sources):
        folder = Path(args.sources[0])
        started = [(r, out) for r in read_state(folder).runs if ((out := slot(folder, r)) / MANIFEST).is_file()]
        if not started:
            raise ValueError(f"{folder}: no run of the sweep has started; run the sweep first")
        card = export_runs([out for _, out in started], args.to,
                           [{"model": r.model, "setting": r.setting} for r, _ in started])
    else:
        card = export_runs(args.sources, args.to)
    print(f"dataset card in {card}")
