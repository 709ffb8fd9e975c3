"""The command line answers before it imports anything heavy: help, the suites' list, a refused flag and a sweep
folder's lock refusal import neither torch nor transformers (nor scipy, scikit-learn, pandas, pyarrow), each in a
fresh process as the console script runs (tests/benchmarks/bench_cli.py times the same commands)."""

from __future__ import annotations

import pytest

from behavioral.rundir.lock import RunLock
from tests.benchmarks.bench_cli import COMMANDS, sweep_file, time_command


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMMANDS))
def test_answering_before_any_work_imports_nothing_heavy(name, tmp_path):
    argv, expected = COMMANDS[name]
    path = sweep_file(tmp_path)
    holder = RunLock(tmp_path / "sweep", 0, "sweep")
    holder.acquire()  # a first sweep, running
    try:
        _, imported = time_command([str(path) if a == "SWEEP" else a for a in argv], expected, tmp_path)
    finally:
        holder.release()
    assert imported == []
