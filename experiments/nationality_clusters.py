"""Nationality clusters and RSA with behaviour for one model: the clusters and RSA studies (`empathy-gap interp
clusters|rsa`) on one run, their flags the studies' own (a flag both declare, such as --where or --permutations, goes
to both).

From a run with persona capture (given with --run, or made here with --model into OUT/run: score mode, the slice
--where names, default category=nationality, setting=P0S1T0, --limit-events events, capture of --kind), writes

- OUT/clusters: t-SNE (and UMAP) projections of the identity vectors at a few layers (--project) and of the
  identities' behaviour rows, cluster statistics against the Inglehart-Welzel zones (race: groups) per layer with
  permutation p-values corrected across layers;
- OUT/rsa: RSA per layer between identity and behaviour distances (Mantel p), and the partial Mantel test with the
  identities' token counts held out.

Figures come as PNG and PDF beside each other, at most two journal columns (7.2 in) wide, every title carrying its n
(identities, events), every point of a projection named with no two names overlapping (behavioral.analysis.figure_style,
behavioral.analysis.figure_files.label_points).

The experiencer as "a person" sees it: --kind experiencer --where perceiver="a person". Bad input prints one line
and exits 2.

    python experiments/nationality_clusters.py --run runs/llama8b --where category=nationality --out out/clusters
    python experiments/nationality_clusters.py --model smollm2-135m --limit-events 4 --out out/c
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from behavioral.inference import models
from behavioral.runner.estimate import estimate_run
from behavioral.rundir.manifest import read_manifest
from behavioral.core.options import add_flags, from_flags
from behavioral.analysis.output_folder import check_output_folder
from behavioral.runner.run import RunConfig, run
from behavioral.analysis.studies import get_study
from behavioral.analysis.study import run_study
from interp.identities import parse_where
from behavioral.suites.intergroup import Options

CLUSTERS, RSA = get_study("clusters"), get_study("rsa")
SLICE = {"category": "nationality", "setting": "P0S1T0"}  # the --model run's, where --where leaves them out
RUN_DIR, STUDY_DIRS = "run", ("clusters", "rsa")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The script's flags: where the run comes from, --out, --limit-events, and the two studies' options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="an existing intergroup run directory with persona capture")
    source.add_argument("--model", help="run this model first (score mode, capture of --kind) into OUT/run")
    p.add_argument("--out", type=Path, required=True, help="output folder: new, empty, or an earlier output")
    p.add_argument("--limit-events", type=int, default=1, help="with --model: events of the run (default 1)")
    p.add_argument("--allow-partial", action="store_true", help="analyse an unfinished run")
    add_flags(p.add_argument_group("clusters options (and RSA's where both have them)"), CLUSTERS.Options)
    shared = [f.name for f in dataclasses.fields(CLUSTERS.Options)]
    add_flags(p.add_argument_group("RSA options"), RSA.Options, skip=shared)
    return p.parse_args(argv)


def make_run(model: str, where: dict, kind: str, limit_events: int, trust_remote_code: bool, out: Path) -> Path:
    """Run (or resume) `model` on the slice with the capture the studies need, into `out`, its estimate first."""
    loaded = models.load(model, trust_remote_code=trust_remote_code)
    suite = Options(categories=(where["category"],), settings=(where["setting"],), limit_events=limit_events)
    config = RunConfig("intergroup", model, suite, mode="score", capture=(kind,), trust_remote_code=trust_remote_code)
    print(f"suite run: {estimate_run(config, loaded, out).describe()} (capture passes extra)", flush=True)
    return run(config, out, loaded=loaded)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the example; bad input is one line on stderr and exit status 2."""
    args = parse_args(argv)
    try:
        clusters, rsa = from_flags(CLUSTERS.Options, args), from_flags(RSA.Options, args)
        check_output_folder(args.out, "study nationality_clusters", keep=(RUN_DIR, *STUDY_DIRS))
        run_dir = args.run
        if args.model:
            run_dir = make_run(args.model, SLICE | parse_where(clusters.where), clusters.kind or "persona",
                               args.limit_events, rsa.trust_remote_code, args.out / RUN_DIR)
        elif (suite := read_manifest(run_dir).suite) != "intergroup":
            raise ValueError(f"--run {run_dir}: a run of suite {suite!r}; the cluster study needs an intergroup "
                             "run made with --capture persona (or experiencer)")
        results = [run_study(study, [run_dir], options, args.out / name, allow_partial=args.allow_partial)
                   for study, options, name in zip((CLUSTERS, RSA), (clusters, rsa), STUDY_DIRS)]
    except (ValueError, OSError) as exc:  # bad input: one line, exit 2
        print(f"nationality_clusters: error: {exc}", file=sys.stderr)
        return 2
    for result in results:
        print(f"wrote {result.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
