"""Seed 000 end to end: the full grid (all categories, all seven settings) for one model, then Tables 2/3/6/7."""

from __future__ import annotations

import argparse

from behavioral.run import RunConfig, run
from behavioral.suites.intergroup import Options
from behavioral.suites.intergroup.analysis import analyze


def main() -> None:
    """Run (or resume) the paper's grid into --out and write the report beside it."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--events", help="crowd-enVENT release directory (default: the embedded events)")
    parser.add_argument("--limit-events", type=int)
    parser.add_argument("--mode", default="generate", choices=("generate", "score", "both"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    options = Options(events=args.events, limit_events=args.limit_events)
    config = RunConfig(suite="intergroup", model=args.model, options=options, mode=args.mode, device=args.device,
                       batch_size=args.batch_size)
    run(config, args.out)
    print(f"report: {analyze(args.out)}")


if __name__ == "__main__":
    main()
