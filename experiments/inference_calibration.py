"""Calibration of seed 000's inference over events on synthetic runs: the size of the event-level test of δ > 0 for
random answerers (and, for comparison, of a sign-flip test on raw in-group minus out-group contrasts, which the
toolkit does not use), its power on planted gaps, and the coverage of the event-bootstrap intervals of the gap in
rating points and of δ. Prints a table and writes a JSON file.

A synthetic run is I[p, x, e] for 5 identities (religion's one-to-one grid without "a person") and E events:
- null answerers draw every cell independently: "normal" N(70, 10²), "uniform" integers 0..100, "skewed" 85 or, with
  probability 0.05, 50 (the development model answers 80-85 and now and then far lower);
- planted runs add `gap` rating points to the in-group cells of N(70, 10²) answers, so the true gap is `gap` points
  and the true δ (the z-scored gap of the infinite-event matrix) is gap / σ(gap · same) = 2.5 for any gap > 0.

    python experiments/inference_calibration.py --draws 1000 --out calibration.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from behavioral.suites.intergroup import stats

SAME = np.eye(5, dtype=bool)
TRUE_DELTA = float(1 / SAME.std())  # δ of gap · SAME, z-scored, for any gap > 0
NULLS = {
    "normal": lambda rng, e: rng.normal(70, 10, (5, 5, e)),
    "uniform": lambda rng, e: rng.integers(0, 101, (5, 5, e)).astype(float),
    "skewed": lambda rng, e: rng.choice([50.0, 85.0], p=[0.05, 0.95], size=(5, 5, e)),
}


def raw_contrast_p(I: np.ndarray, seed: int) -> float:
    """The alternative the toolkit rejected: sign flips of each event's raw in-group minus out-group mean (all 2^E
    patterns up to stats.EXACT_LIMIT, else 10,000 drawn)."""
    c = I[SAME].mean(axis=0) - I[~SAME].mean(axis=0)
    if 2 ** len(c) <= stats.EXACT_LIMIT:
        signs = 1 - 2 * ((np.arange(2 ** len(c))[:, None] >> np.arange(len(c))) & 1)
        return float(np.mean(signs @ c >= c.sum() - 1e-9))
    signs = np.random.default_rng(seed).choice([-1, 1], size=(10_000, len(c)))
    return float((1 + np.sum(signs @ c >= c.sum() - 1e-9)) / 10_001)


def rejection(rng: np.random.Generator, draw, events: int, draws: int) -> dict:
    """Share of `draws` runs rejected at 0.05 by the event-level test and by the raw-contrast sign flips."""
    runs = [draw(rng, events) for _ in range(draws)]
    return {"event_test": float(np.mean([stats.event_test(I, SAME, seed=k).p_value <= 0.05
                                         for k, I in enumerate(runs)])),
            "raw_contrast": float(np.mean([raw_contrast_p(I, k) <= 0.05 for k, I in enumerate(runs)]))}


def coverage(rng: np.random.Generator, gap: float, events: int, draws: int, resamples: int) -> dict:
    """Share of `draws` planted runs whose 95% event-bootstrap intervals hold the true gap and the true δ."""
    gap_hits, delta_hits = [], []
    for k in range(draws):
        boot = stats.event_bootstrap(rng.normal(70, 10, (5, 5, events)) + gap * SAME[:, :, None], SAME, resamples,
                                     seed=k)
        low, high = boot.interval(boot.gap_points)
        gap_hits.append(low <= gap <= high)
        if gap:
            low, high = boot.interval(boot.delta)
            delta_hits.append(low <= TRUE_DELTA <= high)
    return {"gap_points": float(np.mean(gap_hits)), "delta": float(np.mean(delta_hits)) if delta_hits else None}


def main() -> None:
    """Measure, print the table and write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=1000, help="synthetic runs per size and power cell")
    parser.add_argument("--coverage-draws", type=int, default=200, help="synthetic runs per coverage cell")
    parser.add_argument("--resamples", type=int, default=1000, help="event resamples per bootstrap")
    parser.add_argument("--events", default="12,24", help="events per run, comma separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("inference_calibration.json"))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    rows = []
    for events in (int(e) for e in args.events.split(",")):
        for name, draw in NULLS.items():
            rows.append({"events": events, "check": f"size at 0.05, {name} null", **rejection(rng, draw, events,
                                                                                          args.draws)})
        for gap in (3.0, 5.0):
            planted = lambda rng, e, gap=gap: rng.normal(70, 10, (5, 5, e)) + gap * SAME[:, :, None]
            rows.append({"events": events, "check": f"power at 0.05, gap {gap:g} points (sd 10)",
                         **rejection(rng, planted, events, args.draws // 2)})
        for gap in (0.0, 5.0):
            rows.append({"events": events, "check": f"95% coverage, gap {gap:g} points",
                         **coverage(rng, gap, events, args.coverage_draws, args.resamples)})
    print(f"{'events':>6}  {'check':<40} {'event_test':>10} {'raw_contr':>10} {'cover_gap':>10} {'cover_δ':>8}")
    for r in rows:
        cells = [r.get(k) for k in ("event_test", "raw_contrast", "gap_points", "delta")]
        print(f"{r['events']:>6}  {r['check']:<40} " + " ".join("         —" if v is None else f"{v:>10.3f}"
                                                             for v in cells))
    result = {"rows": rows, "draws": args.draws, "coverage_draws": args.coverage_draws, "resamples": args.resamples,
              "seed": args.seed, "true_delta": TRUE_DELTA, "seconds": time.perf_counter() - started,
              "machine": platform.platform()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
