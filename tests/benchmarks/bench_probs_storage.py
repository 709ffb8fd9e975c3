"""Storage cost of the answer distributions: synthetic intergroup rows of a 101-label scale (0..100) written through
the run's own row log (RowLog, sealed into a Parquet part with the run's defaults) three ways: no distribution, each
work unit's mean (`unit_probs`, units of 12 and of 32 items), and every row's (`probs`, what --store-probs adds to
`unit_probs` of units of 32). Prints bytes on disk per million rows and writes a JSON file.

Each row's distribution is a seeded Dirichlet draw whose weight sits on multiples of 5 and 10 near a random mode, as
a model's ratings do; every other column holds what a score run writes (its masses: floats derived from the
distribution).

    python tests/benchmarks/bench_probs_storage.py --rows 200000 --out probs_storage.json
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import tempfile

import numpy as np

from behavioral.rundir.parts import RESULTS, RowLog, result_schema
from behavioral.suites.intergroup import SUITE

LABELS = 101
BATCH = 3840  # rows per RowLog write (a run writes whole work units, a batch at a time): units of 12 and 32 fit


def distributions(n: int, seed: int) -> np.ndarray:
    """float64[n, LABELS]: peaked rating distributions, most mass on round numbers near each row's mode."""
    rng = np.random.default_rng(seed)
    scale = np.arange(LABELS)
    round_numbers = 1 + 4 * (scale % 5 == 0) + 8 * (scale % 10 == 0)
    modes = rng.normal(65, 15, size=(n, 1))
    alpha = 0.02 + 2.0 * round_numbers * np.exp(-0.5 * ((scale - modes) / 8) ** 2)
    return np.stack([rng.dirichlet(a) for a in alpha])


def rows(probs: np.ndarray, first: int, unit_size: int, per_row: bool, unit_means: bool) -> list[dict]:
    """Score-mode result rows (the first is row `first` of the run) of one cell per `unit_size` items, with the
    distributions asked for."""
    values = np.arange(LABELS, dtype=float)
    out = []
    for start in range(0, len(probs), unit_size):
        chunk = probs[start:start + unit_size]
        cell = (first + start) // unit_size
        mean = chunk.mean(axis=0).tolist() if unit_means else None
        for k, p in enumerate(chunk):
            greedy = int(np.argmax(p))
            out.append({
                "unit_id": f"P0S0T0|nationality|p{cell % 22}|e{cell // 22}|{cell}", "item_id": f"{cell}|ev{k:04d}",
                "sample": 0, "response": None, "answer": str(greedy), "value": float(greedy), "refused": False,
                "truncated": None, "score_answer": str(greedy), "score_value": float(greedy),
                "expected": float(p @ values), "valid_mass": 0.5 + p[greedy] / 2, "start_mass": 1 - p.min(),
                "probs": p.tolist() if per_row else None, "unit_probs": mean if k == 0 else None,
                "setting": "P0S0T0", "category": "nationality", "perceiver": f"p{cell % 22}",
                "experiencer": f"e{cell // 22}", "event_id": f"ev{k:04d}", "emotion": "joy",
            })
    return out


def part_bytes(probs: np.ndarray, unit_size: int, per_row: bool, unit_means: bool) -> int:
    """Bytes on disk of the Parquet part the run writer seals from these rows."""
    schema = result_schema(SUITE.fields)
    with tempfile.TemporaryDirectory() as tmp:
        with RowLog(tmp, schema) as log:
            for start in range(0, len(probs), BATCH):
                log.write(rows(probs[start:start + BATCH], start, unit_size, per_row, unit_means))
        return sum(p.stat().st_size for p in (Path(tmp) / RESULTS).glob("*.parquet"))


WAYS = {  # name: (unit size, per-row probs, unit means)
    "no probs": (32, False, False),
    "unit_probs, units of 12": (12, False, True),
    "unit_probs, units of 32": (32, False, True),
    "per-row probs (+ unit_probs, units of 32)": (32, True, True),
}


def main() -> None:
    """Write the rows each way and report bytes per million rows."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    probs = distributions(args.rows, args.seed)
    sizes = {name: part_bytes(probs, *way) for name, way in WAYS.items()}
    scale = 1e6 / args.rows
    base = sizes["no probs"]
    table = [{"way": name, "bytes": size, "mb_per_million_rows": size * scale / 1e6,
              "extra_mb_per_million_rows": (size - base) * scale / 1e6} for name, size in sizes.items()]
    print(f"{args.rows:,} rows of a {LABELS}-label scale, seed {args.seed}; MB = 10^6 bytes, scaled to 10^6 rows")
    print("| stored | MB per million rows | extra over no probs |")
    print("|---|---|---|")
    for row in table:
        print(f"| {row['way']} | {row['mb_per_million_rows']:,.1f} | {row['extra_mb_per_million_rows']:+,.1f} |")
    args.out.write_text(json.dumps({"rows": args.rows, "labels": LABELS, "seed": args.seed, "batch": BATCH,
                                    "table": table}, indent=2) + "\n")


if __name__ == "__main__":
    main()
