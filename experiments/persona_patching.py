"""Persona patching: which layers carry the empathy gap δ? A thin example of the patch study (`empathy-gap interp
patch`) on one intergroup category and setting.

For each chosen layer, every perceiver's persona is patched (one layer at a time, position group --positions) with
the unspecified "a person" (mode `person`) and, separately, in-group and out-group personas are swapped (mode
`swap`); the matrix of expected intensities is rebuilt and δ recomputed. A layer × position-group sweep follows: each
in-group prompt patched from an out-group persona, with the fraction of the in-group/out-group difference closed.

    python experiments/persona_patching.py --model smollm2-135m --out runs/patching        # a first look, minutes
    python experiments/persona_patching.py --run runs/llama8b --category religion --setting P0S0T0 --out runs/p

Defaults are a first look: religion (5 identities), P0S1T0 (the 0..10 scale: an 11-node answer tree; the 0..100
scale of S0 settings needs 101 nodes, about twice the work per prompt), 1 event, every 5th layer. With --model a small
score-mode run of that category, setting and events is made first into OUT/run (the study reads the model, corpus
and seed from a run, and records δ of its rows beside the patched δ); with --run they come from that run directory's
manifest. The study prints its plan, the forwards of each phase and an estimate after the first, then a progress bar,
and writes OUT/patch (tables, figures, report.md, manifest.json); the model runs its own code only with
--trust-remote-code. Bad input ends with one line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from behavioral.options import comma_values
from behavioral.output_folder import check_output_folder
from behavioral.run import RunConfig, run
from behavioral.studies import get_study, run_study
from behavioral.suites.intergroup import Options
from interp.patch_sweep import SWEEP_POSITION_GROUPS

COMMAND = "study persona_patching"
RUN_DIR, PATCH_DIR = "run", "patch"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="output folder: new, empty, or an earlier output")
    p.add_argument("--run", type=Path, help="a behavioral run directory: model, corpus, seed and dtype come from it")
    p.add_argument("--model", help="model (hub id, folder, .gguf or smollm2-135m); not with --run")
    p.add_argument("--category", default="religion", help="race, nationality or religion (default religion)")
    p.add_argument("--setting", default="P0S1T0", help="one of the seven settings (default P0S1T0)")
    p.add_argument("--events", help="event corpus (default: the embedded events); not with --run")
    p.add_argument("--limit-events", type=int, default=1, help="seeded sample of N events, stratified by emotion "
                                                                "(default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the event sample (with --run: the run's)")
    p.add_argument("--layers", default="all", help="layers to patch (the layer grammar; then --layer-step)")
    p.add_argument("--layer-step", type=int, default=5, help="keep every K-th of --layers (default 5)")
    p.add_argument("--positions", default="system", help="position group of the headline (default system)")
    p.add_argument("--modes", default="person,swap", help="person, swap or both (default both)")
    p.add_argument("--sweep-groups", default=",".join(SWEEP_POSITION_GROUPS), help="position groups of the sweep")
    p.add_argument("--sweep-events", type=int, default=1, help="events in the sweep (the first N; 0: no sweep)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default=None, help="auto, fp32, bf16, fp16 (default: the run's, else auto)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--trust-remote-code", action="store_true",
                   help="let the model folder run its own code (never taken from a run's manifest)")
    args = p.parse_args(argv)
    if args.run is not None and (args.model or args.events):
        p.error("--run takes the model and events from the run directory: drop --model/--events")
    if args.run is None and not args.model:
        p.error("give --run DIR, or --model (with --category, --setting, --limit-events)")
    return args


def resolve(args: argparse.Namespace) -> RunConfig:
    """The configuration of the run the study reads: the one given with --run, or the small score-mode run of the
    category, setting and events --model makes."""
    if args.run is not None:
        return RunConfig.from_run_dir(args.run, device=args.device, trust_remote_code=args.trust_remote_code)
    options = Options(categories=(args.category,), settings=(args.setting,), events=args.events,
                      limit_events=args.limit_events)
    return RunConfig(suite="intergroup", model=args.model, options=options, seed=args.seed, mode="score",
                     device=args.device, dtype=args.dtype or "auto", batch_size=args.batch_size,
                     trust_remote_code=args.trust_remote_code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the example; bad input is one line on stderr and exit status 2."""
    args = parse_args(argv)
    try:
        config = resolve(args)
        check_output_folder(args.out, COMMAND, keep=(RUN_DIR, PATCH_DIR))
        run_dir = args.run if args.run is not None else run(config, args.out / RUN_DIR)
        study = get_study("patch")
        options = study.Options(where=(f"category={args.category}", f"setting={args.setting}"),
                                limit_events=args.limit_events, layers=args.layers, layer_step=args.layer_step,
                                positions=args.positions, modes=tuple(comma_values(args.modes)),
                                sweep_groups=tuple(comma_values(args.sweep_groups)), sweep_events=args.sweep_events,
                                device=args.device, dtype=args.dtype, batch_size=args.batch_size,
                                trust_remote_code=args.trust_remote_code)
        report = run_study(study, [run_dir], options, args.out / PATCH_DIR)
    except (ValueError, OSError) as err:  # bad input: unknown names, missing files, unloadable models
        print(f"persona_patching: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
