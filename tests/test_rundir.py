"""Run directories that survive their users: concurrent starts, real kills, deleted and copied parts, the messages."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import behavioral.runner.run as run_mod
from behavioral.cli import commands as cli
from behavioral.core import files
from behavioral.rundir import lock as run_lock
from behavioral.rundir import parts as store
from behavioral.core.files import write_json_atomic
from behavioral.rundir.manifest import MANIFEST, Manifest, RunDirError, read_manifest, write_manifest
from behavioral.analysis import analyze
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.parts import CORE, RESULTS, RowLog, RunLock, read_results
from behavioral.suites.intergroup import results
from behavioral.suites.intergroup.setting_analysis import AnalyzeOptions
from tests.test_run import _assert_same_rows, _config

ROWS = 216  # 36 religion cells x 3 events x 2 settings


def _files(out: Path) -> list[str]:
    """The row logs and parts of a run's results (its seal ledgers aside)."""
    return sorted(p.name for p in (out / RESULTS).iterdir() if not p.name.endswith("-seals.json"))


def _interrupted_run(config: RunConfig, out: Path, monkeypatch, after_batches: int) -> None:
    """A run that dies (KeyboardInterrupt, so the row log is sealed on the way out) after `after_batches` batches."""
    real_rows = run_mod.Runner.rows
    calls = []

    def dying_rows(self, units):
        if len(calls) == after_batches:
            raise KeyboardInterrupt("killed")
        calls.append(1)
        return real_rows(self, units)

    monkeypatch.setattr(run_mod.Runner, "rows", dying_rows)
    with pytest.raises(KeyboardInterrupt):
        run(config, out, progress=False)
    monkeypatch.setattr(run_mod.Runner, "rows", real_rows)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model_dir) -> Path:
    """One uninterrupted run of `_config`: tests read it, or copy it before they change it."""
    return run(_config(tiny_model_dir), tmp_path_factory.mktemp("expected") / "run", progress=False)


@pytest.fixture(scope="module")
def expected(finished) -> pd.DataFrame:
    return results(finished)


# --- one process per rank ----------------------------------------------------------------------------------------

def _hold_lock(out: Path) -> subprocess.Popen:
    """Another process that holds rank 0's lock of `out` until killed."""
    code = ("import sys, time\nfrom behavioral.rundir.parts import RunLock\nRunLock(sys.argv[1]).acquire()\n"
            "print('held', flush=True)\ntime.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.slow
def test_a_second_process_on_the_same_run_dir_is_refused_at_once(tiny_model_dir, tmp_path, expected):
    out = tmp_path / "run"
    holder = _hold_lock(out)
    try:
        with pytest.raises(RunDirError) as err:
            run(_config(tiny_model_dir), out, progress=False)
        message = str(err.value)
        assert f"pid {holder.pid}" in message and "in use" in message and str(out) in message
        assert not (out / RESULTS).exists() and not (out / MANIFEST).exists()  # the refused process wrote nothing
    finally:
        holder.kill()
        holder.wait()
    run(_config(tiny_model_dir), out, progress=False)  # the holder died: its lock died with it
    _assert_same_rows(results(out), expected)
    assert not any(run_lock.is_lock_file(p) for p in out.iterdir())


def test_a_refused_start_on_a_finished_run_changes_nothing(tiny_model_dir, tmp_path, finished):
    out = shutil.copytree(finished, tmp_path / "run")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    with RunLock(out, 0):
        with pytest.raises(RunDirError, match=f"pid {os.getpid()}"):
            run(_config(tiny_model_dir), out, progress=False)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_lock_file_reappearing_under_a_new_holder_is_not_shared(tmp_path):
    """The holder removes its lock file on release; a process that opened the old file must not think it holds it."""
    first = RunLock(tmp_path / "run")
    first.acquire()
    first.release()
    second, third = RunLock(tmp_path / "run"), RunLock(tmp_path / "run")
    second.acquire()
    assert not third.acquire(raise_if_held=False)
    second.release()
    assert third.acquire(raise_if_held=False)
    third.release()


# --- kills ----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_sigkill_then_resume_leaves_only_parquet_and_every_row(tiny_model_dir, tmp_path, expected):
    """A real SIGKILL of `empathy-gap run` while it writes, then the same command again."""
    out = tmp_path / "run"
    args = ["run", "intergroup", "--model", str(tiny_model_dir), "--categories", "religion",
            "--settings", "P0S0T0,P0S1T0", "--limit-events", "3", "--mode", "score", "--device", "cpu",
            "--dtype", "fp32", "--batch-size", "1", "--unit-size", "2", "--out", str(out), "--no-progress"]
    code = "import sys\nfrom behavioral.cli.commands import main\nsys.exit(main(sys.argv[1:]))\n"
    child = subprocess.Popen([sys.executable, "-c", code, *args], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        logs = list((out / RESULTS).glob("*.arrows")) if (out / RESULTS).is_dir() else []
        if logs and logs[0].stat().st_size > 4096:
            break
        time.sleep(0.05)
    assert child.poll() is None, "the run finished before it could be killed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert len(read_results(out)) < ROWS and any(p.endswith(".arrows") for p in _files(out))  # its log: unread

    assert cli.main(args) == 0
    assert all(name.endswith(".parquet") for name in _files(out)), _files(out)
    rows = pd.concat([pd.read_parquet(p) for p in sorted((out / RESULTS).glob("*.parquet"))])  # Parquet alone
    assert len(rows) == ROWS and not rows.duplicated(["unit_id", "item_id", "sample"]).any()
    _assert_same_rows(results(out), expected)


def test_logs_of_a_killed_earlier_process_of_another_rank_are_sealed(tiny_model_dir, tmp_path, monkeypatch,
                                                                    expected):
    out = tmp_path / "run"
    real_close = RowLog.close
    monkeypatch.setattr(RowLog, "close", lambda self: None)  # as after a SIGKILL: the log is never sealed
    _interrupted_run(_config(tiny_model_dir), out, monkeypatch, after_batches=5)
    monkeypatch.setattr(RowLog, "close", real_close)
    [log] = (out / RESULTS).glob("*.arrows")
    log.rename(log.with_name("r001-000000.arrows"))  # left by rank 1 of an earlier two-process run
    (out / RESULTS / ".r001-000003.parquet.tmp").write_bytes(b"half a part")
    run(_config(tiny_model_dir), out, progress=False)
    assert _files(out) == ["r000-000000.parquet", "r001-000000.parquet"]
    _assert_same_rows(results(out), expected)


def test_a_missing_log_is_an_error_not_an_empty_log(tmp_path):
    write_manifest(tmp_path / "run", Manifest({"suite": "intergroup", "schema": 2, "model": "m", "mode": "score"},
                                              {}, {}))
    log = RowLog(tmp_path / "run", CORE)
    log.write([{"unit_id": "u", "item_id": "e", "sample": 0}])
    with pytest.raises(FileNotFoundError):
        store._read_log(log.path.with_name("r000-000009.arrows"))
    assert len(store._read_log(log.path)) == 1 and len(read_results(tmp_path / "run")) == 0  # a log is not a part


# --- parts deleted or copied in -------------------------------------------------------------------------------------

def test_a_deleted_part_is_recomputed_without_overwriting_another(tiny_model_dir, tmp_path, monkeypatch, expected):
    out = tmp_path / "run"
    _interrupted_run(_config(tiny_model_dir), out, monkeypatch, after_batches=10)
    run(_config(tiny_model_dir), out, progress=False)
    assert _files(out) == ["r000-000000.parquet", "r000-000001.parquet"]
    second = pd.read_parquet(out / RESULTS / "r000-000001.parquet")
    (out / RESULTS / "r000-000000.parquet").unlink()
    run(_config(tiny_model_dir), out, progress=False)
    assert _files(out) == ["r000-000001.parquet", "r000-000002.parquet"]
    pd.testing.assert_frame_equal(pd.read_parquet(out / RESULTS / "r000-000001.parquet"), second)
    _assert_same_rows(results(out), expected)


def test_analyze_refuses_duplicate_rows_naming_them(tmp_path, capsys, finished):
    out = shutil.copytree(finished, tmp_path / "run")
    [part] = (out / RESULTS).glob("*.parquet")
    shutil.copy(part, out / RESULTS / "copied-in.parquet")
    with pytest.raises(RunDirError) as err:
        read_results(out)
    message = str(err.value)
    assert f"{ROWS} duplicate rows" in message and part.name in message and "copied-in.parquet" in message
    assert "unit 'P0S0T0|religion|" in message
    assert cli.main(["analyze", str(out), "--permutations", "20"]) == 2
    assert "duplicate rows" in capsys.readouterr().err
    assert not (out / "analysis").exists()


# --- batch size -----------------------------------------------------------------------------------------------------

def test_batch_size_changes_floats_by_rounding_only(tiny_model_dir, tmp_path, expected):
    """What the docs claim: another batch size gives the same answers, and probabilities within float rounding."""
    for batch_size in (1, 7):
        out = run(_config(tiny_model_dir, batch_size=batch_size), tmp_path / f"b{batch_size}", progress=False)
        _assert_same_rows(results(out), expected)


# --- paths and modes ------------------------------------------------------------------------------------------------

def test_resume_through_another_spelling_of_the_same_paths(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny_model_dir.parent)
    out = tmp_path / "run"
    run(_config(tiny_model_dir.name), out, progress=False)
    before = _files(out)
    run(_config(f"./{tiny_model_dir.name}/"), out, progress=False)  # the same model: resumes, nothing to do
    run(_config(str(tiny_model_dir)), out, progress=False)
    assert _files(out) == before
    assert json.loads((out / MANIFEST).read_text())["config"]["model"] == str(tiny_model_dir.resolve())


def test_manifest_is_readable_like_the_parts(finished):
    out = finished
    [part] = (out / RESULTS).glob("*.parquet")
    assert stat.S_IMODE((out / MANIFEST).stat().st_mode) == stat.S_IMODE(part.stat().st_mode)
    assert stat.S_IMODE((out / MANIFEST).stat().st_mode) & stat.S_IROTH


# --- messages -------------------------------------------------------------------------------------------------------

def _cli_run(model_dir, out, *extra):
    return ["run", "intergroup", "--model", str(model_dir), "--categories", "religion", "--settings", "P0S1T0",
            "--limit-events", "2", "--mode", "score", "--device", "cpu", "--dtype", "fp32", "--out", str(out),
            "--no-progress", *extra]


@pytest.mark.parametrize("extra, named", [
    (["--device", "tpu"], "--device is 'tpu'"),
    (["--limit-events", "0"], "--limit-events must be a positive number of events, got 0"),
])
def test_bad_run_options_exit_2_with_one_line_and_nothing_written(extra, named, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(_cli_run(tiny_model_dir, out, *extra)) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1
    assert not out.exists()


def test_ctrl_c_prints_one_line_saying_the_run_resumes(tiny_model_dir, tmp_path, capsys, monkeypatch):
    def interrupted(self, units):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_mod.Runner, "rows", interrupted)
    assert cli.main(_cli_run(tiny_model_dir, tmp_path / "run")) == 130
    err = capsys.readouterr().err  # after the model loader's own progress bar
    assert err.splitlines()[-1] == "empathy-gap: interrupted; finished work is saved; rerun the same command to resume"
    assert "Traceback" not in err


def test_partial_run_is_analyzed_with_allow_partial(tiny_model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _interrupted_run(_config(tiny_model_dir), out, monkeypatch, after_batches=3)
    assert cli.main(["analyze", str(out), "--permutations", "20"]) == 2
    assert "--allow-partial" in capsys.readouterr().err
    assert cli.main(["analyze", str(out), "--permutations", "20", "--allow-partial"]) == 0
    assert "PARTIAL run" in (out / "analysis" / "report.md").read_text()
    rates = pd.read_csv(out / "analysis" / "rates.csv")
    assert rates["missing"].sum() > 0
    assert (rates["prompts"] + rates["missing"]).sum() == read_manifest(out).plan.rows


def test_damaged_manifest_is_named(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / MANIFEST).write_text('{"config": {"model": "x"')
    assert cli.main(["analyze", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out / MANIFEST) in err and "not valid JSON" in err


def test_full_disk_names_the_file(tmp_path, monkeypatch):
    log = RowLog(tmp_path / "run", CORE)
    os.symlink("/dev/full", log.path)  # every write fails with ENOSPC, as on a full disk
    with pytest.raises(OSError) as err:
        log.write([{"unit_id": "u", "item_id": f"e{i}", "response": "x" * 100} for i in range(2000)])
    assert str(log.path) in str(err.value) and "No space left on device" in str(err.value)

    manifest = tmp_path / "run" / MANIFEST
    monkeypatch.setattr(files.tempfile, "mkstemp",
                        lambda **kw: (os.open("/dev/full", os.O_WRONLY), str(tmp_path / "m.tmp")))
    with pytest.raises(OSError) as err:
        write_json_atomic(manifest, {"x": "y" * 100_000})
    assert str(manifest) in str(err.value) and "No space left on device" in str(err.value)
    assert not manifest.exists()


def test_analysis_result_keeps_a_manifest(tmp_path, finished):
    out = shutil.copytree(finished, tmp_path / "run")
    analyze([out], options=AnalyzeOptions(permutations=20, round_cells=2))
    manifest = json.loads((out / "analysis" / MANIFEST).read_text())
    assert manifest["analysis"]["round_cells"] == 2 and manifest["analysis"]["permutations"] == 20
    assert manifest["tsne"]["params"]["random_state"] == 42
    (run_record,) = manifest["runs"].values()
    assert run_record["config"]["model_hash"] and manifest["provenance"]["package_versions"]["torch"]
    report = (out / "analysis" / "report.md").read_text()
    assert "rounded to 2 decimals" in report and "ignored" in report
