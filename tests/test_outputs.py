"""A command's output folder: its files replace an earlier output of the same command only, a failure leaves
nothing, a folder the toolkit did not make (or another command's) is never touched; labels of coinciding points stay
readable."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from matplotlib.figure import Figure

from behavioral.analysis.output_folder import OutputFolderError, output_folder
from behavioral.analysis.report import REPORT
from behavioral.analysis.figure_files import label_points


def _files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_an_earlier_output_is_replaced_file_by_file_and_its_manifest_lists_them(tmp_path):
    out = tmp_path / "analysis"
    with output_folder(out, "analyze toy", {"n": 1}) as folder:
        (folder.path / REPORT).write_text("first")
        (folder.path / "tables").mkdir()
        (folder.path / "tables" / "old.csv").write_text("x")
    with output_folder(out, "analyze toy", {"n": 2}) as folder:
        assert folder.path.parent == out and (out / REPORT).read_text() == "first"  # the earlier output stays
        (folder.path / REPORT).write_text("second")
    assert _files(out) == ["manifest.json", REPORT] and (out / REPORT).read_text() == "second"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["output"] == {"command": "analyze toy", "files": [REPORT], "complete": True}
    assert manifest["n"] == 2 and "torch" in manifest["provenance"]["package_versions"]
    assert [p.name for p in tmp_path.iterdir()] == ["analysis"]  # nothing written beside it


def test_a_failure_leaves_the_earlier_output_and_no_new_folder(tmp_path):
    out = tmp_path / "analysis"
    with output_folder(out, "analyze toy") as folder:
        (folder.path / REPORT).write_text("first")
    with pytest.raises(RuntimeError), output_folder(out, "analyze toy") as folder:
        (folder.path / REPORT).write_text("half")
        raise RuntimeError("figure failed")
    assert (out / REPORT).read_text() == "first" and _files(out) == ["manifest.json", REPORT]
    with pytest.raises(RuntimeError), output_folder(tmp_path / "new" / "deeper", "analyze toy"):
        raise RuntimeError("bad input")
    assert [p.name for p in tmp_path.iterdir()] == ["analysis"]  # the folders made for it are gone again


def test_a_folder_holding_a_report_and_a_run_is_never_replaced(tmp_path):
    """The defect: `analyze proj/gie-run --out proj` deleted proj's notes and the run itself because proj held a
    report.md."""
    proj = tmp_path / "proj"
    (proj / "gie-run" / "results").mkdir(parents=True)
    (proj / "gie-run" / "manifest.json").write_text('{"config": {}}')
    (proj / REPORT).write_text("my own report")
    (proj / "notes.txt").write_text("notes")
    before = _files(proj)
    with pytest.raises(OutputFolderError, match="holds gie-run/manifest.json and 2 more, which no empathy-gap output"):
        with output_folder(proj, "analyze giebench"):
            pass
    assert _files(proj) == before and (proj / "notes.txt").read_text() == "notes"


@pytest.mark.parametrize("manifest, message", [
    ({"config": {"suite": "isear"}}, "is a run directory"),
    ({"output": {"command": "study clusters", "files": []}}, "is the output of `study clusters`"),
    ({"analysis": {}}, "lists no files written by an empathy-gap command"),
    ({"analysis": {}, "provenance": {}}, "an output of an older version, whose manifest does not list its files"),
])
def test_a_run_directory_or_another_commands_output_is_refused(tmp_path, manifest, message):
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OutputFolderError, match=message), output_folder(tmp_path, "analyze isear"):
        pass
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest


def test_a_file_the_earlier_output_did_not_write_blocks_the_replacement(tmp_path):
    out = tmp_path / "out"
    with output_folder(out, "study patching") as folder:
        (folder.path / "delta.csv").write_text("1")
    (out / "my_notes.md").write_text("keep me")
    with pytest.raises(OutputFolderError, match="holds my_notes.md, which the earlier `study patching` did not"):
        with output_folder(out, "study patching"):
            pass
    assert (out / "my_notes.md").read_text() == "keep me" and (out / "delta.csv").read_text() == "1"


def test_kept_subfolders_are_left_alone_and_a_folder_with_only_them_is_accepted(tmp_path):
    out = tmp_path / "out"
    (out / "run" / "results").mkdir(parents=True)
    (out / "run" / "manifest.json").write_text('{"config": {}}')
    with output_folder(out, "study clusters", keep=("run",)) as folder:
        (folder.path / "stats.csv").write_text("1")
    with output_folder(out, "study clusters", keep=("run",)) as folder:
        (folder.path / "stats2.csv").write_text("2")
    assert _files(out) == ["manifest.json", "run/manifest.json", "stats2.csv"]


def test_a_kill_while_files_move_leaves_a_folder_a_rerun_can_replace(tmp_path, monkeypatch):
    out = tmp_path / "out"
    with output_folder(out, "analyze toy") as folder:
        (folder.path / "a.csv").write_text("old")
        (folder.path / "b.csv").write_text("old")
    real_replace = os.replace
    moved = []

    def dying_replace(src, dst):
        if moved:
            raise KeyboardInterrupt
        moved.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr("behavioral.analysis.output_folder.os.replace", dying_replace)
    with pytest.raises(KeyboardInterrupt), output_folder(out, "analyze toy") as folder:
        for name in ("a.csv", "c.csv"):
            (folder.path / name).write_text("new")
    monkeypatch.undo()
    entry = json.loads((out / "manifest.json").read_text())["output"]
    assert entry["complete"] is False and entry["files"] == ["a.csv", "b.csv", "c.csv"]
    with output_folder(out, "analyze toy") as folder:
        (folder.path / "c.csv").write_text("newer")
    assert _files(out) == ["c.csv", "manifest.json"]


def test_coinciding_points_get_one_label_naming_each() -> None:
    ax = Figure().subplots()
    points = np.array([[0.0, 0.0], [10.0, 5.0], [10.0, 5.0 + 1e-6], [3.0, 3.0]])
    label_points(ax, points, ["Japan", "the United States", "the United Kingdom", "Egypt"])
    assert sorted(t.get_text() for t in ax.texts) == ["Egypt", "Japan", "the United States, the United Kingdom"]


def test_a_replacement_deletes_only_files_inside_the_folder_whatever_its_manifest_lists(tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text("precious")
    with output_folder(out, "study patching") as folder:
        (folder.path / "delta.csv").write_text("1")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["output"]["files"] += ["../victim.txt", str(victim)]  # a manifest edited or copied from elsewhere
    (out / "manifest.json").write_text(json.dumps(manifest))
    with output_folder(out, "study patching") as folder:
        (folder.path / "other.csv").write_text("2")
    assert victim.read_text() == "precious" and _files(out) == ["manifest.json", "other.csv"]


def test_a_users_folder_named_like_a_staging_folder_is_never_taken_for_one(tmp_path):
    out = tmp_path / "out"
    with output_folder(out, "analyze toy") as folder:
        (folder.path / REPORT).write_text("first")
    (out / ".staging-mine").mkdir()
    (out / ".staging-mine" / "notes.txt").write_text("keep me")
    with pytest.raises(OutputFolderError, match=r"holds .staging-mine/notes.txt"), output_folder(out, "analyze toy"):
        pass
    assert (out / ".staging-mine" / "notes.txt").read_text() == "keep me"
