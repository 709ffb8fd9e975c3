"""How long the command line takes to answer before it does any work: `empathy-gap --help`, `suites`, `run intergroup
--help`, a misspelt flag and a second sweep of a folder in use (refused by its lock), each a fresh process timed
wall clock, the median of `--repeats`, and the modules each imported (torch and transformers must not be).

    python tests/benchmarks/bench_cli.py --repeats 5 --out bench_cli.json

The lock refusal needs a sweep whose folder a first sweep holds: the benchmark writes a one-run sweep file of a
local model folder (a config.json alone: the refusal comes before any model is read) and holds the folder's lock
itself. Prints a table and writes a JSON file.
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
import statistics
import subprocess
import tempfile
import time

from behavioral.rundir.provenance import provenance
from behavioral.rundir.lock import RunLock

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "scipy", "sklearn", "pandas", "pyarrow")
# The command's argument vector (SWEEP: the sweep file whose folder is held), its expected exit status.
COMMANDS = {
    "--help": (["--help"], 0),
    "suites": (["suites"], 0),
    "run intergroup --help": (["run", "intergroup", "--help"], 0),
    "flag error (--catgories)": (["run", "intergroup", "--model", "m", "--out", "o", "--catgories", "religion"], 2),
    "sweep lock refusal": (["sweep", "SWEEP", "--no-progress"], 2),
}
# Runs the command as the console script does and prints which of HEAVY it imported (its last line).
PROBE = ("import sys, json\nfrom behavioral.cli.commands import main\ntry:\n    code = main(sys.argv[1:])\n"
         "except SystemExit as exit_:\n    code = exit_.code\n"
         f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]))")


def sweep_file(folder: Path) -> Path:
    """A one-run sweep file of a local model folder, its out folder under `folder`."""
    model = folder / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    path = folder / "sweep.toml"
    path.write_text(f'out = "{folder / "sweep"}"\n\n[[model]]\nname = "m"\nid = "{model}"\n\n'
                    '[suite.scm]\nmode = "score"\n')
    (folder / "sweep").mkdir()
    return path


def time_command(argv: list[str], expected: int, cwd: Path) -> tuple[float, list[str]]:
    """One fresh process's wall time for `empathy-gap argv` and the heavy modules it imported."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=cwd,
                          env=os.environ | {"PYTHONPATH": str(ROOT)})
    elapsed = time.perf_counter() - start
    code, imported = json.loads(done.stdout.strip().splitlines()[-1])
    if code != expected:
        raise SystemExit(f"{' '.join(argv)}: exit status {code}, expected {expected}: {done.stderr.strip()}")
    return elapsed, imported


def measure(repeats: int) -> list[dict]:
    """Each command's median, fastest and slowest wall time over `repeats` fresh processes, interleaved."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = sweep_file(folder)
        holder = RunLock(folder / "sweep", 0, "sweep")
        holder.acquire()  # a first sweep, running
        try:
            times: dict[str, list[float]] = {name: [] for name in COMMANDS}
            imported: dict[str, list[str]] = {}
            for _ in range(repeats):
                for name, (argv, expected) in COMMANDS.items():
                    argv = [str(path) if a == "SWEEP" else a for a in argv]
                    elapsed, imported[name] = time_command(argv, expected, folder)
                    times[name].append(elapsed)
        finally:
            holder.release()
    return [{"command": name, "median_s": statistics.median(t), "min_s": min(t), "max_s": max(t), "n": len(t),
             "heavy_imports": imported[name]} for name, t in times.items()]


def main(argv: list[str] | None = None) -> int:
    """Time the commands and print the table; write the JSON where --out says."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per command (default: 5)")
    parser.add_argument("--out", type=Path, help="JSON file to write (default: none)")
    args = parser.parse_args(argv)
    rows = measure(args.repeats)
    print(f"| command | median s (n={args.repeats}) | min s | max s | heavy modules imported |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['command']} | {row['median_s']:.3f} | {row['min_s']:.3f} | {row['max_s']:.3f} | "
              f"{', '.join(row['heavy_imports']) or 'none'} |")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "machine": platform.platform(), "cpus": os.cpu_count(),
                                        "python": platform.python_version(),
                                        "git_commit": provenance().get("git_commit")}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
