"""The `empathy-gap` command: list the suites, run one into a run directory, import results made elsewhere, analyze
run directories, run a mechanistic study on them (`interp`), or run the embedded demo (seed 000 on SmolLM2)."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from behavioral.cli import interp as studies
from behavioral.core.distributed import place
from behavioral.cli.arguments import Parser
from behavioral.core.options import add_flags, comma_values, from_flags, quoted, whole_number
from behavioral.suite.registry import get_declaration, get_suite, names
from behavioral.runner.config import RunConfig, run_defaults
from behavioral.runner.settings import add_setting_flags, config_from_flags
from behavioral.rundir.lock import RunLock
from behavioral.suites.intergroup import Options as IntergroupOptions
from behavioral.sweep.config import read_sweep

if TYPE_CHECKING:
    from behavioral.suite.protocol import SuiteDeclaration

DEMO_MODEL = "smollm2-135m"
DEMO_CATEGORIES = ("nationality", "religion")
DEMO_SETTINGS = ("P0S1T0",)
DEMO_EVENTS = 8
DEMO_BATCH = 32
DEMO_OUT = "empathy-gap-demo"


def _add_run_options(p, suite: SuiteDeclaration) -> None:
    """The flags every suite's run has: the run settings' own (RunConfig's declarations), the run directory, vLLM's
    engine arguments a researcher names most, and the progress bar."""
    add_setting_flags(p, RunConfig, run_defaults(suite))
    p.add_argument("--out", required=True, help="run directory (rerun the same command to resume)")
    p.add_argument("--tensor-parallel-size", type=whole_number, dest="vllm_args", action=_EngineArgument,
                   const="tensor_parallel_size", metavar="N",
                   help="--backend vllm: GPUs each layer is split across")
    p.add_argument("--pipeline-parallel-size", type=whole_number, dest="vllm_args", action=_EngineArgument,
                   const="pipeline_parallel_size", metavar="N",
                   help="--backend vllm: GPUs (or nodes) the layers are divided among")
    p.add_argument("--distributed-executor-backend", dest="vllm_args", action=_EngineArgument,
                   const="distributed_executor_backend", metavar="BACKEND",
                   help="--backend vllm: mp (one node) or ray (several nodes)")
    p.add_argument("--no-progress", action="store_true", help="draw no progress bar")


class _EngineArgument(argparse.Action):
    """A flag that names one of vLLM's engine arguments (its `const`): adds (name, value) to --vllm-args' pairs."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), (self.const, values)])


def _suites_to_load(argv: Sequence[str]) -> list[str]:
    """The suites whose flags the parser of `argv` needs: the one `run`/`import` names, every suite where that
    command needs them all (its help, a missing or unknown suite name), none for the other commands; each is read
    from its declaration alone (its options module), never its analysis."""
    if argv[:1] not in (["run"], ["import"]):
        return []
    return [argv[1]] if len(argv) > 1 and argv[1] in names() else names()


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line's parser, with the flags of the suites `argv` needs (`_suites_to_load`)."""
    loaded = _suites_to_load(argv)
    parser = Parser(prog="empathy-gap", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("suites", help="list the suites, one line each")
    run = sub.add_parser("run", help="run a suite into a run directory (resumable)")
    suites = run.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for name in loaded:
        suite = get_declaration(name)
        p = suites.add_parser(name, help=suite.description, description=suite.description)
        _add_run_options(p.add_argument_group("run options (every suite)"), suite)
        suite.add_arguments(p.add_argument_group(f"{name} options"))
    imports = sub.add_parser("import", help="write results made elsewhere as a run directory (suites that can)")
    importers = imports.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for name in loaded:
        suite = get_declaration(name)
        if suite.imports:
            suite.add_import_arguments(importers.add_parser(name, help=suite.imports, description=suite.imports))
    analyze = sub.add_parser("analyze", help="tables, figures and report.md of run directories "
                                             "(the suite's own flags: empathy-gap analyze RUN_DIR --help)")
    analyze.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    _add_analyze_options(analyze)
    studies.add_parser(sub, argv)
    sweep = sub.add_parser("sweep", help="run models x suites from one TOML file into one folder, then analyze it "
                                         "(rerun the same command to continue)")
    sweep.add_argument("config", metavar="SWEEP.toml")
    sweep.add_argument("--out", help="the sweep's folder (default: the file's out key)")
    sweep.add_argument("--dry-run", action="store_true",
                       help="print the plan (runs, prompts, state; time and disk from a few prompts of each run left, "
                            "each model loaded once) and write nothing")
    sweep.add_argument("--no-calibrate", action="store_true",
                       help="with --dry-run: the plan only (runs, prompts, state), in seconds: load no model, time "
                            "nothing")
    sweep.add_argument("--no-analyze", action="store_true", help="do not analyze the sweep at its end")
    sweep.add_argument("--trust-remote-code", action="store_true",
                       help="allow the models whose tables set trust_remote_code = true to run their own code")
    sweep.add_argument("--no-progress", action="store_true", help="draw no progress bars")
    export = sub.add_parser("export", help="runs or a sweep as a tidy Parquet dataset (a row per prompt) with its "
                                           "dataset card, for pandas, datasets or a hub upload")
    export.add_argument("sources", nargs="+", metavar="RUN_OR_SWEEP",
                        help="run directories, or one sweep folder (its runs named by model and setting)")
    export.add_argument("--to", required=True, help="the dataset's folder (new, or an earlier export's)")
    demo = sub.add_parser("demo", help=f"run {DEMO_MODEL} in score mode on the embedded events, then analyze")
    demo.add_argument("--out", default=DEMO_OUT, metavar="DIR",
                      help=f"the run directory, its analysis in DIR/analysis (rerun to resume; default {DEMO_OUT})")
    demo.add_argument("--limit-events", type=whole_number, default=DEMO_EVENTS, metavar="N",
                      help=f"a seeded sample of N embedded events, stratified by emotion (default {DEMO_EVENTS})")
    demo.add_argument("--batch-size", type=whole_number, default=DEMO_BATCH, metavar="N",
                      help=f"prompts per forward pass; decides speed, not rows (default {DEMO_BATCH})")
    demo.add_argument("--no-progress", action="store_true", help="draw no progress bar")
    return parser


def run_config(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of parsed `run` flags: a decoding flag left out is None, so RunConfig applies the suite's
    default as it does for a script."""
    suite = get_declaration(args.suite)
    return config_from_flags(RunConfig, args, suite, suite=suite.name, options=suite.options(args))


def _run(args: argparse.Namespace) -> None:
    from behavioral.runner.run import run

    out = run(run_config(args), args.out, progress=not args.no_progress)
    print(f"results in {out}")


def _analyze(argv: Sequence[str], parsed: argparse.Namespace) -> None:
    """Analyze with the suite's own flags (its AnalyzeOptions), which are known once the run directories' manifests
    name the suite."""
    from behavioral.analysis import analyze
    from behavioral.analysis.runs import suite_of

    suite = get_suite(suite_of(parsed.run_dirs))
    parser = Parser(prog=f"empathy-gap analyze ({suite.name})")
    parser.add_argument("command")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    _add_analyze_options(parser)
    if suite.AnalyzeOptions is not None:
        add_flags(parser.add_argument_group(f"{suite.name} analysis options"), suite.AnalyzeOptions)
    args = parser.parse_args(argv)
    options = from_flags(suite.AnalyzeOptions, args) if suite.AnalyzeOptions is not None else None
    report = analyze(args.run_dirs, args.out, options, comma_values(args.names) or None, args.allow_partial)
    print(f"report in {report}")


def _add_analyze_options(parser: argparse.ArgumentParser) -> None:
    """The flags every suite's analysis has."""
    parser.add_argument("--out", help="output directory (default RUN_DIR/analysis of the first run)")
    parser.add_argument("--names", help="the runs' names in tables, comma-separated in the order of the run "
                                        "directories (default: their models' names)")
    parser.add_argument("--allow-partial", action="store_true",
                        help="analyze runs that have not finished every work unit (the report gives the counts)")


def _demo(args: argparse.Namespace) -> None:
    from behavioral.analysis import analyze
    from behavioral.runner.run import run

    started = time.perf_counter()
    options = IntergroupOptions(categories=DEMO_CATEGORIES, settings=DEMO_SETTINGS, limit_events=args.limit_events)
    config = RunConfig(suite="intergroup", model=DEMO_MODEL, options=options, mode="score",
                       batch_size=args.batch_size)
    run(config, args.out, progress=not args.no_progress)
    report = analyze([args.out])  # a score run: its expected intensity, the suite's default for the mode
    print(f"report in {report}")
    print(f"demo finished in {time.perf_counter() - started:.0f} s")


def _refuse_sweep_in_use(args: argparse.Namespace) -> None:
    """Refuse a sweep folder another sweep is writing before the sweep's machinery (the engine, torch) is imported:
    the lock run_sweep takes is tried and let go at once (a RunDirError names its holder)."""
    folder = read_sweep(args.config, args.out).out
    if folder.is_dir():
        with RunLock(folder, place().rank, "sweep"):
            pass


def _message(err: Exception) -> str:
    """What the command prints of an error: a file system error names its file cut to a readable length (a
    5,000-character name is not echoed whole)."""
    if isinstance(err, OSError) and err.filename is not None:
        return f"{quoted(str(err.filename))}: {err.strerror}"
    return str(err)


def _warning_line(message: Warning | str, *_) -> str:
    """A warning as the command prints it: one line, without Python's file and source line."""
    return f"empathy-gap: warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; bad input ends with one message and exit status 2, Ctrl-C (even while the
    suites load) with one line and status 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    warnings.formatwarning = _warning_line
    try:
        return _main(argv)
    except KeyboardInterrupt:
        resumable = argv[:1] in (["run"], ["demo"], ["sweep"])
        done = "finished work is saved; rerun the same command to resume" if resumable else "nothing was written"
        print(f"empathy-gap: interrupted; {done}", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    """Parse `argv` and run the command."""
    parser = _parser(argv)
    if argv[:1] == ["analyze"] and len(argv) > 1 and not argv[1].startswith("-"):
        # The suite's own analyze flags (and its --help) are parsed once the run directory names the suite.
        args, _ = parser.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    else:
        args = parser.parse_args(argv)
    try:
        if args.command == "suites":
            for name in names():
                print(f"{name:<12} {get_declaration(name).description}")
        elif args.command == "run":
            _run(args)
        elif args.command == "import":
            print(f"results in {get_suite(args.suite).import_results(args)}")
        elif args.command == "analyze":
            from behavioral.cli import sweep as sweep_cli

            if sweep_cli.is_sweep(args.run_dirs):
                sweep_cli.analyze(argv, args.run_dirs[0], _add_analyze_options)  # and its suites' flags
            else:
                _analyze(argv, args)
        elif args.command in ("sweep", "export"):
            if args.command == "sweep" and not args.dry_run:
                _refuse_sweep_in_use(args)
            from behavioral.cli import sweep as sweep_cli

            (sweep_cli.sweep if args.command == "sweep" else sweep_cli.export)(args)
        elif args.command == "interp":
            studies.run(args)
        else:
            _demo(args)
    except (ValueError, OSError) as err:
        for line in _message(err).splitlines() or [""]:  # a refusal of several problems names each on its own line
            print(f"empathy-gap: error: {line}", file=sys.stderr)
        return 2
    return 0

