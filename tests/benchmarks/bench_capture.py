"""Capture overhead: the same suite slice run with and without persona + experiencer + final-token capture.

Prints a table and writes a JSON file. The model is loaded once; one batch is timed first and the estimate printed.
Each run goes into a fresh temporary run directory; the time counted is the whole `run()` on the loaded model (the
identity pass, hooks and activation writes included).
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import tempfile
import time

from behavioral.inference import models
from behavioral.runner.estimate import estimate_run
from behavioral.runner.run import RunConfig, run
from behavioral.runner.reader import read_run
from behavioral.suites.intergroup import SUITE, Options

REAL_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "crowd-envent"


def timed_run(config: RunConfig, loaded: tuple, scratch: Path | None = None) -> tuple[float, int]:
    """Seconds for one complete run of the loaded model into a temporary directory (inside `scratch` if given),
    and the prompts it ran."""
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        start = time.perf_counter()
        run(config, Path(tmp) / "run", progress=False, loaded=loaded)
        seconds = time.perf_counter() - start
        return seconds, len(read_run(Path(tmp) / "run", SUITE.name, allow_partial=True)[1])


def main() -> None:
    """Run the slice without and with capture (all layers) and report prompts/s and the overhead."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--mode", default="generate", choices=("generate", "score"))
    parser.add_argument("--category", default="religion")
    parser.add_argument("--setting", default="P0S0T0")
    parser.add_argument("--limit-events", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--events", type=Path, default=REAL_CORPUS if REAL_CORPUS.is_dir() else None)
    parser.add_argument("--out", type=Path, default=Path("bench_capture.json"))
    args = parser.parse_args()

    loaded = models.load(args.model, args.device, args.dtype)
    options = Options(categories=(args.category,), settings=(args.setting,),
                      events=str(args.events) if args.events else None, limit_events=args.limit_events)
    base = dict(suite="intergroup", model=args.model, options=options, mode=args.mode, device=args.device,
                dtype=args.dtype, batch_size=args.batch_size, unit_size=args.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"each of 2 runs: {estimate_run(RunConfig(**base), loaded, tmp).describe()} (capture: more)",
              flush=True)
    t_plain, n = timed_run(RunConfig(**base), loaded)
    t_capture, _ = timed_run(RunConfig(**base, capture=SUITE.capture.kinds, layers="all", per_cell_samples=4),
                             loaded)
    result = {
        "model": args.model, "mode": args.mode, "category": args.category, "setting": args.setting,
        "prompts": n, "events": str(args.events) if args.events else "embedded",
        "plain_seconds": t_plain, "capture_seconds": t_capture,
        "plain_prompts_per_s": n / t_plain, "capture_prompts_per_s": n / t_capture,
        "overhead": t_capture / t_plain - 1,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'run':<10} {'seconds':>8} {'prompts/s':>10}")
    print(f"{'plain':<10} {t_plain:>8.1f} {n / t_plain:>10.2f}")
    print(f"{'capture':<10} {t_capture:>8.1f} {n / t_capture:>10.2f}")
    print(f"overhead of capture (all layers, persona + experiencer + final): {result['overhead']:+.1%}; json: {args.out}")


if __name__ == "__main__":
    main()
