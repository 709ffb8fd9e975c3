"""What one command reads of its run directories: the manifest files read from disk and the result parts hashed
while `empathy-gap ARGS...` runs in this process (the counting of tests/test_run_reader.py). Prints a JSON line.

    python tests/benchmarks/bench_reads.py analyze RUN_DIR --out OUT
    python tests/benchmarks/bench_reads.py run intergroup --model smollm2-135m ... --out RUN_DIR   # a resume
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import collections
import contextlib
import hashlib
import json
from collections.abc import Iterator

from behavioral.cli import main as empathy_gap
from behavioral.rundir import manifest, parts


@contextlib.contextmanager
def counting() -> Iterator[collections.Counter]:
    """While active, the manifest files read from disk (`manifests`) and the part digests computed (`digests`)."""
    counts: collections.Counter = collections.Counter()
    read, sha = manifest._checked_manifest, hashlib.sha256

    def reading(run_dir):
        counts["manifests"] += 1
        return read(run_dir)

    def hashing(data=b""):
        counts["digests"] += 1
        return sha(data)

    manifest._checked_manifest = reading
    parts.hashlib = type("PartsHashlib", (), {"sha256": staticmethod(hashing)})
    try:
        yield counts
    finally:
        manifest._checked_manifest, parts.hashlib = read, hashlib


def counted(argv: list[str]) -> dict:
    """The exit code of `empathy-gap argv` and what it read."""
    with counting() as counts:
        code = empathy_gap(argv)
    return {"argv": argv, "exit": code, **counts}


def main() -> None:
    """Parse `-- ARGS` (everything after the script's own flags is the command's) and print the counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [-h] ARGS... (an empathy-gap command line)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the empathy-gap command to count")
    args = parser.parse_args()
    if not args.args:
        parser.error("expected an empathy-gap command line, e.g. analyze RUN_DIR --out OUT")
    print(json.dumps(counted(args.args)))


if __name__ == "__main__":
    main()
