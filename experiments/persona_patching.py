"""Persona patching: which layers carry the empathy gap δ? The patch study (`empathy-gap interp patch`) as a script,
its flags the study's own: with --model it first makes a small score-mode intergroup run of the slice --where names
(default category=religion, setting=P0S1T0) over --limit-events events into OUT/run and patches the same loaded
model; with --run it patches the model that run recorded.

    python experiments/persona_patching.py --model smollm2-135m --out runs/patching        # a first look, minutes
    python experiments/persona_patching.py --run runs/llama8b --where category=religion,setting=P0S0T0 --out runs/p

Writes OUT/patch (tables, figures, report.md, manifest.json) and prints δ by layer; bad input ends with one line and
exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from behavioral.inference import models
from behavioral.core.options import add_flags, from_flags
from behavioral.analysis.output_folder import check_output_folder
from behavioral.runner.run import RunConfig, run
from behavioral.analysis.studies import get_study
from behavioral.analysis.study import run_study
from interp.identities import parse_where
from behavioral.suites.intergroup import Options

PATCH = get_study("patch")
SLICE = {"category": "religion", "setting": "P0S1T0"}  # the --model run's, where --where leaves them out
RUN_DIR, PATCH_DIR = "run", "patch"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The script's flags: where the run comes from, --out, and the patch study's options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="an intergroup run directory: model, corpus and seed come from it")
    source.add_argument("--model", help="make a score-mode run of this model first, into OUT/run")
    p.add_argument("--out", required=True, type=Path, help="output folder: new, empty, or an earlier output")
    add_flags(p.add_argument_group("patch options"), PATCH.Options)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the example; bad input is one line on stderr and exit status 2."""
    args = parse_args(argv)
    try:
        options = from_flags(PATCH.Options, args)
        check_output_folder(args.out, "study persona_patching", keep=(RUN_DIR, PATCH_DIR))
        run_dir, loaded = args.run, None
        if args.model:
            where = SLICE | parse_where(options.where)
            loaded = models.load(args.model, options.device, options.dtype or "auto", options.trust_remote_code)
            suite = Options(categories=(where["category"],), settings=(where["setting"],),
                            limit_events=options.limit_events)
            config = RunConfig("intergroup", args.model, suite, mode="score", batch_size=options.batch_size,
                               trust_remote_code=options.trust_remote_code)
            run_dir = run(config, args.out / RUN_DIR, loaded=loaded)
        result = run_study(PATCH, [run_dir], options, args.out / PATCH_DIR, model=loaded)
    except (ValueError, OSError) as err:  # bad input: unknown names, missing files, unloadable models
        print(f"persona_patching: error: {err}", file=sys.stderr)
        return 2
    print(result.tables["gap_by_layer"].to_string(index=False))
    print(f"wrote {result.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
