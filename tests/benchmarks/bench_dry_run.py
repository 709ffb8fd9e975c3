"""The dry run's cost against the sweep's: `empathy-gap sweep FILE --dry-run` and `empathy-gap sweep FILE
--no-analyze`, each a whole process (wall clock, what a user waits), on the models of the file that load here, in a
temporary folder; each run's estimated seconds (from the dry run's plan) against the seconds it took in the sweep.

    python tests/benchmarks/bench_dry_run.py [SWEEP.toml] [--models smollm2-135m] --out bench_dry_run.json

The default file is the README's example, experiments/sweeps/cpu-slices.toml, kept to the models `--models` names
(its hub models do not download here). Prints a table and writes a JSON file with the load average of the machine
before and after each side (a shared machine's other jobs slow both).
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import os
import platform
import re
import subprocess
import tempfile
import time

from behavioral.rundir.provenance import provenance
from behavioral.sweep.config import read_sweep

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "experiments/sweeps/cpu-slices.toml"
# each side is the command line itself, with each run's estimate (dry run) or seconds (sweep) written to argv[3]
DRY_RUN = """
import json, sys
from behavioral.cli import sweep as sweep_cli
from behavioral.cli.commands import main
describe = sweep_cli.describe_plan
def kept(sweep, planned):
    json.dump({p.name: p.seconds for p in planned}, open(sys.argv[3], "w"))
    return describe(sweep, planned)
sweep_cli.describe_plan = kept
sys.exit(main(["sweep", sys.argv[1], "--out", sys.argv[2], "--dry-run"]))
"""
SWEEP = """
import json, sys, time
from behavioral.cli.commands import main
from behavioral.sweep import runner
run, seconds = runner.run, {}
def timed(config, out, *args, **kwargs):
    start = time.perf_counter()
    done = run(config, out, *args, **kwargs)
    seconds[str(out)] = time.perf_counter() - start
    return done
runner.run = timed
code = main(["sweep", sys.argv[1], "--out", sys.argv[2], "--no-analyze", "--no-progress"])
json.dump(seconds, open(sys.argv[3], "w"))
sys.exit(code)
"""


def only_models(text: str, names: set[str]) -> str:
    """A sweep file's text without the [[model]] tables whose name is not in `names`."""
    sections = re.split(r"(?m)^(?=\[)", text)
    return "".join(s for s in sections if not s.startswith("[[model]]")
                   or re.search(r'(?m)^name\s*=\s*"([^"]*)"', s).group(1) in names)


def timed(script: str, *args: str) -> tuple[float, str, dict, tuple[float, float]]:
    """Wall seconds of `python -c script args`, its stdout, what it wrote to its JSON file (the last argument) and
    the 1-minute load average before and after; a failure stops the benchmark with its output."""
    before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script, *args], env=os.environ | {"PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{script.strip().splitlines()[-1]} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout, json.loads(Path(args[-1]).read_text()), (before, os.getloadavg()[0])


def main() -> None:
    """Time the dry run, then the sweep, of the file kept to `--models`; print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", type=Path, default=EXAMPLE, help="a sweep file (default: the README's)")
    parser.add_argument("--models", default="smollm2-135m", help="the file's models to keep, comma-separated")
    parser.add_argument("--out", type=Path, default=Path("bench_dry_run.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "sweep.toml"
        source.write_text(only_models(args.sweep.read_text(), set(args.models.split(","))))
        sweep = read_sweep(source, Path(tmp) / "sweep")
        dry = timed(DRY_RUN, str(source), str(sweep.out), str(Path(tmp) / "estimates.json"))
        assert not sweep.out.exists(), "the dry run wrote into the sweep's folder"
        full = timed(SWEEP, str(source), str(sweep.out), str(Path(tmp) / "seconds.json"))
    runs = [{"run": r.name, "estimated_s": dry[2][r.name], "actual_s": full[2][str(sweep.out / r.run_dir)]}
            for r in sweep.runs]
    for r in runs:
        r["ratio"] = r["estimated_s"] / r["actual_s"]
    result = {"sweep_file": str(args.sweep), "models": args.models, "dry_run_s": dry[0], "sweep_s": full[0],
              "dry_run_share": dry[0] / full[0], "runs": runs,
              "estimated_total_s": sum(r["estimated_s"] for r in runs),
              "actual_runs_s": sum(r["actual_s"] for r in runs),
              "dry_run_output": dry[1].splitlines(),
              "load_average_1min": {"dry_run": dry[3], "sweep": full[3]},
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "provenance": provenance()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(dry[1])
    print(f"dry run {dry[0]:.1f} s, sweep {full[0]:.1f} s: the dry run is {result['dry_run_share']:.1%} of the sweep "
          f"(load average {dry[3][0]:.1f}-{dry[3][1]:.1f} and {full[3][0]:.1f}-{full[3][1]:.1f})")
    print(f"{'run':<32} {'estimated s':>12} {'actual s':>10} {'ratio':>6}")
    for r in runs:
        print(f"{r['run']:<32} {r['estimated_s']:12.1f} {r['actual_s']:10.1f} {r['ratio']:6.2f}")
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
