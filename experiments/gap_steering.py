"""Steering and probing the empathy gap: in-group directions from final-token captures, a steering sweep of δ
(with the refusal and numeric rates beside it), and per-layer probes with a shuffled-label control.

    python experiments/gap_steering.py --run RUN_DIR --out OUT            # a run made with --capture final
    python experiments/gap_steering.py --model smollm2-135m --category religion --setting P0S1T0 \\
        --limit-events 3 --out OUT                                         # makes the capture run in OUT/capture

With --probes-only (and --run) only the directions and the probes are computed, from the capture alone; no model is
loaded. With --model the defaults are a first look in minutes (1 event, 3 layers × coefficients ±4, and 0 once); with
--run, --limit-events N steers a seeded N-event sample while the directions come from the run's whole capture. Each
suite run first times one batch and prints its estimate, then shows a progress bar. Each steering condition runs into
its own resumable run directory OUT/steering/<condition>. --out is a new or empty folder or an earlier output of this
study (never a run directory or another command's output). Writes to OUT, all at the end: directions.csv /
directions.npy, steering.csv (δ and rates per condition), steering_rows.parquet (every prompt's result per
condition), zero_coefficient_check.csv, probes.csv, figures/*.png|pdf, and manifest.json, which lists every file;
prints every path. The model runs its own code only with --trust-remote-code. Exits 1 if coefficient 0 does not
reproduce the unsteered run exactly, 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from activations import store as activation_store
from activations.capture import hook_layer, select_hooks
from behavioral import models
from behavioral.output_folder import OutputFolder, output_folder
from behavioral.run import RunConfig, run
from behavioral.store import read_manifest
from behavioral.suites.intergroup import Options
from behavioral.suites.intergroup.rewrite import CACHE as REWRITES
from interp import probes, steering
from interp.progress import estimate_run

COMMAND = "study gap_steering"
CAPTURE_DIR = "capture"
STEERING_DIR = "steering"


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="an existing run directory made with --capture final")
    source.add_argument("--model", help="make a capture run of this model first (into OUT/capture)")
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder: new, empty, or an earlier output of this study (whose files are replaced; "
                             "its capture/ and steering/ run directories are kept and resumed)")
    parser.add_argument("--category", help="required with --model; with --run, default: the run's first")
    parser.add_argument("--setting", help="required with --model; with --run, default: the run's first")
    parser.add_argument("--limit-events", type=int,
                        help="events of the steered runs, a seeded sample stratified by emotion (default: with --model "
                             "1; with --run the run's own); with --run the directions still come from its whole "
                             "capture")
    parser.add_argument("--events", help="with --model: crowd-enVENT release (default: the embedded events)")
    parser.add_argument("--mode", choices=("score", "generate", "both"),
                        help="mode of the steered runs (default: the run's mode; score with --model)")
    parser.add_argument("--layers", default="auto",
                        help="decoder layers to steer, comma-separated, or auto (at 1/4, 1/2 and 3/4 depth)")
    parser.add_argument("--coefs", type=_floats, default=[-4.0, 0.0, 4.0],
                        help="coefficients; 1 adds one whole in-group − out-group difference (with --unit: one unit "
                             "of activation norm); 0 is always added, as the exactness check")
    parser.add_argument("--unit", action="store_true", help="unit-normalise the directions")
    parser.add_argument("--project", action="store_true", help="also project each layer's direction out")
    parser.add_argument("--random-control", action="store_true",
                        help="with --project: also project out a random direction of the same norm at each layer "
                             "(seeded by the layer), the control")
    parser.add_argument("--per-cell-samples", type=int, default=4, help="with --model: final-token samples per cell")
    parser.add_argument("--n-permutations", type=int, default=10_000)
    parser.add_argument("--cv", type=int, default=5)
    parser.add_argument("--n-shuffles", type=int, default=3, help="shuffled-label refits per probe")
    parser.add_argument("--probe-splits", default="sample,cell", help=f"comma list of {', '.join(probes.SPLITS)}")
    parser.add_argument("--probe-layers", default="all",
                        help="layers to probe: all, or a comma list of block numbers (negative: from the last), first, "
                             "middle, last and embed (the embeddings)")
    parser.add_argument("--probes-only", action="store_true",
                        help="with --run: directions and probes from the capture alone (no model, no steered runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
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
    if args.random_control and not args.project:
        parser.error("--random-control goes with --project")
    return args


def capture_run(args, loaded: tuple) -> Path:
    """OUT/capture: the suite slice with final-token capture (all layers), made or resumed, its estimate first."""
    options = Options(categories=(args.category,), settings=(args.setting,), events=args.events,
                      limit_events=1 if args.limit_events is None else args.limit_events)
    config = RunConfig(suite="intergroup", model=args.model, options=options, seed=args.seed,
                       mode=args.mode or "score", device=args.device, dtype=args.dtype, batch_size=args.batch_size,
                       capture=("final",), layers="all", per_cell_samples=args.per_cell_samples,
                       trust_remote_code=args.trust_remote_code)
    out = args.out / CAPTURE_DIR
    print(f"capture run: {estimate_run(config, loaded, out).describe()}", flush=True)
    return run(config, out, loaded=loaded)


def base_config(run_dir: Path, args) -> RunConfig:
    """The steered runs' config: the capture run's slice (one category and setting), mode, dtype and corpus, no
    capture."""
    stored = RunConfig.from_run_dir(run_dir, trust_remote_code=args.trust_remote_code)
    if stored.suite != "intergroup":
        raise ValueError(f"--run {run_dir}: a run of suite {stored.suite!r}; steering needs an intergroup run made "
                         "with --capture final")
    if "final" not in stored.capture:
        raise ValueError(f"{run_dir}: made without final-token capture; rerun it with --capture final")
    options = stored.options
    category = args.category or options.categories[0]
    setting = args.setting or options.settings[0]
    for name, value, known in (("category", category, options.categories), ("setting", setting, options.settings)):
        if value not in known:
            raise ValueError(f"--{name} {value!r} is not in {run_dir} (it has {', '.join(known)})")
    limit = options.limit_events if args.limit_events is None else args.limit_events
    options = dataclasses.replace(options, categories=(category,), settings=(setting,), limit_events=limit)
    return dataclasses.replace(stored, options=options, mode=args.mode or stored.mode, device=args.device,
                               batch_size=args.batch_size, capture=(), per_cell_samples=0,
                               dtype=stored.dtype if args.dtype == "auto" else args.dtype)


def pick_layers(spec: str, captured: list[int]) -> list[int]:
    if spec == "auto":
        n = max(captured) + 1
        return sorted({min(captured, key=lambda l: abs(l - round(n * f))) for f in (0.25, 0.5, 0.75)})
    layers = [int(x) for x in spec.split(",") if x.strip()]
    missing = [l for l in layers if l not in captured]
    if missing:
        raise ValueError(f"--layers {missing} were not captured (captured: {captured[0]}..{captured[-1]})")
    return layers


def direction_table(store, category: str, setting: str, raw: np.ndarray) -> pd.DataFrame:
    """Per hook: the direction's norm, the norm of the mean final-token state, their ratio, and the cosine with the
    previous layer's direction."""
    means, _ = store.final(category, setting)
    resid = np.linalg.norm(means.astype(np.float64).mean(axis=1), axis=1)
    norm = np.linalg.norm(raw.astype(np.float64), axis=1)
    unit = raw / np.where(norm > 0, norm, 1)[:, None]
    cos_prev = np.r_[np.nan, (unit[1:] * unit[:-1]).sum(1)]
    return pd.DataFrame({"hook": store.hooks, "layer": [hook_layer(h) for h in store.hooks], "direction_norm": norm, "mean_state_norm": resid,
                         "relative_norm": norm / np.where(resid > 0, resid, np.nan), "cos_previous_layer": cos_prev})


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        with output_folder(args.out, COMMAND, keep=(CAPTURE_DIR, STEERING_DIR)) as out:
            summary, probe_table = study(args, out)
    except (ValueError, OSError) as err:
        print(f"gap_steering: error: {err}", file=sys.stderr)
        return 2
    for path in out.written():
        print(f"wrote {path}")
    _print_summary(summary, probe_table)
    if out.record["zero_coefficient_reproduces_unsteered"] is False:
        print("gap_steering: coefficient 0 did NOT reproduce the unsteered run exactly; see "
              f"{out.final / 'zero_coefficient_check.csv'}", file=sys.stderr)
        return 1
    return 0


def study(args: argparse.Namespace, out: OutputFolder) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """Directions, the steering sweep (unless --probes-only) and the probes, written into `out`; returns the sweep's
    summary and the probe table to print."""
    started = time.perf_counter()
    if args.model:
        loaded = models.load(args.model, args.device, args.dtype, args.trust_remote_code)
        run_dir = capture_run(args, loaded)
        config = base_config(run_dir, args)
    else:
        run_dir = args.run
        config = base_config(run_dir, args)
        loaded = None if args.probes_only else models.load(config.model, args.device, config.dtype,
                                                            config.trust_remote_code)
    info = read_manifest(run_dir)["config"] if loaded is None else loaded[2]
    category, setting = config.options.categories[0], config.options.settings[0]
    store = activation_store.load(run_dir)
    if store.meta.get("per_cell_samples", 0) < 2:
        raise ValueError(f"{run_dir}: the probes need final-token samples; make the run with "
                         "--per-cell-samples 4 or more")
    probe_hooks = select_hooks(args.probe_layers, store.hooks, "--probe-layers")
    layers = pick_layers(args.layers, steering.captured_layers(store.hooks))
    coefs = sorted(set(args.coefs) | {0.0})

    # directions
    raw = steering.ingroup_direction(store, category, setting)
    used = steering.ingroup_direction(store, category, setting, unit=True) if args.unit else raw
    np.save(out.path / "directions.npy", used)
    direction_table(store, category, setting, raw).to_csv(out.path / "directions.csv", index=False)

    summary = check = None
    if loaded is not None:
        print(f"steering {config.model} ({info['dtype']}, {info['device']}) at layers {layers}, coefficients "
              f"{coefs}" + (", and projection" if args.project else "")
              + (" (and of a random direction)" if args.random_control else ""), flush=True)
        rows = steering.run_conditions(config, out.final / STEERING_DIR, loaded,
                                       steering.layer_directions(used, store.hooks, layers),
                                       steering.sweep_conditions(layers, coefs, args.project, args.random_control),
                                       rewrites=run_dir / REWRITES, progress=True)
        summary = steering.summarize(rows, args.n_permutations, args.seed)
        check = steering.zero_coefficient_check(rows)
        summary.to_csv(out.path / "steering.csv", index=False)
        check.to_csv(out.path / "zero_coefficient_check.csv", index=False)
        rows.to_parquet(out.path / "steering_rows.parquet")
        steering.plot_sweep(summary, out.path / "figures")
        del loaded

    # probes
    frames = []
    for target in probes.TARGETS:
        for split in [s.strip() for s in args.probe_splits.split(",") if s.strip()]:
            print(f"probing {target} (split by {split})", flush=True)
            frames.append(probes.layer_probes(store, category, setting, target, args.cv, args.seed, split,
                                              args.n_shuffles, hooks=probe_hooks))
    probe_table = pd.concat(frames, ignore_index=True)
    probe_table.to_csv(out.path / "probes.csv", index=False)
    probes.plot_probes(probe_table, out.path / "figures")

    out.record.update({
        "arguments": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "run_dir": str(run_dir), "model": info, "category": category, "setting": setting,
        "steer_config": None if summary is None else dataclasses.asdict(config),
        "layers": None if summary is None else layers, "coefficients": None if summary is None else coefs,
        "unit_directions": args.unit, "probed_hooks": probe_hooks,
        "zero_coefficient_reproduces_unsteered": None if check is None else
        bool(check["identical"].all()) and len(check) == 1,
        "seconds": round(time.perf_counter() - started, 1),
    })
    return summary, probe_table


def _print_summary(summary: pd.DataFrame | None, probe_table: pd.DataFrame) -> None:
    columns = ["condition", "measure", "delta", "p_value", "p_exact", "delta_change", "refusal_rate",
               "non_numeric_mass", "non_numeric_mass_change", "mean_rating"]
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.float_format", "{:.3f}".format):
        if summary is not None:
            print(summary[columns].to_string(index=False))
        keep = ["target", "split", "layer", "balanced_accuracy_mean", "control_balanced_accuracy_mean", "chance"]
        print(probe_table[keep].to_string(index=False))


if __name__ == "__main__":
    sys.exit(main())
