"""The manifest read through one typed reader (issue 32): every field of the wrong type or range is one line naming
it, exit 2, in every command; and a run made before manifests recorded their plan is read without its model."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from behavioral.cli import commands as cli
from behavioral.inference import models
from behavioral.rundir.manifest import MANIFEST, RunDirError, read_manifest
from behavioral.runner.run import RunConfig, run
from behavioral.runner.reader import read_run
from behavioral.rundir.parts import RESULTS
from behavioral.suite.registry import get_suite
from behavioral.suites.intergroup import Options
from behavioral.suites.intergroup.items import Data

# (field, a value of the wrong type, a value out of range or not allowed); None where no such value exists
BAD = [
    ("config.suite", ["intergroup"], ""),
    ("config.model", 3, ""),
    ("config.mode", ["score"], "sample"),
    ("config.seed", "0", None),
    ("config.temperature", "0", -1),
    ("config.top_p", None, 2),
    ("config.samples", "1", 0),
    ("config.max_new_tokens", 8.5, 0),
    ("config.prompt_format", 1, "html"),
    ("config.unit_size", "4", 0),
    ("config.capture", "final", ["final", 3]),
    ("config.layers", 3, ""),
    ("config.per_cell_samples", "2", -1),
    ("config.store_probs", "no", None),
    ("config.options", ["religion"], None),
    ("config.options.limit_events", "2", 0),
    ("config.options.categories", "religion", None),
    ("config.model_hash", 5, None),
    ("config.revision", [], None),
    ("config.dtype", 16, ""),
    ("config.chat_format", None, ""),
    ("plan", ["units", 36], None),
    ("plan.units", "36", -1),
    ("plan.rows", "36", -5),
    ("run_id", 5, "not-hex"),
    ("model", ["m"], None),
    ("provenance", "yesterday", None),
]
CASES = [(field, value) for field, wrong_type, wrong_range in BAD
         for value in (wrong_type, wrong_range) if value is not None]


def _config(model_dir: Path) -> RunConfig:
    return RunConfig(suite="intergroup", model=str(model_dir), mode="score", device="cpu", dtype="fp32",
                     batch_size=8, unit_size=4, max_new_tokens=8,
                     options=Options(categories=("religion",), settings=("P0S0T0",), limit_events=2))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model_dir) -> Path:
    """A finished score-mode intergroup run of the tiny model: 36 cells × 2 events, a unit per cell."""
    return run(_config(tiny_model_dir), tmp_path_factory.mktemp("finished") / "run", progress=False)


def _copy(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to, ignore=shutil.ignore_patterns("analysis", ".rank*.lock"))
    return to


def _set(data: dict, field: str, value) -> dict:
    """`data` with the dotted `field` set to `value`."""
    *parents, last = field.split(".")
    node = data
    for key in parents:
        node = node[key]
    node[last] = value
    return data


def _edit(run_dir: Path, field: str, value) -> None:
    path = run_dir / MANIFEST
    path.write_text(json.dumps(_set(json.loads(path.read_text()), field, value)))


def _cli(capsys, *argv) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("field, value", CASES, ids=[f"{f}={json.dumps(v)}" for f, v in CASES])
def test_a_manifest_field_of_the_wrong_type_or_range_is_one_line_naming_it(field, value, finished, tmp_path,
                                                                           capsys):
    run_dir = _copy(finished, tmp_path / "run")
    _edit(run_dir, field, value)
    code, err = _cli(capsys, "analyze", run_dir, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1, err
    assert field in err and ("expected" in err or " must " in err) and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_missing_required_field_and_too_few_rows_for_the_units_are_named(finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    _edit(run_dir, "plan", {"units": 36, "rows": 10})
    with pytest.raises(RunDirError, match=r"plan.rows is 10, fewer than plan.units 36"):
        read_manifest(run_dir)
    _edit(run_dir, "plan", {"units": 36})
    with pytest.raises(RunDirError, match=r"plan.rows is null; expected a whole number of at least 0"):
        read_manifest(run_dir)
    data = json.loads((run_dir / MANIFEST).read_text())
    del data["config"]["mode"]
    (run_dir / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(RunDirError, match=r"config has no 'mode'"):
        read_manifest(run_dir)


# the issue's three tracebacks and its accepted negative plan, in every command that reads a run directory
ISSUE = [("plan", ["units", 36]), ("plan.units", "36"), ("config.suite", ["intergroup"]), ("plan.rows", -5)]


@pytest.mark.parametrize("field, value", ISSUE)
@pytest.mark.parametrize("command", ["run", "analyze", "interp"])
def test_every_command_reads_the_manifest_through_the_typed_reader(command, field, value, finished, tiny_model_dir,
                                                                   tmp_path, capsys, monkeypatch):
    run_dir = _copy(finished, tmp_path / "run")
    _edit(run_dir, field, value)
    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("the model loaded before the manifest's check"))
    argv = {"run": ["run", "intergroup", "--model", tiny_model_dir, "--out", run_dir, "--mode", "score",
                    "--categories", "religion", "--settings", "P0S0T0", "--limit-events", "2", "--unit-size", "4"],
            "analyze": ["analyze", run_dir, "--out", tmp_path / "out"],
            "interp": ["interp", "clusters", run_dir, "--out", tmp_path / "out"]}[command]
    before = (run_dir / MANIFEST).read_bytes()
    code, err = _cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and field in err, err
    assert (run_dir / MANIFEST).read_bytes() == before and not (tmp_path / "out").exists()


def test_a_manifest_that_is_a_directory_or_a_fifo_is_one_line(finished, tmp_path, capsys, tiny_model_dir):
    for kind in ("directory", "fifo"):
        run_dir = _copy(finished, tmp_path / kind)
        (run_dir / MANIFEST).unlink()
        if kind == "directory":
            (run_dir / MANIFEST).mkdir()
        else:
            os.mkfifo(run_dir / MANIFEST)
        expected = "a directory" if kind == "directory" else "not a regular file"
        for argv in (["analyze", run_dir, "--out", tmp_path / f"{kind}-out"],
                     ["run", "intergroup", "--model", tiny_model_dir, "--out", run_dir]):
            code, err = _cli(capsys, *argv)
            assert code == 2 and err.count("\n") == 1 and f"{MANIFEST}: is {expected}" in err, err


# --- a run made before manifests recorded their plan -------------------------------------------------------------

def _as_old_run(run_dir: Path) -> Path:
    """`run_dir` as a version before plans, run identities and seals wrote it: no plan, no run_id, no seals, unstamped
    parts."""
    data = json.loads((run_dir / MANIFEST).read_text())
    del data["plan"], data["run_id"], data["seals"]
    (run_dir / MANIFEST).write_text(json.dumps(data))
    (run_dir / RESULTS / "r000-seals.json").unlink()
    for part in (run_dir / RESULTS).glob("*.parquet"):
        pq.write_table(pq.read_table(part).replace_schema_metadata(None), part)
    return run_dir


def test_an_old_complete_run_is_analyzed_without_its_model_or_allow_partial(finished, tmp_path, capsys,
                                                                            monkeypatch):
    old = _as_old_run(_copy(finished, tmp_path / "old"))
    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("reading a finished run loaded its model"))
    _, _, done = read_run(old, "intergroup")
    assert done.complete and done.derived and (done.planned_units, done.planned_rows) == (36, 72)
    assert done.planned_units == read_manifest(finished).plan.units
    code, _ = _cli(capsys, "analyze", old, "--permutations", "20")
    report = (old / "analysis" / "report.md").read_text()
    assert code == 0 and "complete: 36 of 36 work units (72 of 72 rows) (plan derived" in report


def test_an_old_partial_run_is_still_refused_with_the_derived_counts(finished, tmp_path, capsys):
    old = _as_old_run(_copy(finished, tmp_path / "old"))
    table = pq.read_table(next((old / RESULTS).glob("*.parquet")))
    part = next((old / RESULTS).glob("*.parquet"))
    pq.write_table(table.slice(0, 40), part)  # the first 20 of 36 units (a cell's 2 events each)
    code, err = _cli(capsys, "analyze", old)
    assert code == 2 and "is partial: 20 of 36 work units (40 of 72 rows) finished" in err


def test_an_old_run_whose_data_changed_says_its_plan_cannot_be_derived(finished, tmp_path, capsys):
    old = _as_old_run(_copy(finished, tmp_path / "old"))
    _edit(old, "config.events_hash", "0" * 64)
    code, err = _cli(capsys, "analyze", old)
    errors = [line for line in err.splitlines() if not line.startswith("empathy-gap: warning: ")]  # old: unsealed
    assert code == 2 and len(errors) == 1
    assert "cannot be derived: its data are not those the run recorded (events_hash recorded '000" in err
    assert _cli(capsys, "analyze", old, "--allow-partial", "--permutations", "20")[0] == 0
    assert "completeness unknown" in (old / "analysis" / "report.md").read_text()


def test_a_t2_run_derives_its_plan_from_its_rewrites_cache_and_says_when_it_lacks_them(tmp_path):
    suite = get_suite("intergroup")
    config = RunConfig(suite="intergroup", model="unused", mode="score",
                       options=Options(categories=("religion",), settings=("P0S0T2",), limit_events=2))
    data = suite.dataset(config)
    data = Data(data.options, tuple(dataclasses.replace(e, third_person=None) for e in data.events), data.corpus_hash)
    with pytest.raises(ValueError, match=r"rewrites.jsonl: lacks the third-person rewrites of 2 events"):
        suite.prepare(data, config, None, None, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written
    cache = "".join(json.dumps({"event_id": e.event_id, "rewrite_model": "unused", "third_person": "They did."}) + "\n"
                    for e in data.events)
    (tmp_path / "rewrites.jsonl").write_text(cache)
    prepared = suite.prepare(data, config, None, None, tmp_path)
    assert [e.third_person for e in prepared.events] == ["They did.", "They did."]


def test_the_recorded_plan_is_the_plan_a_run_derives(finished):
    from behavioral.runner.plan import derived_plan

    plan = read_manifest(finished).plan
    assert derived_plan(finished, read_manifest(finished)) == plan and (plan.units, plan.rows) == (36, 72)
    assert len(plan.groups) == 36 and all(items == 2 for _, items in plan.groups)  # 6 x 6 cells: 2 events each
