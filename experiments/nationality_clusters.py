"""Nationality clusters and RSA with behaviour for one model: a thin example of the clusters and RSA studies
(`empathy-gap interp clusters|rsa`) on one intergroup category and setting.

From a run with persona capture (given with --run, or made here with --model into OUT/run), writes, for each span
(--span persona, experiencer or both; the experiencer as seen by "a person"):

- OUT/clusters_<span>/: the clusters study: t-SNE and UMAP projections at a few layers (--layers) and of the
  personas' rows of M (the paper's Figure 4), cluster statistics against the Inglehart-Welzel zones (race: groups)
  per layer with permutation p-values corrected across layers, and the same statistics of the rows of M;
- OUT/rsa_<span>/: the RSA study: RSA per layer between identity and behaviour distances (Mantel p), and the
  partial Mantel test with the identities' token counts held out.

With --model the suite run comes first (score mode, 1 event per cell by default), timed on one batch with its
estimate printed, then with a progress bar. Bad input prints one line and exits 2.

    python experiments/nationality_clusters.py --run runs/llama8b --out out/clusters
    python experiments/nationality_clusters.py --model smollm2-135m --setting P0S1T0 --limit-events 4 --out out/c
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from behavioral import models
from behavioral.options import comma_values
from behavioral.output_folder import check_output_folder
from behavioral.manifest import read_manifest
from behavioral.studies import get_study, run_study
from behavioral.suites.intergroup.groups import CATEGORIES, UNSPECIFIED
from behavioral.suites.intergroup.settings import SETTING_NAMES

COMMAND = "study nationality_clusters"
RUN_DIR = "run"  # the suite run --model makes inside --out, kept and resumed across reruns
SPANS = ("persona", "experiencer")
MODEL_EVENTS = 1  # events per cell of the --model run by default: 484 prompts for nationality


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="an existing run directory with persona capture")
    source.add_argument("--model", help="run this model first (score mode, persona capture) into OUT/run")
    p.add_argument("--out", type=Path, required=True, help="output folder: new, empty, or an earlier output")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="let the model folder run its own code (never taken from a run's manifest)")
    p.add_argument("--category", default="nationality", choices=tuple(CATEGORIES))
    p.add_argument("--setting", choices=SETTING_NAMES,
                   help="prompt setting (default: P0S0T0 with --model; the run's first with --run)")
    p.add_argument("--limit-events", type=int, help=f"with --model: events per setting (default {MODEL_EVENTS})")
    p.add_argument("--events", help="with --model: crowd-enVENT release (default: the embedded events)")
    p.add_argument("--mode", default="score", choices=("generate", "score", "both"), help="with --model")
    p.add_argument("--device", default="auto", help="with --model")
    p.add_argument("--dtype", default="auto", help="with --model")
    p.add_argument("--batch-size", type=int, default=16, help="with --model")
    p.add_argument("--capture-layers", default="all", help="with --model: layers to capture")
    p.add_argument("--span", default="persona", choices=(*SPANS, "both"), help="identity vectors to analyse")
    p.add_argument("--reduction", default="mean", choices=("mean", "last"))
    p.add_argument("--layers", default="first,middle,last", help="layers to project")
    p.add_argument("--methods", default="tsne,umap", help="projection methods: tsne, umap or both")
    p.add_argument("--metric", default="cosine", choices=("cosine", "euclidean"))
    p.add_argument("--behavior-metric", default="euclidean", choices=("cosine", "euclidean", "correlation"))
    p.add_argument("--k", type=int, default=3, help="neighbours of the leave-one-out kNN accuracy")
    p.add_argument("--n-permutations", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0, help="seed of projections and permutations (and of a run)")
    p.add_argument("--allow-partial", action="store_true", help="analyse an unfinished run")
    args = p.parse_args(argv)
    if args.run is not None and (args.limit_events is not None or args.events is not None):
        p.error("--limit-events and --events apply to --model only")
    args.spans = list(SPANS) if args.span == "both" else [args.span]
    return args


def make_run(args: argparse.Namespace) -> Path:
    """Run (or resume) the model on one category and setting with the capture the studies need, into OUT/run,
    after timing one batch and printing the estimate."""
    from behavioral.estimate import estimate_run
    from behavioral.run import RunConfig, run
    from behavioral.suites.intergroup import Options

    out = args.out / RUN_DIR
    options = Options(categories=(args.category,), settings=(args.setting or SETTING_NAMES[0],), events=args.events,
                      limit_events=MODEL_EVENTS if args.limit_events is None else args.limit_events)
    config = RunConfig(suite="intergroup", model=args.model, options=options, seed=args.seed, mode=args.mode,
                       device=args.device, dtype=args.dtype, batch_size=args.batch_size, capture=tuple(args.spans),
                       layers=args.capture_layers, trust_remote_code=args.trust_remote_code)
    loaded = models.load(args.model, args.device, args.dtype, args.trust_remote_code)
    print(f"suite run: {estimate_run(config, loaded, out).describe()} (capture passes extra)", flush=True)
    return run(config, out, loaded=loaded)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    folders = [f"{study}_{span}" for span in args.spans for study in ("clusters", "rsa")]
    try:
        check_output_folder(args.out, COMMAND, keep=(RUN_DIR, *folders))
        if args.run is not None:
            suite = read_manifest(args.run).suite
            if suite != "intergroup":
                raise ValueError(f"--run {args.run}: a run of suite {suite!r}; the cluster study needs an intergroup "
                                 "run made with --capture persona (or experiencer)")
        run_dir = make_run(args) if args.model is not None else args.run
        settings = (read_manifest(run_dir).config.get("options") or {}).get("settings", [])
        setting = args.setting or next((s for s in SETTING_NAMES if s in settings), SETTING_NAMES[0])
        for span in args.spans:
            where = (f"category={args.category}", f"setting={setting}",
                     *((f"perceiver={UNSPECIFIED}",) if span == "experiencer" else ()))
            shared = dict(kind=span, where=where, reduction=args.reduction, metric=args.metric,
                          permutations=args.n_permutations, seed=args.seed)
            clusters, rsa = get_study("clusters"), get_study("rsa")
            run_study(clusters, [run_dir], clusters.Options(**shared, project=args.layers, k=args.k,
                                                            methods=tuple(comma_values(args.methods))),
                      args.out / f"clusters_{span}", allow_partial=args.allow_partial)
            run_study(rsa, [run_dir], rsa.Options(**shared, behavior_metric=args.behavior_metric,
                                                  trust_remote_code=args.trust_remote_code),
                      args.out / f"rsa_{span}", allow_partial=args.allow_partial)
    except (ValueError, OSError) as exc:  # bad input: one line, exit 2
        print(f"nationality_clusters: error: {exc}", file=sys.stderr)
        return 2
    for folder in folders:
        print(f"wrote {args.out / folder / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
