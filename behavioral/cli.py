"""The `empathy-gap` command: list the suites, run one into a run directory, import results made elsewhere, analyze
run directories, or run the embedded demo (seed 000 on SmolLM2)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from behavioral.suite import Suite

DEMO_MODEL = "smollm2-135m"
DEMO_CATEGORIES = ("nationality", "religion")
DEMO_SETTINGS = ("P0S1T0",)
DEMO_EVENTS = 8


# The run flags' defaults; a suite replaces some with its own (Suite.run_defaults), shown in its --help.
RUN_DEFAULTS = {"mode": "generate", "seed": 0, "temperature": 0.0, "top_p": 1.0, "samples": 1, "max_new_tokens": 128,
                "prompt_format": "auto"}


def _run_defaults(suite: Suite) -> dict[str, Any]:
    """The run flags' defaults for `suite`: the generic ones, replaced by the suite's own."""
    return RUN_DEFAULTS | dict(suite.run_defaults)


def _add_run_options(p, suite: Suite) -> None:
    """The flags every suite's run has: model, decoding, hardware, resume unit, capture."""
    d = _run_defaults(suite)
    p.add_argument("--model", required=True, help=f"Hugging Face id, local folder, .gguf file or {DEMO_MODEL}")
    p.add_argument("--out", required=True, help="run directory (rerun the same command to resume)")
    p.add_argument("--mode", choices=("generate", "score", "both"), default=d["mode"],
                   help=f"generate: decode a reply and parse it; score: the distribution over the answer set "
                        f"(default {d['mode']})")
    p.add_argument("--seed", type=int, default=d["seed"],
                   help=f"seeds data samples, sampling streams and per-cell samples (default {d['seed']})")
    p.add_argument("--temperature", type=float, default=d["temperature"],
                   help=f"0: greedy decoding (default {d['temperature']:g})")
    p.add_argument("--top-p", type=float, default=d["top_p"], help=f"default {d['top_p']:g}")
    p.add_argument("--samples", type=int, help=f"sampled replies per item (default {d['samples']} with "
                                               "--temperature above 0; 1 when greedy and in score mode)")
    p.add_argument("--max-new-tokens", type=int, default=d["max_new_tokens"],
                   help=f"decoding limit (default {d['max_new_tokens']}); a reply stops earlier once its answer is "
                        "decided")
    p.add_argument("--prompt-format", choices=("auto", "chat", "plain"), default=d["prompt_format"],
                   help=f"auto: the chat template where the tokenizer has one, else plain text (default "
                        f"{d['prompt_format']})")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, else fp32), fp32, bf16, fp16")
    p.add_argument("--unit-size", type=int, default=32, help="items per work unit (the unit of resume)")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--capture", default="", help="residual-stream capture: a comma list of the suite's capture "
                                                 "kinds (intergroup: persona, experiencer, final) or all")
    p.add_argument("--layers", default="all", help="layers to capture: all or a comma list such as 0,4,8")
    p.add_argument("--per-cell-samples", type=int, default=0,
                   help="single-prompt final-token states kept per cell (seeded), besides the per-cell means")
    p.add_argument("--no-progress", action="store_true")


def _parser() -> argparse.ArgumentParser:
    from behavioral.suites import get_suite, names

    parser = argparse.ArgumentParser(prog="empathy-gap", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("suites", help="list the suites, one line each")
    run = sub.add_parser("run", help="run a suite into a run directory (resumable)")
    suites = run.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for name in names():
        suite = get_suite(name)
        p = suites.add_parser(name, help=suite.description, description=suite.description)
        _add_run_options(p.add_argument_group("run options (every suite)"), suite)
        suite.add_arguments(p.add_argument_group(f"{name} options"))
    imports = sub.add_parser("import", help="write results made elsewhere as a run directory (suites that can)")
    importers = imports.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for name in names():
        suite = get_suite(name)
        if suite.imports:
            suite.add_import_arguments(importers.add_parser(name, help=suite.imports, description=suite.imports))
    analyze = sub.add_parser("analyze", help="tables, figures and report.md of run directories "
                                             "(the suite's own flags: empathy-gap analyze RUN_DIR --help)")
    analyze.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    analyze.add_argument("--out", help="output directory (default RUN_DIR/analysis)")
    demo = sub.add_parser("demo", help=f"run {DEMO_MODEL} in score mode on the embedded events, then analyze")
    demo.add_argument("--out", default="empathy-gap-demo")
    demo.add_argument("--limit-events", type=int, default=DEMO_EVENTS)
    demo.add_argument("--batch-size", type=int, default=32)
    demo.add_argument("--no-progress", action="store_true")
    return parser


def _samples(args: argparse.Namespace, suite: Suite) -> int:
    """--samples as given, else the suite's default where replies are sampled, else 1 (one answer per item)."""
    if args.samples is not None:
        return args.samples
    sampled = args.mode != "score" and args.temperature > 0
    return _run_defaults(suite)["samples"] if sampled else 1


def _run(args: argparse.Namespace) -> None:
    from behavioral.run import RunConfig, run
    from behavioral.suite import comma_values
    from behavioral.suites import get_suite

    suite = get_suite(args.suite)
    kinds = suite.capture.kinds if suite.capture else ()
    capture = tuple(comma_values(args.capture))
    config = RunConfig(
        suite=suite.name, model=args.model, options=suite.options(args), mode=args.mode, seed=args.seed,
        temperature=args.temperature, top_p=args.top_p, samples=_samples(args, suite),
        max_new_tokens=args.max_new_tokens,
        prompt_format=args.prompt_format, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
        unit_size=args.unit_size, trust_remote_code=args.trust_remote_code,
        capture=kinds if capture == ("all",) else capture, layers=args.layers, per_cell_samples=args.per_cell_samples,
    )
    out = run(config, args.out, progress=not args.no_progress)
    print(f"results in {out}")


def _analyze(argv: Sequence[str], parsed: argparse.Namespace) -> None:
    """Analyze with the suite's own flags, which are known once the first run directory's manifest is read."""
    from behavioral.store import read_manifest
    from behavioral.suites import get_suite

    suites = {read_manifest(d)["config"]["suite"] for d in parsed.run_dirs}
    if len(suites) > 1:
        raise ValueError(f"the run directories hold runs of different suites ({', '.join(sorted(suites))}); "
                         "expected runs of one suite")
    suite = get_suite(suites.pop())
    parser = argparse.ArgumentParser(prog=f"empathy-gap analyze ({suite.name})")
    parser.add_argument("command")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--out", help="output directory (default RUN_DIR/analysis)")
    parser.add_argument("--allow-partial", action="store_true",
                        help="analyze runs that have not finished every work unit (the report gives the counts)")
    suite.add_analyze_arguments(parser)
    args = parser.parse_args(argv)
    report = suite.analyze([Path(d) for d in args.run_dirs], Path(args.out) if args.out else None, args)
    print(f"report in {report}")


def _demo(args: argparse.Namespace) -> None:
    from behavioral.run import RunConfig, run
    from behavioral.suites.intergroup import Options
    from behavioral.suites.intergroup.analysis import analyze

    started = time.perf_counter()
    options = Options(categories=DEMO_CATEGORIES, settings=DEMO_SETTINGS, limit_events=args.limit_events)
    config = RunConfig(suite="intergroup", model=DEMO_MODEL, options=options, mode="score",
                       batch_size=args.batch_size)
    run(config, args.out, progress=not args.no_progress)
    report = analyze(args.out, None, n_permutations=10_000, measure="expected_intensity")
    print(f"report in {report}")
    print(f"demo finished in {time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; bad input ends with one message and exit status 2, Ctrl-C (even while the
    suites load) with one line and status 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        done = "finished work is saved; rerun the same command to resume" if argv[:1] in (["run"], ["demo"]) else \
            "nothing was written"
        print(f"empathy-gap: interrupted; {done}", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    """Parse `argv` and run the command."""
    from behavioral.suites import get_suite, names

    parser = _parser()
    if argv[:1] == ["analyze"] and len(argv) > 1 and not argv[1].startswith("-"):
        # The suite's own analyze flags (and its --help) are parsed once the run directory names the suite.
        args, _ = parser.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    else:
        args = parser.parse_args(argv)
    try:
        if args.command == "suites":
            for name in names():
                print(f"{name:<12} {get_suite(name).description}")
        elif args.command == "run":
            _run(args)
        elif args.command == "import":
            print(f"results in {get_suite(args.suite).import_results(args)}")
        elif args.command == "analyze":
            _analyze(argv, args)
        else:
            _demo(args)
    except (ValueError, OSError) as err:
        print(f"empathy-gap: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
