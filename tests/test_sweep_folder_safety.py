"""A sweep folder is something people copy, share and download (issue 47): nothing read from its sweep.json chooses
where `analyze` or `export` writes or which run it reads, a run moved into another run's place is refused, and a
second sweep of the same folder is refused at once, before any model loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from behavioral.cli.commands import main
from behavioral.analysis.output_folder import OutputFolderError, output_folder
from behavioral.rundir.parts import RunLock
from behavioral.sweep.config import read_sweep
from behavioral.sweep.folder import SWEEP_FILE, read_state
from behavioral.sweep.runner import run_sweep
from tests.test_sweep import SCM, Loads, _toml

JAEM = """
[suite.jaem]
mode = "score"
options = { tasks = ["ce"], limit = 2, repeats = 1 }
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory, long_model_dir) -> Path:
    """A finished sweep of the tiny model over scm and jaem (its analysis not yet written)."""
    tmp = tmp_path_factory.mktemp("swept")
    sweep = read_sweep(_toml(tmp, [("a", long_model_dir)], SCM, JAEM))
    assert not run_sweep(sweep, progress=False).failed
    return sweep.out


def _copy(swept: Path, tmp_path: Path) -> Path:
    """A copy of the finished sweep, as a user would receive it."""
    return Path(shutil.copytree(swept, tmp_path / "received"))


def _edit_state(folder: Path, edit) -> None:
    path = folder / SWEEP_FILE
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _tree(root: Path, but: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `root` outside `but`, with its mode and bytes."""
    return {p.relative_to(root).as_posix(): (p.stat().st_mode, p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_relative_to(but)}


def _cli(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("field, value", [
    ("setting", "x/../../../../victim"),
    ("suite", "../../victim"),
    ("model", "../victim"),
    ("model", "/tmp/victim"),
    ("setting", "a" * 300),
])
def test_a_tampered_sweep_json_never_writes_outside_the_sweep_folder(swept, tmp_path, capsys, field, value):
    folder = _copy(swept, tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "report.md").write_text("the user's own report\n")
    (victim / "headline.csv").write_text("a,b\n1,2\n")
    _edit_state(folder, lambda data: data["runs"][0].update({field: value}))
    before = _tree(tmp_path, folder)
    code, err = _cli(capsys, "analyze", folder)
    assert code == 2 and err.count("\n") == 1
    assert f"{folder / SWEEP_FILE}: runs[0].{field} is" in err and "expected" in err
    assert _tree(tmp_path, folder) == before
    assert not (folder / "analysis").exists()
    code, err = _cli(capsys, "export", folder, "--to", tmp_path / "dataset")
    assert code == 2 and f"runs[0].{field} is" in err and not (tmp_path / "dataset").exists()


def test_a_run_dir_recorded_in_sweep_json_is_never_read(swept, tmp_path, capsys):
    """sweep.json's run_dir (written by earlier versions) names nothing: the run is read from its place, runs/MODEL/
    SUITE, whatever the file says."""
    reference = _copy(swept, tmp_path / "reference")
    assert _cli(capsys, "analyze", reference)[0] == 0
    folder = _copy(swept, tmp_path)
    elsewhere = Path(shutil.copytree(folder / "runs/a/jaem", tmp_path / "elsewhere"))
    _edit_state(folder, lambda data: [r.update({"run_dir": str(elsewhere)}) for r in data["runs"]])
    shutil.rmtree(elsewhere / "results")  # were `elsewhere` read, the analysis would refuse a run without rows
    assert _cli(capsys, "analyze", folder)[0] == 0
    mine, theirs = (pd.read_csv(f / "analysis/headline.csv") for f in (folder, reference))
    assert mine.equals(theirs) and set(mine["suite"]) == {"scm", "jaem"}


def test_another_suites_run_in_a_runs_place_is_refused_not_analysed_under_its_label(swept, tmp_path, capsys):
    folder = _copy(swept, tmp_path)
    shutil.rmtree(folder / "runs/a/scm")
    shutil.copytree(folder / "runs/a/jaem", folder / "runs/a/scm")
    code, err = _cli(capsys, "analyze", folder)
    assert code == 2 and err.count("\n") == 1
    assert f"{folder / 'runs/a/scm'}: holds a jaem run of model" in err and "expected the sweep's scm run" in err
    assert not (folder / "analysis").exists()


def test_another_models_run_in_a_runs_place_is_refused(swept, tmp_path, capsys):
    folder = _copy(swept, tmp_path)
    _edit_state(folder, lambda data: data["runs"][0].update({"model_spec": "some-org/other-model"}))
    code, err = _cli(capsys, "analyze", folder)
    assert code == 2 and "runs/a/scm: holds a scm run of model" in err and "'some-org/other-model'" in err


def test_a_run_place_that_links_out_of_the_sweep_folder_is_refused(swept, tmp_path, capsys):
    folder = _copy(swept, tmp_path)
    outside = Path(shutil.copytree(folder / "runs/a", tmp_path / "outside"))
    shutil.rmtree(folder / "runs/a")
    (folder / "runs/a").symlink_to(outside, target_is_directory=True)
    code, err = _cli(capsys, "analyze", folder)
    assert code == 2 and "leads out of the sweep folder" in err and err.count("\n") == 1
    assert not (folder / "analysis").exists() and not (outside / "analysis").exists()


@pytest.mark.parametrize("name", ["../x", "x/y", "", ".hidden", "/abs", "a" * 65])
def test_an_output_folder_writes_a_sub_folder_only_by_one_name(tmp_path, name):
    with pytest.raises(OutputFolderError, match="expected a folder name"):
        with output_folder(tmp_path / "out", "test") as staged:
            staged.sub(name)
    assert not (tmp_path / "out").exists()


def test_a_second_sweep_of_a_folder_in_use_is_refused_in_one_line_before_any_model_loads(
        tmp_path, long_model_dir, capsys, monkeypatch):
    path = _toml(tmp_path, [("a", long_model_dir)], SCM)
    loads = Loads()
    monkeypatch.setattr("behavioral.sweep.runner.models.load", loads)
    holder = RunLock(tmp_path / "sweep", 0, "sweep")
    holder.acquire()  # a first sweep, running: the lock is the first thing it takes
    try:
        code, err = _cli(capsys, "sweep", path, "--no-progress")
        written = sorted(p.name for p in (tmp_path / "sweep").iterdir())
    finally:
        holder.release()
    assert code == 2 and err.count("\n") == 1 and loads.calls == [] and written == [".rank000.lock"]
    assert "sweep" in err and "is in use" in err and "pid " in err and "wait for that sweep to finish" in err
    assert _cli(capsys, "sweep", path, "--no-progress", "--no-analyze")[0] == 0  # once it is free, it runs


def test_the_summary_counts_a_run_finished_on_disk_but_not_recorded_as_finished_before(swept, tmp_path,
                                                                                      long_model_dir):
    """A sweep killed after a run's last unit but before sweep.json recorded it: the rerun finds it complete and
    says so, a line per run."""
    folder = _copy(swept, tmp_path)
    _edit_state(folder, lambda data: data.update({"finished": {}}))
    sweep = read_sweep(_toml(tmp_path, [("a", long_model_dir)], SCM, JAEM), folder)
    outcome = run_sweep(sweep, progress=False)
    assert outcome.ran == [] and outcome.skipped == ["a/scm", "a/jaem"]
    assert outcome.describe(2).splitlines() == ["0 runs ran, 2 were finished before, 0 failed, of 2",
                                                "  a/scm: finished before, skipped", "  a/jaem: finished before, skipped"]
    assert set(read_state(folder).finished) == {"a/scm", "a/jaem"}
