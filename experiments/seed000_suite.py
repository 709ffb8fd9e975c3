"""Seed 000 end to end: the full grid (all categories, all seven settings) for one model, then Tables 2/3/6/7."""

from __future__ import annotations

import argparse

from behavioral.suites.intergroup.analysis import analyze
from behavioral.run import RunConfig, run


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
    config = RunConfig(model=args.model, events=args.events, limit_events=args.limit_events, mode=args.mode,
                       device=args.device, batch_size=args.batch_size)
    run(config, args.out)
    print(f"report: {analyze(args.out)}")


if __name__ == "__main__":
    main()
