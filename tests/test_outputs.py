"""An analysis folder appears whole or not at all, and never replaces a folder that is not an earlier analysis;
labels of coinciding points stay readable."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from behavioral.outputs import REPORT, label_points, staged_dir


def test_staged_dir_replaces_an_earlier_analysis_whole(tmp_path):
    out = tmp_path / "analysis"
    with staged_dir(out) as tmp:
        (tmp / REPORT).write_text("first")
        (tmp / "old.csv").write_text("x")
    with staged_dir(out) as tmp:
        assert tmp != out and (out / REPORT).read_text() == "first"  # the earlier output stays until the end
        (tmp / REPORT).write_text("second")
    assert sorted(p.name for p in out.iterdir()) == [REPORT] and (out / REPORT).read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["analysis"]  # no staging or trash folders left


def test_a_failure_leaves_the_earlier_output_and_no_staging_folder(tmp_path):
    out = tmp_path / "analysis"
    with staged_dir(out) as tmp:
        (tmp / REPORT).write_text("first")
    with pytest.raises(RuntimeError), staged_dir(out) as tmp:
        (tmp / REPORT).write_text("half")
        raise RuntimeError("figure failed")
    assert (out / REPORT).read_text() == "first" and [p.name for p in tmp_path.iterdir()] == ["analysis"]


def test_a_folder_that_is_not_an_analysis_is_never_replaced(tmp_path):
    (tmp_path / "paper.tex").write_text("draft")
    with pytest.raises(ValueError, match="not an earlier analysis"), staged_dir(tmp_path):
        pass
    assert (tmp_path / "paper.tex").read_text() == "draft"
    with staged_dir(tmp_path / "empty") as tmp:  # a new folder is fine
        (tmp / REPORT).write_text("ok")


def test_coinciding_points_get_one_label_naming_each() -> None:
    ax = Figure().subplots()
    points = np.array([[0.0, 0.0], [10.0, 5.0], [10.0, 5.0 + 1e-6], [3.0, 3.0]])
    label_points(ax, points, ["Japan", "the United States", "the United Kingdom", "Egypt"])
    assert sorted(t.get_text() for t in ax.texts) == ["Egypt", "Japan", "the United States, the United Kingdom"]
