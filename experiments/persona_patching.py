"""Persona patching: which layers carry the empathy gap δ?

For each chosen layer, every perceiver's persona is patched (one layer at a time, position group --positions) with
the unspecified "a person" (mode `person`) and, separately, in-group and out-group personas are swapped (mode
`swap`); the matrix of expected intensities is rebuilt and δ recomputed (interp.patching.patched_gap). A small
layer × position-group sweep follows: each in-group prompt (X perceives X) patched from an out-group persona, with
the fraction of the in-group/out-group difference closed.

    python experiments/persona_patching.py --model smollm2-135m --out runs/patching        # a first look, minutes
    python experiments/persona_patching.py --model smollm2-135m --category religion --setting P0S1T0 \
        --limit-events 3 --layer-step 5 --out runs/patching
    python experiments/persona_patching.py --run runs/llama8b --category religion --setting P0S0T0 --out runs/p

Defaults are a first look: religion (5 identities), P0S1T0 (the 0..10 scale: an 11-node answer tree; the 0..100
scale of S0 settings needs 101 nodes, about twice the work per prompt), 1 event, every 5th layer. Before each phase
the script prints the prompts and forwards it plans and, after the first scoring forward, an estimate of the time;
a progress bar shows the rest. With --run, the model, corpus, seed and dtype come from that run directory's manifest,
and δ of its score-mode results for the category and setting (if it has them) is recorded beside ours; the model runs
its own code only with --trust-remote-code. --out is a new or empty folder or an earlier output of this study (never
a run directory or another command's output); the study writes OUT/tables (Parquet + CSV), OUT/figures (PNG + PDF),
OUT/rewrites.jsonl for T2 settings and OUT/manifest.json, which lists every file, all at the end (a failure leaves
the earlier output as it was); prints every path; exits 2 on bad input, 1 on any other failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
import time
import traceback
from pathlib import Path

import pandas as pd

from activations.capture import n_layers_of, parse_layers
from behavioral import chat, models
from behavioral.engine import Engine
from behavioral.output_folder import OutputFolder, output_folder
from behavioral.run import RunConfig
from behavioral.suites import get_suite
from behavioral.suites.intergroup import Options, results
from behavioral.suites.intergroup.groups import UNSPECIFIED, get_category
from behavioral.suites.intergroup.rewrite import CACHE as REWRITES
from behavioral.suites.intergroup.settings import get_setting
from interp import patching as P

COMMAND = "study persona_patching"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path,
                   help="output folder: new, empty, or an earlier output of this study (whose files are replaced)")
    p.add_argument("--run", type=Path, help="a behavioral run directory: model, corpus, seed and dtype come from it")
    p.add_argument("--model", help="model (hub id, folder, .gguf or smollm2-135m); not with --run")
    p.add_argument("--category", default="religion", help="race, nationality or religion (default religion)")
    p.add_argument("--setting", default="P0S1T0", help="one of the seven settings (default P0S1T0)")
    p.add_argument("--events", help="event corpus (default: the embedded events); not with --run")
    p.add_argument("--limit-events", type=int, default=1, help="seeded sample of N events, stratified by emotion "
                                                                "(default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the event sample (with --run: the run's)")
    p.add_argument("--layers", default="all", help="all or a comma list such as 0,5,10 (then --layer-step)")
    p.add_argument("--layer-step", type=int, default=5, help="keep every K-th of --layers (default 5)")
    p.add_argument("--positions", default="system", help="position group of the headline (default system)")
    p.add_argument("--modes", default="person,swap", help="person, swap or both (default both)")
    p.add_argument("--sweep-groups", default=",".join(P.SWEEP_POSITION_GROUPS),
                   help="position groups of the sweep; empty to skip the sweep")
    p.add_argument("--sweep-events", type=int, default=1, help="events in the sweep (the first N; default 1)")
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


def resolve(args) -> RunConfig:
    """The configuration to load the model and the events by: the category and setting asked for, --limit-events
    events of the corpus (with --run: the run's corpus, seed and dtype)."""
    for name in ("batch_size", "layer_step", "sweep_events", "limit_events"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    slice_ = {"categories": (args.category,), "settings": (args.setting,), "limit_events": args.limit_events}
    if args.run is not None:
        config = RunConfig.from_run_dir(args.run, device=args.device, trust_remote_code=args.trust_remote_code)
        if config.suite != "intergroup":
            raise ValueError(f"--run {args.run}: a run of suite {config.suite!r}; persona patching needs an "
                             "intergroup run")
        config = dataclasses.replace(config, options=dataclasses.replace(config.options, **slice_),
                                     dtype=args.dtype or config.dtype)
    else:
        config = RunConfig(suite="intergroup", model=args.model, options=Options(events=args.events, **slice_),
                           seed=args.seed, device=args.device, dtype=args.dtype or "auto",
                           trust_remote_code=args.trust_remote_code)
    get_category(args.category)
    get_setting(args.setting)
    return config


def run_delta(run_dir: Path, category: str, setting: str) -> float | None:
    """δ of a run directory's score-mode expected intensities for one category and setting (None if absent)."""
    from behavioral.suites.intergroup.stats import empathy_gap, zscore

    rows = results(run_dir)
    rows = rows[(rows["category"] == category) & (rows["setting"] == setting) & rows["expected_intensity"].notna()]
    rows = rows[(rows["perceiver"] != UNSPECIFIED) & (rows["experiencer"] != UNSPECIFIED)]
    if rows.empty:
        return None
    cat = get_category(category)
    names = list(cat.identities)
    M0 = rows.pivot_table(index="perceiver", columns="experiencer", values="expected_intensity", aggfunc="mean")
    M0 = M0.reindex(index=names, columns=names).to_numpy(dtype=float)
    try:
        return empathy_gap(zscore(M0), cat.in_group())
    except ValueError:
        return None


def write_frame(frame: pd.DataFrame, out: Path, stem: str, csv: bool = True) -> None:
    """`stem`.parquet (and `stem`.csv) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(out / f"{stem}.parquet", index=False)
    if csv:
        frame.to_csv(out / f"{stem}.csv", index=False)


def main(argv=None) -> int:
    args = parse_args(argv)
    config = resolve(args)
    with output_folder(args.out, COMMAND) as out:
        result = study(args, config, out)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(result.to_string(index=False))
    print(json.dumps({k: out.record[k] for k in ("forwards", "timing")}))
    for path in out.written():
        print(f"wrote {path}")
    return 0


def study(args: argparse.Namespace, config: RunConfig, out: OutputFolder) -> pd.DataFrame:
    """Patch, sweep and write every table and figure into `out`; returns the headline table to print."""
    started = time.perf_counter()
    category, setting = get_category(args.category), args.setting
    suite = get_suite(config.suite)
    data = suite.dataset(config)
    model, tokenizer, model_info = models.load(config.model, config.device, config.dtype, config.trust_remote_code)
    if args.run is not None and (args.run / REWRITES).is_file():  # T2 rewrites: the run's, extended here if need be
        shutil.copyfile(args.run / REWRITES, out.path / REWRITES)
    events = list(suite.prepare(data, config, model, tokenizer, out.path).events)
    layers = parse_layers(args.layers, n_layers_of(model))[::args.layer_step]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    groups = [g.strip() for g in args.sweep_groups.split(",") if g.strip()]
    for label in [args.positions, *groups]:
        P.PatchSpec.parse(label)  # fail on a bad group before any work
    engine = Engine(model, tokenizer, args.batch_size)
    chat_format = chat.detect_format(tokenizer)
    n = len(category.identities)
    sweep_events = events[:args.sweep_events]
    print(f"plan: headline {len(modes)} modes × {n}² cells × {len(events)} events × {len(layers)} layers "
          f"= {len(modes) * n * n * len(events) * len(layers)} patched prompts"
          + (f"; sweep {n} prompts × {len(sweep_events)} events × {len(layers)} layers × {len(groups)} groups "
             f"= {n * len(sweep_events) * len(layers) * len(groups)}" if groups else "")
          + f"; answer tree of {len(P.get_trie(tokenizer, setting))} nodes", flush=True)
    forwards = {"n": 0}
    forward = model.forward

    def counted(*a, **k):
        forwards["n"] += 1
        return forward(*a, **k)

    model.forward = counted
    tables, figures = out.path / "tables", out.path / "figures"
    timing: dict[str, float] = {}
    counts: dict[str, int] = {}
    def title(n: int) -> str:
        return f"{model_info['model']} · {category.title} · {setting} · {n} event" + ("s" if n != 1 else "")

    t0, f0 = time.perf_counter(), forwards["n"]
    frame = P.patched_gap_prompts(engine, category, setting, events, layers, args.positions, modes, chat_format,
                                  progress="headline")
    table = P.gap_table(frame, category)
    timing["headline_s"], counts["headline_forwards"] = time.perf_counter() - t0, forwards["n"] - f0
    counts["headline_prompts"] = len(frame)
    write_frame(frame, tables, "gap_prompts", csv=False)
    write_frame(table, tables, "delta_by_layer")
    P.plot_gap_by_layer(table, figures, "delta_by_layer", title=f"δ by patched layer ({args.positions})"
                                   f"\n{title(len(events))}")

    if groups:
        t0, f0 = time.perf_counter(), forwards["n"]
        targets, sources, meta = [], [], []
        for x in category.identities:
            a = P.swap_source(category, x, x)
            for e in sweep_events:
                targets.append(P.build(tokenizer, setting, x, x, e, chat_format))
                sources.append(P.build(tokenizer, setting, a, x, e, chat_format))
                meta.append({"perceiver": x, "experiencer": x, "event_id": e.event_id, "source_perceiver": a})
        sweep = P.sweep(engine, targets, sources, layers, P.get_trie(tokenizer, setting), groups, meta, chat_format,
                        progress="sweep")
        summary = P.summarize(sweep)
        timing["sweep_s"], counts["sweep_forwards"] = time.perf_counter() - t0, forwards["n"] - f0
        counts["sweep_prompts"] = len(sweep)
        write_frame(sweep, tables, "sweep", csv=False)
        write_frame(summary, tables, "sweep_summary")
        sub = "in-group prompt ← out-group persona"
        P.plot_heatmap(summary, figures, "sweep_frac_closed", "frac_closed",
                       f"fraction of in/out-group difference closed\n{sub}\n{title(len(sweep_events))}")
        P.plot_heatmap(summary, figures, "sweep_delta_expected", "delta_expected",
                       f"Δ expected intensity\n{sub}\n{title(len(sweep_events))}")

    model.forward = forward
    unpatched = float(table["delta_unpatched"].iloc[0]) if len(table) else math.nan
    result = {"delta_unpatched": unpatched,
              "p_unpatched": float(table["p_unpatched"].iloc[0]) if len(table) else math.nan}
    if args.run is not None:
        result["delta_run"] = run_delta(args.run, category.name, setting)
    for mode, part in table.groupby("mode", sort=False):
        best = part.loc[part["delta_change"].abs().idxmax()]
        result[f"{mode}_largest_change"] = {"layer": int(best["layer"]), "delta_patched": float(best["delta_patched"]),
                                            "delta_change": float(best["delta_change"])}
    timing["total_s"] = time.perf_counter() - started
    arguments = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    out.record.update({
        "arguments": arguments, "model": model_info,
        "resolved": {"model": config.model, "category": category.name, "setting": setting, "layers": layers,
                     "modes": modes, "positions": args.positions, "sweep_groups": groups,
                     "events": [e.event_id for e in events], "chat_format": chat_format,
                     "batch_size": args.batch_size,
                     "run_manifest": str(args.run / "manifest.json") if args.run else None},
        "forwards": counts, "timing": {k: round(v, 1) for k, v in timing.items()}, "result": result,
    })
    return table[["mode", "layer", "delta_unpatched", "delta_patched", "delta_change", "p_unpatched", "p_patched",
                  "gap_raw_patched", "mean_delta_expected"]]


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, OSError) as err:  # bad input: unknown names, missing files, unloadable models
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except Exception:  # noqa: BLE001 - any other failure: traceback, non-zero exit
        traceback.print_exc()
        sys.exit(1)
