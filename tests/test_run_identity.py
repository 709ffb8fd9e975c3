"""Every result part carries the identity of the run that wrote it (issue 32): a part copied in from another run is
refused, naming the file, by `run` (resume), `analyze` and every study; and a part or lock that cannot be read is
one line, exit 2, never pyarrow's message or a write through a link."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from activations import store as activation_store
from activations.store import FOLDER, META
from behavioral.cli import commands as cli
from behavioral.rundir.manifest import MANIFEST, read_manifest
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.parts import (
    RESULTS, RUN_ID, RowLog, UncheckedPartsWarning, read_results, result_schema, seal_logs,
)
from behavioral.analysis.studies import study_names as studies
from behavioral.suite.registry import get_suite
from behavioral.suites.intergroup import Options

PART = "r000-000000.parquet"


def _config(model_dir: Path, capture: tuple[str, ...] = ()) -> RunConfig:
    return RunConfig(suite="intergroup", model=str(model_dir), mode="score", device="cpu", dtype="fp32",
                     batch_size=8, unit_size=4, capture=capture,
                     options=Options(categories=("religion",), settings=("P0S0T0",), limit_events=2))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir, long_model_dir) -> dict[str, Path]:
    """Two finished runs of the same grid with other models (capture on, so every study can read them)."""
    root = tmp_path_factory.mktemp("identity")
    return {name: run(_config(model, ("persona", "final")), root / name, progress=False)
            for name, model in (("a", tiny_model_dir), ("b", long_model_dir))}


def _copy(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to, ignore=shutil.ignore_patterns("analysis", "interp"))
    return to


def _cli(capsys, *argv) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_every_part_is_stamped_with_its_manifests_run_id(runs):
    ids = {name: read_manifest(d).run_id for name, d in runs.items()}
    assert len(set(ids.values())) == 2 and all(len(i) == 32 for i in ids.values())
    for name, run_dir in runs.items():
        parts = sorted((run_dir / RESULTS).glob("*.parquet"))
        assert parts and all(pq.read_schema(p).metadata[RUN_ID.encode()].decode() == ids[name] for p in parts)


def test_a_part_of_another_run_is_refused_by_analyze_naming_it(runs, tmp_path, capsys):
    mixed = _copy(runs["a"], tmp_path / "mixed")
    shutil.copyfile(runs["b"] / RESULTS / PART, mixed / RESULTS / PART)
    code, err = _cli(capsys, "analyze", mixed, "--out", tmp_path / "out", "--permutations", "20")
    assert code == 2 and err.count("\n") == 1
    assert f"{mixed / RESULTS / PART}: was written by run {read_manifest(runs['b']).run_id}" in err
    assert f"this run directory is run {read_manifest(runs['a']).run_id}" in err
    assert not (tmp_path / "out").exists()


def test_a_part_of_another_run_is_refused_on_resume_before_any_row_is_written(runs, tiny_model_dir, tmp_path,
                                                                              capsys):
    mixed = _copy(runs["a"], tmp_path / "mixed")
    shutil.copyfile(runs["b"] / RESULTS / PART, mixed / RESULTS / PART)
    with pytest.raises(ValueError, match="was written by run"):
        run(_config(tiny_model_dir, ("persona", "final")), mixed, progress=False)
    assert sorted(p.name for p in (mixed / RESULTS).iterdir()) == [PART, "r000-seals.json"]


@pytest.mark.parametrize("study", studies())
def test_a_part_of_another_run_is_refused_by_every_study(study, runs, tmp_path, capsys):
    mixed = _copy(runs["a"], tmp_path / "mixed")
    shutil.copyfile(runs["b"] / RESULTS / PART, mixed / RESULTS / PART)
    code, err = _cli(capsys, "interp", study, mixed, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and f"{PART}: was written by run" in err, err
    assert not (tmp_path / "out").exists()


def test_a_row_log_of_another_run_is_refused(runs, tmp_path):
    mixed = _copy(runs["a"], tmp_path / "mixed")
    rows = pq.read_table(runs["b"] / RESULTS / PART).to_pylist()[:3]
    log = RowLog(mixed, result_schema(get_suite("intergroup").fields, read_manifest(runs["b"]).run_id), rank=1)
    log.write(rows)  # a killed process of another run left it unsealed
    assert len(read_results(mixed)) == len(read_results(runs["a"]))  # a reader reads sealed parts alone
    with pytest.raises(ValueError, match=r"r001-000000.arrows: was written by run"):
        seal_logs(mixed, 1)  # what a resume does with a killed process's log


def test_an_unstamped_part_in_a_new_run_and_a_stamped_one_in_an_old_run_are_refused(runs, tmp_path):
    mixed = _copy(runs["a"], tmp_path / "mixed")
    part = mixed / RESULTS / PART
    pq.write_table(pq.read_table(part).replace_schema_metadata(None), part)
    with pytest.raises(ValueError, match=r"carries no run identity, but this run directory is run [0-9a-f]{32}"):
        read_results(mixed)

    old = _copy(runs["a"], tmp_path / "old")  # as a version before run identities and seals left it
    manifest = json.loads((old / MANIFEST).read_text())
    del manifest["run_id"], manifest["seals"]
    (old / MANIFEST).write_text(json.dumps(manifest))
    (old / RESULTS / "r000-seals.json").unlink()
    with pytest.warns(UncheckedPartsWarning), \
            pytest.raises(ValueError, match=r"was written by run [0-9a-f]{32}, but this run directory is a run made "
                                            "before its files carried an identity"):
        read_results(old)
    pq.write_table(pq.read_table(old / RESULTS / PART).replace_schema_metadata(None), old / RESULTS / PART)
    with pytest.warns(UncheckedPartsWarning):
        assert len(read_results(old)) == len(read_results(runs["a"]))  # an old run's own parts carry none


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_an_empty_or_truncated_part_is_one_line_naming_it(damage, runs, tiny_model_dir, tmp_path, capsys):
    damaged = _copy(runs["a"], tmp_path / "damaged")
    part = damaged / RESULTS / PART
    data = part.read_bytes()
    part.write_bytes(b"" if damage == "empty" else data[:len(data) // 2])
    code, err = _cli(capsys, "analyze", damaged, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and f"{part}: not a readable Parquet part" in err, err
    code, err = _cli(capsys, "run", "intergroup", "--model", tiny_model_dir, "--out", damaged, "--mode", "score",
                     "--categories", "religion", "--settings", "P0S0T0", "--limit-events", "2", "--unit-size", "4",
                     "--batch-size", "8", "--capture", "persona,final")
    assert code == 2 and err.count("\n") == 1 and f"{part}: not a readable Parquet part" in err, err


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(tiny_model_dir, tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("do not touch")
    out = tmp_path / "run"
    out.mkdir()
    (out / ".rank000.lock").symlink_to(target)
    code, err = _cli(capsys, "run", "intergroup", "--model", tiny_model_dir, "--out", out, "--mode", "score",
                     "--categories", "religion", "--settings", "P0S0T0", "--limit-events", "2")
    assert code == 2 and err.count("\n") == 1 and ".rank000.lock: is a symbolic link" in err, err
    assert target.read_text() == "do not touch" and not (out / MANIFEST).exists()


def test_the_stamp_survives_sealing_a_log_into_a_part(tmp_path):
    schema = result_schema(get_suite("intergroup").fields, "0" * 32)
    log = RowLog(tmp_path, schema)
    log.write([{"unit_id": "u", "item_id": "e", "sample": 0}])
    log.close()
    (part,) = (tmp_path / RESULTS).glob("*.parquet")
    assert part.suffix == ".parquet" and pq.read_schema(part).metadata[RUN_ID.encode()] == b"0" * 32


# --- the activation store: its shards carry the run's identity too ---------------------------------------------------

def _shard(run_dir: Path) -> Path:
    """The first persona shard's index of a run."""
    return sorted((run_dir / FOLDER).glob("persona--*.parquet"))[0]


def test_activation_shards_and_their_meta_carry_the_run_id(runs):
    for run_dir in runs.values():
        run_id = read_manifest(run_dir).run_id
        assert json.loads((run_dir / FOLDER / META).read_text())["run_id"] == run_id
        indexes = sorted((run_dir / FOLDER).glob("*.parquet"))
        assert indexes and all(pq.read_schema(p).metadata[RUN_ID.encode()].decode() == run_id for p in indexes)


def test_a_shard_of_another_run_is_refused_by_the_studies_and_on_resume(runs, tiny_model_dir, tmp_path, capsys):
    mixed = _copy(runs["a"], tmp_path / "mixed")
    index = _shard(runs["b"])
    for suffix in (".parquet", ".npy"):
        shutil.copyfile(index.with_suffix(suffix), (mixed / FOLDER / index.name).with_suffix(suffix))
    code, err = _cli(capsys, "interp", "clusters", mixed, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and f"{index.name}: was written by run" in err, err
    with pytest.raises(ValueError, match=f"{index.name}: was written by run"):
        run(_config(tiny_model_dir, ("persona", "final")), mixed, progress=False)


def test_another_runs_whole_activation_store_is_refused(runs, tmp_path):
    mixed = _copy(runs["a"], tmp_path / "mixed")
    shutil.rmtree(mixed / FOLDER)
    shutil.copytree(runs["b"] / FOLDER, mixed / FOLDER)
    with pytest.raises(ValueError, match=f"{FOLDER}/{META}: was written by run {read_manifest(runs['b']).run_id}"):
        activation_store.load(mixed)
