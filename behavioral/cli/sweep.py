"""The commands over many runs: `sweep` (models × suites from one TOML file, then its analysis) and `export` (a run
or a sweep as a tidy Parquet dataset with its card)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from behavioral.analysis.export import export_runs
from behavioral.cli.arguments import Parser
from behavioral.analysis.sweep import analyze_sweep
from behavioral.core.distributed import place
from behavioral.sweep.config import read_sweep
from behavioral.rundir.manifest import MANIFEST
from behavioral.core.options import FLAG, add_flags, flag_name, from_flags
from behavioral.suite.registry import get_suite
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
    outcome = run_sweep(config, progress=not args.no_progress, trust_remote_code=args.trust_remote_code,
                        started=functools.partial(_say_plan, config))
    print(outcome.describe(len(config.runs)))
    if place().is_main and not args.no_analyze:
        print(f"report in {analyze_sweep(config.out, allow_partial=bool(outcome.failed))}")
    if outcome.failed:
        raise ValueError(f"{len(outcome.failed)} of {len(config.runs)} runs failed (listed above); fix what they name "
                         "and rerun the same command to continue")


def _say_plan(config) -> None:
    """Print the sweep's plan (its runs, their prompts, what is finished) on the main process, as it starts."""
    if place().is_main:
        print(describe_plan(config, plan_sweep(config, calibrate=False, trust_remote_code=True)), flush=True)


def is_sweep(paths: Sequence[str]) -> bool:
    """True where `empathy-gap analyze` was given one folder and it holds a sweep."""
    return len(paths) == 1 and is_sweep_folder(Path(paths[0]))


def analyze(argv: Sequence[str], folder: str, common: Callable[[argparse.ArgumentParser], None]) -> None:
    """`empathy-gap analyze SWEEP_DIR [flags]`: the sweep's analysis (its runs are named by their models) with the
    flags every analysis has (`common` adds them) and each of its suites' analysis flags, which apply to every run
    of that suite; a flag two of its suites declare is refused, as which suite it means is unclear."""
    suites = {name: cls for name in dict.fromkeys(r.suite for r in read_state(folder).runs)
              if (cls := get_suite(name).AnalyzeOptions) is not None}
    own = {name: _flag_parser(cls) for name, cls in suites.items()}
    owners: dict[str, list[str]] = {}
    for name, parser in own.items():
        for flag in parser._option_string_actions:
            owners.setdefault(flag, []).append(name)
    shared = {flag: names for flag, names in owners.items() if len(names) > 1}
    parser = Parser(prog="empathy-gap analyze (sweep)", allow_abbrev=False)
    parser.add_argument("command")
    parser.add_argument("folder", metavar="SWEEP")
    common(parser)
    for name, cls in suites.items():
        add_flags(parser.add_argument_group(f"{name} analysis options (every {name} run of the sweep)"), cls,
                  skip=[f.name for f in dataclasses.fields(cls) if FLAG in f.metadata and flag_name(f) in shared])
    for flag, names in shared.items():
        parser.add_argument(flag, dest=f"shared{flag}", nargs="?", metavar="VALUE",
                            help=f"refused: an analysis flag of {' and '.join(names)}")
    args = parser.parse_args(argv)
    for flag, names in shared.items():
        if getattr(args, f"shared{flag}") is not None:
            raise ValueError(f"{flag}: an analysis flag of both {' and '.join(names)} in this sweep, so which it "
                             "means is unclear; set it in their analysis tables of the sweep file and rerun "
                             "`empathy-gap sweep FILE` (finished runs are skipped), or give analyze_sweep's options")
    if args.names:
        raise ValueError("--names: a sweep's runs are named by their models' names in the sweep file; leave it out")
    options = {name: _given(own[name], cls, argv) for name, cls in suites.items()}
    print(f"report in {analyze_sweep(args.folder, args.out, args.allow_partial, options)}")


def _flag_parser(cls: type) -> argparse.ArgumentParser:
    """A parser of one suite's analysis flags alone (the others' are left over)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_flags(parser, cls)
    return parser


def _given(parser: argparse.ArgumentParser, cls: type, argv: Sequence[str]) -> dict[str, Any]:
    """The options of `cls` that `argv` gives, by field, as the options hold them (from_flags)."""
    parsed = parser.parse_known_args(argv)[0]
    options = from_flags(cls, parsed)
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(cls) if FLAG in f.metadata
            and getattr(parsed, parser._option_string_actions[flag_name(f)].dest) not in (None, False)}


def export(args: argparse.Namespace) -> None:
    """`empathy-gap export RUN_OR_SWEEP... --to DIR`: run directories as they are, or a sweep's started runs labelled
    by their model and setting in the sweep file."""
    if is_sweep(args.sources):
        folder = Path(args.sources[0])
        state = read_state(folder)
        started = [(r, out) for r in state.runs
                   if ((out := slot(folder, r, state.finished.get(r.name))) / MANIFEST).is_file()]
        if not started:
            raise ValueError(f"{folder}: no run of the sweep has started; run the sweep first")
        card = export_runs([out for _, out in started], args.to,
                           [{"model": r.model, "setting": r.setting} for r, _ in started])
    else:
        card = export_runs(args.sources, args.to)
    print(f"dataset card in {card}")
