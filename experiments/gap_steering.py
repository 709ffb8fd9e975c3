"""Steering and probing the empathy gap for one model: a thin example of the steer and probe studies
(`empathy-gap interp steer|probe`) on one intergroup category and setting.

    python experiments/gap_steering.py --run RUN_DIR --out OUT            # a run made with --capture final
    python experiments/gap_steering.py --model smollm2-135m --category religion --setting P0S1T0 \\
        --limit-events 4 --out OUT                                         # makes the capture run in OUT/capture

With --model the capture run comes first (score mode, final-token states of every layer and every event), timed on
one batch with its estimate printed, then with a progress bar. Writes OUT/steer (the steer study: the in-group
direction per layer fit on a seeded half of the events, the gap in points and δ with intervals over the held-out
events and the refusal and numeric rates per steering, the controls asked for, the zero-coefficient check, figures,
report.md), its steered run directories in OUT/steering (resumed on a rerun), and OUT/probe (the probe
study: in-group and perceiver-group probes per layer, split by sample and by cell). With --probes-only (and --run)
only the probes are computed, from the capture alone; no model is loaded. Exits 1 if coefficient 0 does not
reproduce the unsteered run exactly, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from behavioral import models
from behavioral.estimate import estimate_run
from behavioral.options import comma_values
from behavioral.output_folder import check_output_folder
from behavioral.studies import get_study, run_study
from behavioral.studies.rerun import suite_protocol
from behavioral.studies.steer import PROTOCOLS
from behavioral.studies.study import read_study_runs

COMMAND = "study gap_steering"
CAPTURE_DIR, STEER_DIR, PROBE_DIR = "capture", "steer", "probe"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="an existing run directory made with --capture final")
    source.add_argument("--model", help="make a capture run of this model first (into OUT/capture)")
    parser.add_argument("--out", type=Path, required=True, help="output folder: new, empty, or an earlier output")
    parser.add_argument("--category", help="required with --model; with --run, default: the run's first")
    parser.add_argument("--setting", help="required with --model; with --run, default: the run's first")
    parser.add_argument("--limit-events", type=int, default=4, help="with --model: events of the capture run, a "
                                                                    "seeded sample; half fit the direction, half test it")
    parser.add_argument("--events", help="with --model: crowd-enVENT release (default: the embedded events)")
    parser.add_argument("--layers", default="middle", help="decoder layers to steer (the layer grammar)")
    parser.add_argument("--coefs", default="-4,0,4", help="coefficients, comma-separated (0 is always added)")
    parser.add_argument("--unit", action="store_true", help="unit-normalise the directions")
    parser.add_argument("--project", action="store_true", help="also project each layer's direction out")
    parser.add_argument("--matchings", type=int, default=0, help="with --project: wrong matchings as the control")
    parser.add_argument("--random-directions", type=int, default=0,
                        help="with --project: random directions within the states' span as the control")
    parser.add_argument("--n-permutations", type=int, default=10_000)
    parser.add_argument("--cv", type=int, default=5)
    parser.add_argument("--n-shuffles", type=int, default=3, help="shuffled-label refits per probe")
    parser.add_argument("--probe-splits", default="sample,cell", help="sample, cell or an index field, comma list")
    parser.add_argument("--probe-layers", default="all", help="layers to probe (the layer grammar)")
    parser.add_argument("--probes-only", action="store_true", help="with --run: the probes alone (no model)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the capture run, the folds and permutations")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default=None, help="default: auto with --model, the run's with --run")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let the model folder run its own code (never taken from a run's manifest)")
    args = parser.parse_args(argv)
    if args.model and not (args.category and args.setting):
        parser.error("--model needs --category and --setting")
    if args.run and args.events:
        parser.error("--events goes with --model; a --run brings its own events")
    if args.probes_only and not args.run:
        parser.error("--probes-only goes with --run")
    return args


def capture_run(args: argparse.Namespace) -> Path:
    """OUT/capture: the suite slice with final-token capture (all layers), made or resumed, its estimate first."""
    from behavioral.run import RunConfig, run
    from behavioral.suites.intergroup import Options

    options = Options(categories=(args.category,), settings=(args.setting,), events=args.events,
                      limit_events=args.limit_events)
    config = RunConfig(suite="intergroup", model=args.model, options=options, seed=args.seed, mode="score",
                       device=args.device, dtype=args.dtype or "auto", batch_size=args.batch_size, capture=("final",),
                       layers="all", per_cell_samples=args.limit_events, trust_remote_code=args.trust_remote_code)
    loaded = models.load(args.model, args.device, config.dtype, args.trust_remote_code)
    out = args.out / CAPTURE_DIR
    print(f"capture run: {estimate_run(config, loaded, out).describe()}", flush=True)
    return run(config, out, loaded=loaded)


def studies(args: argparse.Namespace, run_dir: Path) -> None:
    """The steer study (unless --probes-only) and the probe study on the category and setting asked for (default:
    the run's first); a run of a suite without a steering protocol is a ValueError saying so."""
    (run,) = read_study_runs([run_dir])
    asked = {k: v for k, v in (("category", args.category), ("setting", args.setting)) if v}
    selection = suite_protocol(run, PROTOCOLS, "steering").block(run.config, asked)
    where = tuple(f"{k}={v}" for k, v in selection.items())
    if not args.probes_only:
        steer = get_study("steer")
        options = steer.Options(where=where, layers=args.layers, coefs=tuple(comma_values(args.coefs)),
                                unit=args.unit, project=args.project, matchings=args.matchings,
                                random_directions=args.random_directions, permutations=args.n_permutations,
                                seed=args.seed,
                                device=args.device, dtype=args.dtype,
                                batch_size=args.batch_size, trust_remote_code=args.trust_remote_code)
        run_study(steer, [run_dir], options, args.out / STEER_DIR)
    probe = get_study("probe")
    run_study(probe, [run_dir], probe.Options(where=where, splits=tuple(comma_values(args.probe_splits)),
                                              layers=args.probe_layers, cv=args.cv, seed=args.seed,
                                              n_shuffles=args.n_shuffles), args.out / PROBE_DIR)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_output_folder(args.out, COMMAND, keep=(CAPTURE_DIR, STEER_DIR, PROBE_DIR))
        studies(args, capture_run(args) if args.model else args.run)
    except (ValueError, OSError) as err:  # bad input: one line, exit 2
        print(f"gap_steering: error: {err}", file=sys.stderr)
        return 2
    folders = [PROBE_DIR] if args.probes_only else [STEER_DIR, PROBE_DIR]
    for folder in folders:
        print(f"wrote {args.out / folder / 'report.md'}")
    if not args.probes_only:
        record = json.loads((args.out / STEER_DIR / "manifest.json").read_text())
        if record["zero_coefficient_reproduces_unsteered"] is False:
            print("gap_steering: coefficient 0 did NOT reproduce the unsteered run exactly; see "
                  f"{args.out / STEER_DIR / 'zero_coefficient_check.csv'}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
