"""The `empathy-gap` command: run the suite, analyze a run directory, or run the embedded demo."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from behavioral.groups import CATEGORIES
from behavioral.settings import SETTING_NAMES

DEMO_MODEL = "smollm2-135m"
DEMO_CATEGORIES = ("nationality", "religion")
DEMO_SETTINGS = ("P0S1T0",)
DEMO_EVENTS = 8


def _choices(values: Sequence[str] | None, known: Sequence[str], what: str) -> tuple[str, ...]:
    """Expand repeated/comma-separated values and `all`; unknown names are an error naming the known ones."""
    if not values:
        return tuple(known)
    names = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if "all" in names:
        return tuple(known)
    for name in names:
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}; expected one of {', '.join(known)} or all")
    return tuple(dict.fromkeys(names))


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=("generate", "score", "both"), default="generate",
                   help="generate: greedy decoding parsed as the authors did; score: distribution over valid answers")
    p.add_argument("--events", help="crowd-enVENT release directory/TSV or crowd-enVent_generation.tsv "
                                    "(default: the project's embedded events)")
    p.add_argument("--limit-events", type=int, help="seeded sample of N events, stratified by emotion")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on GPU and fast-bf16 CPUs, else fp32), fp32, bf16, fp16")
    p.add_argument("--max-new-tokens", type=int, default=128,
                   help="decoding limit (the authors' 128); a reply stops earlier once its answer is decided")
    p.add_argument("--unit-size", type=int, default=32, help="events per work unit (the unit of resume)")
    p.add_argument("--rewrite-model", help="model that writes T2 third-person text for a generation TSV "
                                           "(default: --model)")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--capture", default="", help="residual-stream capture: a comma list of persona, experiencer, "
                                                 "final (or all); stored in RUN_DIR/activations")
    p.add_argument("--layers", default="all", help="layers to capture: all or a comma list such as 0,4,8")
    p.add_argument("--per-cell-samples", type=int, default=0,
                   help="single-prompt final-token states kept per cell (seeded), besides the per-cell means")
    p.add_argument("--no-progress", action="store_true")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="empathy-gap", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the behavioral suite of seed 000 into a run directory (resumable)")
    run.add_argument("--model", required=True, help=f"Hugging Face id, local folder, .gguf file or {DEMO_MODEL}")
    run.add_argument("--category", action="append", help=f"{', '.join(CATEGORIES)} or all (repeatable)")
    run.add_argument("--setting", action="append", help=f"{', '.join(SETTING_NAMES)} or all (repeatable)")
    run.add_argument("--out", required=True, help="run directory (rerun the same command to resume)")
    _add_run_options(run)
    analyze = sub.add_parser("analyze", help="tables, figures and report.md of a run directory")
    analyze.add_argument("run_dir")
    analyze.add_argument("--out", help="output directory (default RUN_DIR/analysis)")
    analyze.add_argument("--permutations", type=int, default=10_000)
    analyze.add_argument("--measure", choices=("intensity", "expected_intensity"), default="intensity")
    analyze.add_argument("--round-cells", type=int, metavar="DECIMALS",
                         help="round M⁰ cells before z-scoring, as the authors' notebook does with 2 (default: no)")
    analyze.add_argument("--allow-partial", action="store_true",
                         help="analyze an unfinished run, counting missing prompts as refused")
    demo = sub.add_parser("demo", help=f"run {DEMO_MODEL} in score mode on the embedded events, then analyze")
    demo.add_argument("--out", default="empathy-gap-demo")
    demo.add_argument("--limit-events", type=int, default=DEMO_EVENTS)
    demo.add_argument("--batch-size", type=int, default=32)
    demo.add_argument("--no-progress", action="store_true")
    return parser


def _run(args) -> None:
    from behavioral.run import CAPTURE_KINDS, RunConfig, run

    config = RunConfig(
        model=args.model, categories=_choices(args.category, tuple(CATEGORIES), "category"),
        settings=_choices(args.setting, SETTING_NAMES, "setting"), events=args.events,
        limit_events=args.limit_events, seed=args.seed, mode=args.mode, device=args.device, dtype=args.dtype,
        batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, unit_size=args.unit_size,
        trust_remote_code=args.trust_remote_code, rewrite_model=args.rewrite_model,
        capture=_choices(args.capture.split(","), CAPTURE_KINDS, "capture") if args.capture else (),
        layers=args.layers,
        per_cell_samples=args.per_cell_samples,
    )
    out = run(config, args.out, progress=not args.no_progress)
    print(f"results in {out}")


def _analyze(run_dir: str, out: str | None, permutations: int, measure: str, round_cells: int | None = None,
             allow_partial: bool = False) -> None:
    from behavioral.analysis import analyze

    report = analyze(run_dir, out, n_permutations=permutations, measure=measure, round_cells=round_cells,
                     allow_partial=allow_partial)
    print(f"report in {report}")


def _demo(args) -> None:
    from behavioral.run import RunConfig, run

    started = time.perf_counter()
    config = RunConfig(model=DEMO_MODEL, categories=DEMO_CATEGORIES, settings=DEMO_SETTINGS,
                       limit_events=args.limit_events, mode="score", batch_size=args.batch_size)
    run(config, args.out, progress=not args.no_progress)
    _analyze(args.out, None, 10_000, "expected_intensity")
    print(f"demo finished in {time.perf_counter() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; bad input ends with one message and exit status 2."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            _run(args)
        elif args.command == "analyze":
            _analyze(args.run_dir, args.out, args.permutations, args.measure, args.round_cells, args.allow_partial)
        else:
            _demo(args)
    except (ValueError, OSError) as err:
        print(f"empathy-gap: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        done = "finished work is saved; rerun the same command to resume" if args.command != "analyze" else \
            "nothing was written"
        print(f"empathy-gap: interrupted; {done}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
