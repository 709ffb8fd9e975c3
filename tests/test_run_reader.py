"""A run directory is read by one reader that imports no torch, and one command reads each manifest file once and
hashes each part once: an analysis, a study and a resume; a manifest or part changed on disk is read again."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from behavioral.cli import main
from behavioral.core import files
from behavioral.rundir import manifest as manifest_module
from behavioral.rundir import parts
from behavioral.runner.reader import read_run
from behavioral.runner.run import run
from tests.benchmarks.bench_reads import counting
from tests.conftest import intergroup_capture_config

BLOCK_TORCH = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this process")
sys.meta_path.insert(0, Blocked())
from behavioral.runner.reader import read_run
manifest, rows, done = read_run(sys.argv[1], "intergroup")
print(len(rows), done.complete, manifest.run_id)
"""


@pytest.fixture
def counts(monkeypatch):
    """What this process reads from disk while the test runs (tests/benchmarks/bench_reads.py's count), starting
    with nothing kept; the session's run was just made, so files count as settled at once."""
    monkeypatch.setattr(manifest_module, "_READ", collections.OrderedDict())
    monkeypatch.setattr(parts, "_DIGESTS", collections.OrderedDict())
    monkeypatch.setattr(files, "SETTLED", 0)
    with counting() as found:
        yield found


def _parts(run_dir: Path) -> int:
    return len(list((run_dir / "results").glob("*.parquet")))


def test_a_run_is_read_with_torch_blocked(captured_intergroup):
    done = subprocess.run([sys.executable, "-c", BLOCK_TORCH, str(captured_intergroup)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    manifest, rows, completeness = read_run(captured_intergroup, "intergroup")
    assert done.stdout.split() == [str(len(rows)), "True", manifest.run_id]


def test_an_analysis_reads_the_manifest_once_and_hashes_each_part_once(captured_intergroup, tmp_path, counts):
    assert main(["analyze", str(captured_intergroup), "--out", str(tmp_path / "analysis")]) == 0
    assert counts == {"manifests": 1, "digests": _parts(captured_intergroup)}


def test_a_study_reads_the_manifest_once_and_hashes_each_part_once(captured_intergroup, tmp_path, counts):
    assert main(["interp", "clusters", str(captured_intergroup), "--out", str(tmp_path / "clusters"),
                 "--permutations", "2", "--no-progress"]) == 0
    assert counts == {"manifests": 1, "digests": _parts(captured_intergroup)}


def test_a_resume_reads_the_manifest_once_and_hashes_each_part_once(captured_intergroup, tiny_model_dir, tmp_path,
                                                                    counts):
    copy = tmp_path / "run"
    shutil.copytree(captured_intergroup, copy)
    run(intergroup_capture_config(tiny_model_dir), copy, progress=False)
    assert counts == {"manifests": 1, "digests": _parts(copy)}


def test_a_manifest_edited_on_disk_is_read_again(captured_intergroup, tmp_path, counts):
    copy = tmp_path / "run"
    shutil.copytree(captured_intergroup, copy)
    assert manifest_module.read_manifest(copy).config["suite"] == "intergroup"
    data = json.loads((copy / "manifest.json").read_text())
    data["config"]["suite"] = ["intergroup"]
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(manifest_module.RunDirError, match="config.suite"):
        manifest_module.read_manifest(copy)


def test_a_part_rewritten_on_disk_is_hashed_again_and_refused(captured_intergroup, tmp_path, counts):
    copy = tmp_path / "run"
    shutil.copytree(captured_intergroup, copy)
    parts.check_parts(copy)
    part = next((copy / "results").glob("*.parquet"))
    table = pq.read_table(part)
    pq.write_table(table, part, compression="none")  # the same rows in other bytes
    with pytest.raises(manifest_module.RunDirError, match="differs from what this run sealed"):
        parts.check_parts(copy)


def test_what_a_reader_is_given_is_its_own_copy(captured_intergroup):
    first = manifest_module.read_manifest(captured_intergroup)
    first.config["suite"] = "edited in memory"
    assert manifest_module.read_manifest(captured_intergroup).config["suite"] == "intergroup"


def test_a_manifest_rewritten_within_a_clock_tick_at_the_same_size_is_read_again(captured_intergroup, tmp_path):
    """File times advance by the clock tick: a file changed in the last seconds is never known by its times."""
    copy = tmp_path / "run"
    shutil.copytree(captured_intergroup, copy)
    assert manifest_module.read_manifest(copy).config["mode"] == "score"
    text = (copy / "manifest.json").read_text()
    (copy / "manifest.json").write_text(text.replace('"mode": "score"', '"mode": "scorn"'))  # the same size
    with pytest.raises(manifest_module.RunDirError, match="config.mode"):
        manifest_module.read_manifest(copy)
