"""Suite runs on the tiny model: the grid on disk, resume after a kill, refused reruns, bad input, sharding, T2."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import stat

import pandas as pd
import pytest

import behavioral.runner.run as run_mod
from behavioral.rundir.manifest import MANIFEST, SCHEMA_VERSION, RunDirError
from behavioral.rundir import parts as store
from behavioral.suites.intergroup import rewrite
from behavioral.suites.intergroup.corpus import CorpusError, embedded_events
from behavioral.inference.engine import Engine
from behavioral.suites.intergroup.groups import get_category
from behavioral.inference.models import ModelLoadError
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.parts import RESULTS
from behavioral.suite.registry import get_suite
from behavioral.suites.intergroup import Options
from behavioral.suites.intergroup import results as read_results
from behavioral.suite.work import work_units
from tests.conftest import make_tiny_model

SETTINGS = ("P0S0T0", "P0S1T0")
N_EVENTS = 3
RELIGION = get_category("religion").with_unspecified  # "a person" + 5 religions: 6 x 6 cells
KEY = ["unit_id", "event_id"]


OPTIONS = ("categories", "settings", "events", "limit_events", "rewrite_model")


def _config(model_dir, **changes) -> RunConfig:
    """An intergroup run of the tiny model; `changes` may name RunConfig fields and intergroup Options fields."""
    base = dict(categories=("religion",), settings=SETTINGS, limit_events=N_EVENTS, mode="score", device="cpu",
                dtype="fp32", batch_size=4, unit_size=2,
                max_new_tokens=8) | changes  # the tiny random model never ends a reply: keep generation short
    options = Options(**{k: base.pop(k) for k in OPTIONS if k in base})
    return RunConfig(suite="intergroup", model=str(model_dir), options=options, **base)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(KEY).reset_index(drop=True)


def _snapshot(folder):
    """Every file under `folder` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, tiny_model_dir):
    """One uninterrupted score-mode run: 2 settings x 36 religion cells x 3 events."""
    out = tmp_path_factory.mktemp("baseline") / "run"
    config = _config(tiny_model_dir)
    run(config, out, progress=False)
    return config, out, read_results(out)


@pytest.fixture(scope="module")
def both_rows(tmp_path_factory, tiny_model_dir) -> pd.DataFrame:
    """The rows of one uninterrupted both-mode run of the same grid."""
    out = tmp_path_factory.mktemp("both") / "run"
    return read_results(run(_config(tiny_model_dir, mode="both"), out, progress=False))


# --- what a finished run holds --------------------------------------------------------------------------------

def test_rows_cover_the_grid_once(baseline):
    config, out, rows = baseline
    assert len(rows) == len(RELIGION) ** 2 * N_EVENTS * len(SETTINGS) == 216
    stored = store.read_results(out)
    assert list(stored.columns) == [*store.CORE.names, "setting", "category", "perceiver", "experiencer", "event_id",
                                    "emotion"]
    assert not stored.duplicated(store.KEY).any() and (stored["sample"] == 0).all()
    assert (stored["item_id"] == stored["unit_id"].str.rsplit("|", n=1).str[0] + "|" + stored["event_id"]).all()
    assert not rows.duplicated(KEY).any()
    assert not rows.duplicated(["setting", "perceiver", "experiencer", "event_id"]).any()
    events = get_suite("intergroup").dataset(config).events
    assert set(rows["event_id"]) == {e.event_id for e in events}
    for setting in SETTINGS:
        cells = rows[rows["setting"] == setting].groupby(["perceiver", "experiencer"])["event_id"].nunique()
        assert len(cells) == 36 and (cells == N_EVENTS).all()
        assert set(cells.index.get_level_values(0)) == set(RELIGION)
    assert (rows["category"] == "religion").all()


def test_both_mode_rows_are_the_generate_and_score_rows(baseline, both_rows, tiny_model_dir, tmp_path):
    """Mode both scores and decodes from one prompt forward (Engine.generate_and_score); its rows are the replies of
    a generate run and the scores of a score run."""
    both = _sorted(both_rows)
    generated = _sorted(read_results(run(_config(tiny_model_dir, mode="generate"), tmp_path / "gen", progress=False)))
    scored = _sorted(baseline[2])
    for column in ("response", "intensity", "refused", "truncated"):
        pd.testing.assert_series_equal(both[column], generated[column])
    pd.testing.assert_series_equal(both["score_intensity"], scored["score_intensity"])
    pd.testing.assert_frame_equal(both[["expected_intensity", "numeric_mass"]],
                                  scored[["expected_intensity", "numeric_mass"]], check_exact=False, atol=1e-6)


def test_unit_ids_name_their_cell_and_hold_whole_chunks(baseline):
    config, _, rows = baseline
    for unit_id, group in rows.groupby("unit_id"):
        setting, category, perceiver, experiencer, chunk = unit_id.split("|")
        assert group[["setting", "category", "perceiver", "experiencer"]].drop_duplicates().values.tolist() == [
            [setting, category, perceiver, experiencer]]
        assert len(group) == (config.unit_size if chunk == "0" else N_EVENTS - config.unit_size)
        assert group["event_id"].is_unique
    assert rows["unit_id"].nunique() == 36 * 2 * len(SETTINGS)  # chunks of 2 and 1 events


def test_score_mode_values(baseline):
    _, _, rows = baseline
    assert rows["response"].isna().all()
    assert not rows["refused"].any()
    assert (rows["intensity"] == rows["score_intensity"]).all()
    for setting, top in (("P0S0T0", 100), ("P0S1T0", 10)):
        part = rows[rows["setting"] == setting]
        assert part["expected_intensity"].between(0, top).all()
        assert part["score_intensity"].between(0, top).all()
        assert (part["score_intensity"] == part["score_intensity"].round()).all()
    assert rows["numeric_mass"].between(0, 1).all()


def test_manifest_records_the_run(baseline):
    config, out, _ = baseline
    manifest = json.loads((out / MANIFEST).read_text())
    cfg = manifest["config"]
    assert cfg["model"] == config.model and cfg["suite"] == "intergroup" and cfg["schema"] == SCHEMA_VERSION
    options = cfg["options"]
    assert options["settings"] == list(SETTINGS) and options["categories"] == ["religion"]
    assert cfg["mode"] == "score" and cfg["n_events"] == N_EVENTS and options["limit_events"] == N_EVENTS
    assert cfg["chat_format"] == "system" and cfg["dtype"] == "float32"
    assert cfg["model_hash"]
    assert "batch_size" not in cfg  # speed settings do not decide rows
    assert manifest["model"]["device"] == "cpu"


# --- resume -----------------------------------------------------------------------------------------------------

FLOATS = ["expected_intensity", "numeric_mass"]


def _assert_same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Same prompts and answers; read-out probabilities equal up to float noise (batches may share prefixes
    differently, e.g. after a resume)."""
    got, want = _sorted(got), _sorted(want)
    pd.testing.assert_frame_equal(got.drop(columns=FLOATS), want.drop(columns=FLOATS))
    pd.testing.assert_frame_equal(got[FLOATS], want[FLOATS], check_exact=False, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["score", "both"])
def test_resume_after_a_kill_gives_the_uninterrupted_rows(mode, baseline, both_rows, tiny_model_dir, tmp_path,
                                                          monkeypatch):
    expected = baseline[2] if mode == "score" else both_rows
    if mode == "both":
        assert expected["response"].notna().all()
    out, killed = tmp_path / "run", tmp_path / "killed"
    real_rows = run_mod.Runner.rows
    calls = []

    def dying_rows(self, units):
        if len(calls) == 3:
            shutil.copytree(out, killed)  # what a SIGKILL at this moment leaves on disk: no cleanup ran
            raise KeyboardInterrupt("killed")
        calls.append(len(units))
        return real_rows(self, units)

    monkeypatch.setattr(run_mod.Runner, "rows", dying_rows)
    with pytest.raises(KeyboardInterrupt):
        run(_config(tiny_model_dir, mode=mode), out, progress=False)
    monkeypatch.setattr(run_mod.Runner, "rows", real_rows)

    for crashed in (out, killed):  # an exception unwinding the run, and a hard kill
        store.seal_logs(crashed, 0)  # what the resume does first: a hard kill's rows are in its row log alone
        partial = read_results(crashed)
        assert 0 < len(partial) < len(expected)
        assert not partial.duplicated(KEY).any()
        # a kill during a write can leave a temporary file behind; it must not count
        (crashed / RESULTS / ".r000-deadbeef.parquet.tmp").write_bytes(b"half a parquet file")

        run(_config(tiny_model_dir, mode=mode), crashed, progress=False)
        resumed = read_results(crashed)
        assert len(resumed) == len(expected)
        assert not resumed.duplicated(KEY).any()
        _assert_same_rows(resumed, expected)
        # rows written before the kill are kept as they were
        pd.testing.assert_frame_equal(_sorted(resumed[resumed["unit_id"].isin(partial["unit_id"])]),
                                      _sorted(partial))


def test_completed_rerun_writes_nothing(baseline, monkeypatch):
    config, out, _ = baseline
    before = _snapshot(out)

    def no_rows(self, units):
        raise AssertionError(f"a finished run recomputed {len(units)} units")

    monkeypatch.setattr(run_mod.Runner, "rows", no_rows)
    run(config, out, progress=False)
    # batch size and device only decide speed: a rerun with another batch size is the same run
    run(dataclasses.replace(config, batch_size=7), out, progress=False)
    assert _snapshot(out) == before


@pytest.mark.parametrize("change, key", [
    ({"limit_events": 2}, "limit_events"),
    ({"mode": "generate"}, "mode"),
    ({"settings": ("P0S0T0",)}, "settings"),
    ({"unit_size": 3}, "unit_size"),
    ({"seed": 1}, "seed"),
])
def test_rerun_with_another_config_is_refused_naming_the_difference(baseline, change, key):
    config, out, _ = baseline
    before = _snapshot(out)
    with pytest.raises(RunDirError) as err:
        run(_config(config.model, **change), out, progress=False)
    message = str(err.value)
    assert f"{key}:" in message and str(out) in message
    assert "model_hash" not in message and "chat_format" not in message  # only what differs
    assert _snapshot(out) == before


# --- bad input: a clear error and no output directory -------------------------------------------------------------

def _write_tsv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def short_context_model_dir(tmp_path_factory, tiny_tokenizer):
    folder = tmp_path_factory.mktemp("tiny-64")
    make_tiny_model(len(tiny_tokenizer), max_positions=64).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def _bad_inputs(tiny_model_dir, short_context_model_dir, tmp_path):
    no_column = _write_tsv(tmp_path / "release.tsv", ["emotion", "text_id", "generated_text", "third_person_text"],
                           [["joy", "1", "I won.", "The person won."]])
    no_text_id = _write_tsv(tmp_path / "generation.tsv", ["emotion", "generated_text"], [["joy", "I won."]])
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    return {  # (the run's changes to _config, the error, what its message names)
        "category": ({"categories": ("religion", "nope")}, ValueError, "'nope'"),
        "setting": ({"settings": ("P0S0T0", "P9S0T0")}, ValueError, "'P9S0T0'"),
        "mode": ({"mode": "sample"}, ValueError, "'sample'"),
        "events path": ({"events": str(tmp_path / "missing.tsv")}, CorpusError, str(tmp_path / "missing.tsv")),
        "release column": ({"events": str(no_column)}, CorpusError, "first_person_text"),
        "generation column": ({"events": str(no_text_id)}, CorpusError, "text_id"),
        "context": ({"model": short_context_model_dir}, ValueError, "context of 64"),
        "model path": ({"model": tmp_path / "no-such-model"}, ModelLoadError, str(tmp_path / "no-such-model")),
        "model folder": ({"model": not_a_model}, ModelLoadError, "config.json"),
    }


@pytest.mark.parametrize("case", ["category", "setting", "mode", "events path", "release column",
                                  "generation column", "context", "model path", "model folder"])
def test_bad_input_fails_before_creating_the_run_dir(case, tiny_model_dir, short_context_model_dir, tmp_path):
    changes, error, named = _bad_inputs(tiny_model_dir, short_context_model_dir, tmp_path)[case]
    out = tmp_path / "runs" / "out"
    with pytest.raises(error) as err:
        run(_config(changes.pop("model", tiny_model_dir), **changes), out, progress=False)
    assert named in str(err.value)
    assert not out.exists() and not out.parent.exists()


def test_out_dir_that_is_not_a_run_is_refused_untouched(tiny_model_dir, tmp_path):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "chapter1.tex").write_text("do not touch")
    with pytest.raises(RunDirError) as err:
        run(_config(tiny_model_dir), out, progress=False)
    assert str(out) in str(err.value) and MANIFEST in str(err.value)
    assert sorted(p.name for p in out.iterdir()) == ["chapter1.tex"]


def test_out_path_that_is_a_file_is_refused(tiny_model_dir, tmp_path):
    out = tmp_path / "results.txt"
    out.write_text("x")
    with pytest.raises(RunDirError, match="not a directory"):
        run(_config(tiny_model_dir), out, progress=False)
    assert out.read_text() == "x"


def test_out_parent_not_writable(tiny_model_dir, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user whom chmod does not stop (root)")
        out = locked / "sub" / "out"
        with pytest.raises(RunDirError, match="not writable"):
            run(_config(tiny_model_dir), out, progress=False)
        assert not (locked / "sub").exists()
    finally:
        locked.chmod(stat.S_IRWXU)


# --- sharding ------------------------------------------------------------------------------------------------------

def test_work_units_shards_partition_the_grid():
    events = tuple(embedded_events()[:5])
    options = Options(categories=("religion", "race"), settings=("P0S0T0", "P0S1T0"))
    data = get_suite("intergroup").dataset(RunConfig("intergroup", "m", options))
    data = dataclasses.replace(data, events=events)
    groups = lambda: get_suite("intergroup").groups(data)  # noqa: E731
    single = list(work_units(groups(), 2))
    assert len(single) == 2 * (36 + 19 ** 2) * 3  # 5 events in chunks of 2, 2, 1
    ids = [u.unit_id for u in single]
    assert len(set(ids)) == len(ids)
    shards = [list(work_units(groups(), 2, rank=r, world_size=3)) for r in range(3)]
    shard_ids = [{u.unit_id for u in shard} for shard in shards]
    assert set().union(*shard_ids) == set(ids)
    assert sum(len(s) for s in shard_ids) == len(ids)  # disjoint
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    by_id = {u.unit_id: u for u in single}
    for shard in shards:
        for unit in shard:
            assert unit == by_id[unit.unit_id]  # same id, same cell, same events, whatever the sharding
    assert [u.unit_id for u in work_units(groups(), 2)] == ids  # stable across calls
    assert [u.unit_id for u in work_units(groups(), 2, rank=1, world_size=3)] == [u.unit_id for u in shards[1]]
    for unit in single:
        assert 1 <= len(unit.items) <= 2
        assert unit.unit_id.startswith(unit.group + "|")
    cells: dict[str, list] = {}
    for unit in single:
        cells.setdefault(unit.group, []).extend(item.event for item in unit.items)
    assert len(cells) == 2 * (36 + 19 ** 2)
    for cell_events in cells.values():  # every cell gets every event exactly once
        assert sorted(e.event_id for e in cell_events) == sorted(e.event_id for e in events)


# --- T2: third-person rewrites ---------------------------------------------------------------------------------

@pytest.fixture
def generation_tsv(tmp_path):
    return _write_tsv(tmp_path / "crowd-enVent_generation.tsv",
                      ["text_id", "emotion", "generated_text", "suddenness"],
                      [["7", "joy", "my sister told me she was pregnant", "3"],
                       ["8", "fear", "I heard footsteps behind me on an empty street at night", "5"],
                       ["9", "no-emotion", "I made tea", "1"],
                       ["10", "anger", "when the landlord kept my deposit", "2"]])


def test_t2_rewrites_once_and_reuses_the_cache(tiny_model_dir, generation_tsv, tmp_path, monkeypatch):
    config = _config(tiny_model_dir, settings=("P0S0T2",), events=str(generation_tsv), limit_events=None,
                     unit_size=3, batch_size=8)
    out = tmp_path / "t2"
    run(config, out, progress=False)
    lines = [json.loads(line) for line in (out / rewrite.CACHE).read_text().splitlines()]
    assert sorted(r["event_id"] for r in lines) == ["anger-10", "fear-8", "joy-7"]
    assert all(r["rewrite_model"] == str(tiny_model_dir) for r in lines)
    first = read_results(out)
    assert len(first) == 36 * 3 and set(first["setting"]) == {"P0S0T2"}
    cache = (out / rewrite.CACHE).read_text()

    def no_generation(self, prompts):
        raise AssertionError("the rewrites should have come from rewrites.jsonl")

    monkeypatch.setattr(Engine, "generate", no_generation)
    shutil.rmtree(out / RESULTS)  # make the second run do all the prompts again, from the cached rewrites
    run(config, out, progress=False)
    assert (out / rewrite.CACHE).read_text() == cache
    _assert_same_rows(read_results(out), first)


def test_t2_with_release_text_needs_no_rewrite(tiny_model_dir, tmp_path, monkeypatch):
    def no_generation(self, prompts):
        raise AssertionError("release events carry their third-person text")

    monkeypatch.setattr(Engine, "generate", no_generation)
    out = tmp_path / "t2-release"
    run(_config(tiny_model_dir, settings=("P0S0T2",), limit_events=1, unit_size=1, batch_size=8), out,
        progress=False)
    assert not (out / rewrite.CACHE).exists()
    assert len(read_results(out)) == 36


@pytest.mark.parametrize("reply, expected", [
    ("The person felt x.}", "The person felt x."),
    ("Rewrite: {The person felt joy when they won.}", "The person felt joy when they won."),
    ("{The person is tired.} Text: {next}", "The person is tired."),
    ("  The person is tired.  ", "The person is tired."),
    ("Rewrite: The person left.}\n", "The person left."),
])
def test_extract_rewrite(reply, expected):
    assert rewrite.extract_rewrite(reply) == expected


def test_rewrite_prompt_is_appendix_a2():
    assert rewrite.rewrite_prompt("I felt joy when I won.") == (
        "Rewrite the text.\nExample:\nText: {The person: I am thinking about this situation.}\n"
        "Rewrite: {The person is thinking about this situation.}\n\n"
        "Text: {The person: I felt joy when I won.}\nRewrite: {"
    )
