"""Steering and probing the empathy gap for one model: the steer study (`empathy-gap interp steer`), its flags the
study's own, then the probe study at its defaults on the same category and setting (`empathy-gap interp probe` takes
the probe's options).

    python experiments/gap_steering.py --run RUN_DIR --out OUT            # a run made with --capture final
    python experiments/gap_steering.py --model smollm2-135m --where category=religion,setting=P0S1T0 \\
        --limit-events 4 --out OUT                                         # makes the capture run in OUT/capture

With --model the capture run of the slice --where names (default category=religion, setting=P0S1T0) comes first
(score mode, final-token states of every layer and every event), its estimate printed, and the steer study reruns the
same loaded model. Writes OUT/steer (report.md, tables, figures; its steered runs in OUT/steer/runs, resumed on a
rerun) and OUT/probe. With --probes-only (and --run) only the probes are computed, from the capture alone; no model
is loaded. Exits 1 if coefficient 0 does not reproduce the unsteered run exactly, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from behavioral.inference import models
from behavioral.runner.estimate import estimate_run
from behavioral.core.options import add_flags, from_flags
from behavioral.analysis.output_folder import check_output_folder
from behavioral.runner.run import RunConfig, run
from behavioral.analysis.studies import get_study
from behavioral.analysis.study import run_study
from interp.identities import parse_where
from behavioral.analysis.rerun import protocol_of
from interp.steering.study import Options as SteerOptions
from behavioral.analysis.study import read_study_runs
from behavioral.suites.intergroup import Options

STEER, PROBE = get_study("steer"), get_study("probe")
SLICE = {"category": "religion", "setting": "P0S1T0"}  # the --model run's, where --where leaves them out
CAPTURE_DIR, STEER_DIR, PROBE_DIR = "capture", "steer", "probe"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The script's flags: where the run comes from, --out, --probes-only and the steer study's options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="an existing run directory made with --capture final")
    source.add_argument("--model", help="make a capture run of this model first (into OUT/capture)")
    parser.add_argument("--out", type=Path, required=True, help="output folder: new, empty, or an earlier output")
    parser.add_argument("--limit-events", type=int, default=4, help="with --model: events of the capture run, a "
                                                                    "seeded sample (default 4)")
    parser.add_argument("--probes-only", action="store_true", help="with --run: the probes alone (no model)")
    add_flags(parser.add_argument_group("steer options"), STEER.Options)
    args = parser.parse_args(argv)
    if args.probes_only and not args.run:
        parser.error("--probes-only goes with --run")
    return args


def capture_run(model: str, options: SteerOptions, limit_events: int, out: Path, loaded: tuple) -> Path:
    """OUT/capture: the slice with final-token capture (all layers) of `loaded`, made or resumed, its estimate
    first."""
    where = SLICE | parse_where(options.where)
    suite = Options(categories=(where["category"],), settings=(where["setting"],), limit_events=limit_events)
    config = RunConfig("intergroup", model, suite, mode="score", batch_size=options.batch_size, capture=("final",),
                       per_cell_samples=limit_events, trust_remote_code=options.trust_remote_code)
    print(f"capture run: {estimate_run(config, loaded, out).describe()}", flush=True)
    return run(config, out, loaded=loaded)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the example; exit 1 if coefficient 0 does not reproduce the unsteered run, 2 on bad input."""
    args = parse_args(argv)
    try:
        options = from_flags(STEER.Options, args)
        check_output_folder(args.out, "study gap_steering", keep=(CAPTURE_DIR, STEER_DIR, PROBE_DIR))
        run_dir, loaded = args.run, None
        if args.model:
            loaded = models.load(args.model, options.device, options.dtype or "auto", options.trust_remote_code)
            run_dir = capture_run(args.model, options, args.limit_events, args.out / CAPTURE_DIR, loaded)
        (read,) = read_study_runs([run_dir])  # the steer study's slice, the probes' too
        selection = protocol_of(read, "steer").block(read.config, parse_where(options.where))
        steer = None if args.probes_only else run_study(STEER, [run_dir], options, args.out / STEER_DIR,
                                                        model=loaded)
        probe = run_study(PROBE, [run_dir], out=args.out / PROBE_DIR,
                          where=tuple(f"{k}={v}" for k, v in selection.items()))
    except (ValueError, OSError) as err:  # bad input: one line, exit 2
        print(f"gap_steering: error: {err}", file=sys.stderr)
        return 2
    for result in (steer, probe):
        if result is not None:
            print(f"wrote {result.report}")
    if steer is not None and steer.manifest["zero_coefficient_reproduces_unsteered"] is False:
        print("gap_steering: coefficient 0 did NOT reproduce the unsteered run exactly; see "
              f"{steer.folder / 'zero_coefficient_check.csv'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
