"""Two processes under torchrun (gloo on CPU) write the same rows as one process, each into its own part files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from behavioral.runner.run import RunConfig, run
from behavioral.suites.intergroup import Options
from behavioral.suites.intergroup import results as read_results

ARGS = ["--categories", "religion", "--settings", "P0S0T0", "--limit-events", "3", "--unit-size", "2",
        "--mode", "both", "--device", "cpu", "--dtype", "fp32", "--batch-size", "4", "--max-new-tokens", "8",
        "--no-progress"]


def _torchrun(model_dir, out) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "behavioral.cli", "run", "intergroup", "--model", str(model_dir), "--out", str(out), *ARGS]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _rows(run_dir):
    return read_results(run_dir).sort_values(["unit_id", "event_id"]).reset_index(drop=True)


@pytest.mark.slow
def test_two_ranks_write_the_rows_of_one_process(tiny_model_dir, tmp_path):
    single = tmp_path / "single"
    options = Options(categories=("religion",), settings=("P0S0T0",), limit_events=3)
    config = RunConfig(suite="intergroup", model=str(tiny_model_dir), options=options, unit_size=2, mode="both",
                       device="cpu", dtype="fp32", batch_size=4, max_new_tokens=8)
    run(config, single, progress=False)

    shared = tmp_path / "two-ranks"
    done = _torchrun(tiny_model_dir, shared)
    assert done.returncode == 0, done.stderr[-3000:]
    parts = sorted(p.name for p in (shared / "results").glob("*.parquet"))
    assert {p[:4] for p in parts} == {"r000", "r001"}

    one, two = _rows(single), _rows(shared)
    assert len(two) == 6 * 6 * 3
    assert not two.duplicated(["unit_id", "event_id"]).any()
    exact = ["unit_id", "event_id", "perceiver", "experiencer", "response", "intensity", "refused", "score_intensity"]
    assert one[exact].equals(two[exact])
    for column in ("expected_intensity", "numeric_mass"):  # batches differ between layouts: float noise only
        assert np.allclose(one[column], two[column], rtol=1e-5, atol=1e-6)

    again = _torchrun(tiny_model_dir, shared)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in (shared / "results").glob("*.parquet")) == parts
