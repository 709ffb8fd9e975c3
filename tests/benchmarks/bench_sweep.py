"""The sweep's overhead: the runs of one sweep file started by hand, one `empathy-gap run` command each (`hand`), and
by a short script that loads each model once and calls behavioral.runner.run.run per run (`script`, the least a sweep can
cost), against one `empathy-gap sweep` command over the same file (analysis left out), in fresh folders, interleaved.

    python tests/benchmarks/bench_sweep.py [SWEEP.toml] --repeats 2 --out bench_sweep.json

By hand, each command starts Python, imports the project and loads its model; the sweep and the script do that once
per process and once per model, so sweep against script is the sweep's own cost (reading and checking the file,
sweep.json, the finished-run checks). Every side is timed as whole processes (wall clock), what a user waits. The default file is a CPU slice of SmolLM2-135M-Instruct over the five suites. Prints a table and writes a
JSON file.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import tempfile
import time

from behavioral.core.options import flag_name
from behavioral.rundir.provenance import provenance
from behavioral.rundir.parts import read_results
from behavioral.sweep.config import SweepRun, read_sweep

ROOT = Path(__file__).resolve().parents[2]
SLICE = """
[run]
device = "cpu"
dtype = "fp32"
batch_size = 16
max_new_tokens = 32

[[model]]
name = "smollm2-135m"
id = "smollm2-135m"

[suite.intergroup]
mode = "score"
options = { categories = ["religion"], settings = ["P0S1T0"], limit_events = 2 }

[suite.scm]
mode = "score"
options = { groups = "us-stereotypes", traits = ["warm"], templates = ["f01"] }

[suite.jaem]
options = { tasks = ["ce"], limit = 2, repeats = 1 }

[suite.giebench]
options = { limit_items = 2 }

[suite.isear]
options = { events = "project", sample_k = 2 }
"""


def hand_command(run: SweepRun, out: Path) -> list[str]:
    """The `empathy-gap run` command a user would type for one run of the sweep (its options as flags)."""
    config = run.config
    command = [sys.executable, "-m", "behavioral.cli", "run", run.suite, "--model", config.model, "--out", str(out),
               "--mode", config.mode, "--device", config.device, "--dtype", config.dtype,
               "--batch-size", str(config.batch_size), "--max-new-tokens", str(config.max_new_tokens), "--no-progress"]
    for field in dataclasses.fields(config.options):
        value, flag = getattr(config.options, field.name), flag_name(field)
        if value == field.default:  # a user types only what differs from the suite's defaults
            continue
        if value is True:
            command.append(flag)
        elif isinstance(value, tuple):
            command += [flag, ",".join(value)] if value else []
        else:
            command += [flag, str(value)]
    return command


SCRIPT = """
import itertools, sys
from behavioral.core.distributed import place
from behavioral.runner.run import load_model, run
from behavioral.sweep.config import read_sweep
sweep = read_sweep(sys.argv[1])
for model, group in itertools.groupby(sweep.runs, key=lambda r: r.model):
    runs = list(group)
    loaded = load_model(runs[0].config, place())
    for r in runs:
        run(r.config, f"{sys.argv[2]}/{r.run_dir}", progress=False, loaded=loaded)
"""


def timed(commands: list[list[str]]) -> float:
    """Wall seconds of the commands run one after another; a failure stops the benchmark with its output."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    for command in commands:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    """Time the hand-started runs and the sweep, alternating, `--repeats` times each; print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", type=Path, help="a sweep file (default: the CPU slice above)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench_sweep.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = args.sweep or Path(tmp) / "slice.toml"
        if args.sweep is None:
            source.write_text(f'out = "{Path(tmp) / "unused"}"\n' + SLICE)
        runs = read_sweep(source).runs
        rows = {"hand": [], "script": [], "sweep": []}
        prompts = 0
        for k in range(args.repeats):
            hand = Path(tmp) / f"hand-{k}"
            rows["hand"].append(timed([hand_command(r, hand / r.run_dir) for r in runs]))
            script = Path(tmp) / f"script-{k}"
            rows["script"].append(timed([[sys.executable, "-c", SCRIPT, str(source), str(script)]]))
            swept = Path(tmp) / f"sweep-{k}"
            rows["sweep"].append(timed([[sys.executable, "-m", "behavioral.cli", "sweep", str(source), "--out",
                                         str(swept), "--no-analyze", "--no-progress"]]))
            counts = [[len(read_results(folder / r.run_dir)) for r in runs] for folder in (hand, script, swept)]
            assert counts[0] == counts[1] == counts[2], "the sides wrote different numbers of rows"
            prompts = sum(counts[0])
    best = {side: min(times) for side, times in rows.items()}
    result = {"sweep_file": str(args.sweep or "CPU slice (bench_sweep.SLICE)"), "runs": [r.name for r in runs],
              "prompts": prompts, "seconds": rows, "best": best, "against_hand": best["sweep"] / best["hand"] - 1,
              "against_script": best["sweep"] / best["script"] - 1,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "provenance": provenance()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{len(runs)} runs, {prompts} prompts; wall seconds per repeat (best)")
    for side, times in rows.items():
        print(f"{side:<6} {' '.join(f'{t:8.1f}' for t in times)}   ({best[side]:.1f})")
    print(f"sweep against hand-started runs {result['against_hand']:+.1%}, against the one-load script "
          f"{result['against_script']:+.1%}; json: {args.out}")


if __name__ == "__main__":
    main()
