"""The toy suite of docs/ADDING_A_SUITE.md, taken from the page itself, runs end to end on the tiny model: closed
labels in score mode, seeded samples that do not depend on the batch, resume, analyze."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from behavioral.cli import commands as cli
from behavioral.rundir import parts as store
from behavioral.suite.registry import get_suite, names, registered

PAGE = Path(__file__).resolve().parents[1] / "docs" / "ADDING_A_SUITE.md"


@pytest.fixture(scope="module")
def mood():
    """The page's first Python block, run as a module, its suite registered."""
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 50
    module = types.ModuleType("mood_suite")
    sys.modules[module.__name__] = module
    exec(compile(code, str(PAGE), "exec"), module.__dict__)
    with registered(module.SUITE) as suite:
        yield suite
    del sys.modules[module.__name__]


def _run(model_dir, out, *extra):
    return ["run", "mood", "--model", str(model_dir), "--mode", "both", "--temperature", "1", "--samples", "3",
            "--max-new-tokens", "4", "--device", "cpu", "--dtype", "fp32", "--unit-size", "2", "--out", str(out),
            "--no-progress", *extra]


def test_the_pages_suite_runs_resumes_and_analyzes(mood, tiny_model_dir, tmp_path, capsys):
    assert "mood" in names() and get_suite("mood") is mood
    assert cli.main(["suites"]) == 0
    assert "toy: happy or sad" in capsys.readouterr().out

    out = tmp_path / "mood"
    assert cli.main(_run(tiny_model_dir, out, "--batch-size", "16")) == 0
    rows = store.read_results(out)
    assert len(rows) == 2 * 3 * 3  # people x events x samples
    assert sorted(rows.groupby("item_id")["sample"].apply(list).iloc[0]) == [0, 1, 2]
    assert list(rows.columns[-2:]) == ["person", "event"]
    assert rows["score_answer"].isin(["happy", "sad"]).all()
    assert rows["probs"].map(lambda p: len(p) == 2 and abs(sum(p) - 1) < 1e-9).all()
    assert rows["expected"].between(0, 1).all() and (rows["valid_mass"] > 0).all()
    parsed = rows["answer"].notna()
    assert (rows.loc[parsed, "answer"].isin(["happy", "sad"])).all() and (rows["refused"] == ~parsed).all()
    samples = rows.set_index(["item_id", "sample"])["response"]
    assert samples.groupby(level=0).nunique().max() > 1  # sampled, not greedy

    parts = sorted((out / store.RESULTS).iterdir())
    assert cli.main(_run(tiny_model_dir, out, "--batch-size", "16")) == 0  # resume: nothing left to do
    assert sorted((out / store.RESULTS).iterdir()) == parts

    other = tmp_path / "mood-batch-1"
    assert cli.main(_run(tiny_model_dir, other, "--batch-size", "1")) == 0
    again = store.read_results(other).set_index(["item_id", "sample"])["response"]
    assert again.sort_index().equals(samples.sort_index())  # each sample's stream is its own

    capsys.readouterr()
    assert cli.main(["analyze", str(out)]) == 0
    report = out / "analysis" / "report.md"
    assert str(report) in capsys.readouterr().out
    assert "Share of happy" in report.read_text()
    share = pd.read_csv(out / "analysis" / "share_happy.csv").set_index("person")
    for person, group in rows.groupby("person"):
        assert share.loc[person, "value"] == pytest.approx(group["value"].mean(), nan_ok=True)  # NaN: none parsed
        assert share.loc[person, "expected"] == pytest.approx(group["expected"].mean())
