"""The distribution behind every expected value: each work unit's mean distribution (`unit_probs`) on its first row,
every row's own (`probs`) for small answer sets or with store_probs, the reader that rebuilds each group's mean from
either, and run directories written before `unit_probs` existed."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from behavioral.rundir.manifest import MANIFEST, RunDirError
from behavioral.cli import commands as cli
from behavioral.rundir import parts as store
from behavioral.analysis import analyze
from behavioral.analysis.distributions import group_distributions
from behavioral.runner.run import RunConfig, run
from behavioral.runner.reader import read_run
from behavioral.rundir.parts import RESULTS
from behavioral.suite.registry import get_suite
from behavioral.suites.intergroup import AnalyzeOptions, Options
from behavioral.suite.work import work_units

SETTINGS = ("P0S0T0", "P0S1T0")  # a 0..100 scale (101 labels) and a 0..10 one (11)
LABELS = {"P0S0T0": 101, "P0S1T0": 11}
CELL = ["setting", "perceiver", "experiencer"]  # what a work unit's rows share


def _config(model_dir, **changes) -> RunConfig:
    """A score run of the tiny model: 2 settings x 36 religion cells x 3 events, units of 2 and 1 events."""
    options = Options(categories=("religion",), settings=SETTINGS, limit_events=3)
    return RunConfig(**dict(suite="intergroup", model=str(model_dir), options=options, mode="score", device="cpu",
                            dtype="fp32", batch_size=8, unit_size=2) | changes)


@pytest.fixture(scope="module")
def plain(tmp_path_factory, tiny_model_dir):
    """A score run with the defaults: (config, run dir, rows)."""
    config = _config(tiny_model_dir)
    out = run(config, tmp_path_factory.mktemp("plain") / "run", progress=False)
    return config, out, store.read_results(out)


@pytest.fixture(scope="module")
def kept(tmp_path_factory, tiny_model_dir):
    """The same run with store_probs: (config, run dir, rows)."""
    config = _config(tiny_model_dir, store_probs=True)
    out = run(config, tmp_path_factory.mktemp("kept") / "run", progress=False)
    return config, out, store.read_results(out)


def _first_items(config: RunConfig) -> dict[str, str]:
    """{unit id: the item id of its first item}."""
    suite = get_suite(config.suite)
    return {u.unit_id: u.items[0].item_id for u in work_units(suite.groups(suite.dataset(config)), config.unit_size)}


# --- what a run stores --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["plain", "kept"])
def test_unit_probs_on_the_first_row_of_each_unit_only(which, request):
    config, _, rows = request.getfixturevalue(which)
    firsts = _first_items(config)
    held = rows[rows["unit_probs"].notna()]
    assert sorted(held["unit_id"]) == sorted(firsts)  # exactly one row per unit
    assert (held["item_id"] == held["unit_id"].map(firsts)).all() and (held["sample"] == 0).all()
    for unit_probs, setting in zip(held["unit_probs"], held["setting"]):
        assert len(unit_probs) == LABELS[setting] and sum(unit_probs) == pytest.approx(1, abs=1e-12)


def test_unit_probs_is_the_mean_of_the_units_rows(kept):
    _, _, rows = kept
    for unit, unit_rows in rows.groupby("unit_id"):
        stored = unit_rows["unit_probs"].dropna().iloc[0]
        np.testing.assert_allclose(stored, np.mean(np.stack(unit_rows["probs"]), axis=0), rtol=0, atol=1e-15)


def test_both_mode_keeps_unit_probs_and_generate_mode_none(tiny_model_dir, tmp_path):
    options = Options(categories=("religion",), settings=("P0S0T0",), limit_events=3)
    for mode in ("both", "generate"):
        config = _config(tiny_model_dir, mode=mode, options=options, max_new_tokens=2)
        rows = store.read_results(run(config, tmp_path / mode, progress=False))
        held = rows[rows["unit_probs"].notna()]
        assert sorted(held["unit_id"]) == (sorted(_first_items(config)) if mode == "both" else [])
        assert (held["item_id"] == held["unit_id"].map(_first_items(config))).all()


def test_rows_keep_101_label_probabilities_only_with_store_probs(plain, kept):
    for (_, _, rows), store_probs in ((plain, False), (kept, True)):
        for setting, labels in LABELS.items():
            probs = rows.loc[rows["setting"] == setting, "probs"]
            if labels > 32 and not store_probs:
                assert probs.isna().all()
            else:
                assert probs.map(lambda p: len(p) == labels and abs(sum(p) - 1) < 1e-9).all()
    key = ["unit_id", "item_id"]
    a, b = (r.sort_values(key).reset_index(drop=True) for r in (plain[2], kept[2]))
    np.testing.assert_allclose(a["expected"], b["expected"], rtol=0, atol=1e-12)  # only what is kept differs
    assert (a["score_answer"] == b["score_answer"]).all()


def test_store_probs_is_in_the_manifest_and_a_change_is_refused(kept, tmp_path):
    config, out, _ = kept
    assert json.loads((out / MANIFEST).read_text())["config"]["store_probs"] is True
    assert RunConfig.from_run_dir(out).store_probs is True
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    with pytest.raises(RunDirError, match="store_probs: stored True, now False"):
        run(dataclasses.replace(config, store_probs=False), copy, progress=False)


def test_store_probs_needs_scores(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="--store-probs"):
        run(_config(tiny_model_dir, mode="generate", store_probs=True), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_cli_flag_is_the_config_field(tiny_model_dir):
    argv = ["run", "intergroup", "--model", str(tiny_model_dir), "--out", "x", "--categories", "religion",
            "--settings", "P0S0T0", "--mode", "score"]
    assert cli.run_config(cli._parser(argv).parse_args(argv)).store_probs is False
    assert cli.run_config(cli._parser(argv).parse_args([*argv, "--store-probs"])).store_probs is True


# --- the reader ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("by", [CELL, ["setting", "perceiver"], ["setting"]])
def test_unit_probs_and_row_probs_give_the_same_group_distributions(kept, by):
    _, _, rows = kept
    from_units = group_distributions(rows, by)
    from_rows = group_distributions(rows.assign(unit_probs=None), by)
    groups = dict(list(rows.groupby(by)))
    assert from_units.keys() == from_rows.keys() == groups.keys()
    for key, (dist, n) in from_units.items():
        np.testing.assert_allclose(dist, from_rows[key][0], rtol=0, atol=1e-12)
        group = groups[key]
        assert n == from_rows[key][1] == len(group)
        assert dist @ np.arange(len(dist)) == pytest.approx(group["expected"].mean(), rel=0, abs=1e-9)


def test_units_spanning_groups_need_row_probs(plain, kept):
    by = ["setting", "event_id"]  # a unit holds two events
    with pytest.raises(ValueError, match=r"work unit '.*P0S0T0\|.*' spans several groups"):
        group_distributions(plain[2], by)
    groups = dict(list(kept[2].groupby(by)))
    got = group_distributions(kept[2], by)
    assert got.keys() == groups.keys()
    for key, (dist, n) in got.items():
        group = groups[key]
        assert n == len(group) == 36
        np.testing.assert_allclose(dist, np.mean(np.stack(group["probs"]), axis=0), rtol=0, atol=1e-12)


def test_groups_without_any_distribution_are_absent(plain):
    rows = plain[2].assign(unit_probs=None)  # the 101-label rows keep no probs of their own
    got = group_distributions(rows, CELL)
    assert {key[0] for key in got} == {"P0S1T0"} and len(got) == 36
    assert all(n == 3 and len(dist) == 11 for dist, n in got.values())


# --- runs made before unit_probs ----------------------------------------------------------------------------------

def _make_old(out) -> None:
    """Rewrite a run directory as an earlier version left it: parts without unit_probs, no store_probs setting, no
    seals."""
    for part in (out / RESULTS).glob("*.parquet"):
        pq.write_table(pq.read_table(part).drop_columns(["unit_probs"]), part)
    (out / RESULTS / "r000-seals.json").unlink()
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["config"]["store_probs"], manifest["seals"]
    (out / MANIFEST).write_text(json.dumps(manifest))


def test_an_old_run_reads_and_analyzes(plain, tmp_path):
    _, out, rows = plain
    old = tmp_path / "old"
    shutil.copytree(out, old)
    _make_old(old)
    stored = store.read_results(old)
    assert list(stored.columns) == list(rows.columns) and stored["unit_probs"].isna().all()
    _, viewed, done = read_run(old, "intergroup")
    assert done.complete and len(viewed) == len(rows)
    report = analyze([old], tmp_path / "analysis", AnalyzeOptions(permutations=20))
    assert report.is_file()


def test_an_old_run_resumes_and_its_new_parts_read(plain, tmp_path):
    config, out, rows = plain
    old = tmp_path / "old"
    shutil.copytree(out, old)
    _make_old(old)
    (part,) = (old / RESULTS).glob("*.parquet")
    table = pq.read_table(part)
    units = sorted(set(table.column("unit_id").to_pylist()))
    done = units[::2]
    pq.write_table(table.filter(np.isin(table.column("unit_id").to_numpy(zero_copy_only=False), done)), part)

    run(config, old, progress=False)  # resumes: the stored manifest lacks store_probs, which it ran without
    parts = sorted((old / RESULTS).glob("*.parquet"))
    assert ["unit_probs" in pq.read_schema(p).names for p in parts] == [False, True]  # old part, then the new one
    resumed = store.read_results(old)
    assert len(resumed) == len(rows) and not resumed.duplicated(store.KEY).any()
    held = resumed.loc[resumed["unit_probs"].notna(), "unit_id"]
    assert sorted(held) == sorted(set(units) - set(done))  # the new units' first rows only
    key = ["unit_id", "item_id"]
    a, b = (r.sort_values(key).reset_index(drop=True) for r in (resumed, rows))
    np.testing.assert_allclose(a["expected"], b["expected"], rtol=0, atol=1e-6)
    assert read_run(old, "intergroup")[2].complete


# --- the storage benchmark ----------------------------------------------------------------------------------------

def test_storage_benchmark_orders_the_costs(tmp_path, monkeypatch, capsys):
    from tests.benchmarks import bench_probs_storage as bench

    monkeypatch.setattr("sys.argv", ["bench", "--rows", "3840", "--out", str(tmp_path / "out.json")])
    bench.main()
    table = {row["way"]: row["bytes"] for row in json.loads((tmp_path / "out.json").read_text())["table"]}
    assert list(table) == list(bench.WAYS)
    none, unit12, unit32, per_row = table.values()
    assert none < unit32 < unit12 < per_row
    assert per_row - unit32 > 3840 * 101 * 8 * 0.9  # per-row floats barely compress
    assert "| per-row probs" in capsys.readouterr().out
