"""Every part a run writes is sealed (issue 47, cases 5 and 6): its sha256 and rows are recorded in its rank's seal
ledger and checked on every read, so an edited, swapped or added part is refused naming the file, however its
metadata was rewritten; an empty part is refused; a run made before seals reads with one warning that its parts
cannot be checked; and a kill at any point of sealing resumes to every row exactly once."""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import behavioral.runner.run as run_mod
from behavioral.cli import commands as cli
from behavioral.rundir import parts as store
from behavioral.rundir.manifest import MANIFEST, RunDirError, read_manifest
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.parts import RESULTS, RUN_ID, RowLog, UncheckedPartsWarning, read_results
from behavioral.suites.intergroup import Options

PART = "r000-000000.parquet"
LEDGER = "r000-seals.json"


def _config(model_dir: Path) -> RunConfig:
    return RunConfig(suite="intergroup", model=str(model_dir), mode="score", device="cpu", dtype="fp32",
                     batch_size=8, unit_size=4,
                     options=Options(categories=("religion",), settings=("P0S0T0",), limit_events=2))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    """Two finished runs of the same grid and model: the same rows, two run identities."""
    root = tmp_path_factory.mktemp("seals")
    return {name: run(_config(tiny_model_dir), root / name, progress=False) for name in ("a", "b")}


def _copy(run_dir: Path, to: Path) -> Path:
    return shutil.copytree(run_dir, to)


def _ledger(run_dir: Path) -> dict:
    return json.loads((run_dir / RESULTS / LEDGER).read_text())


def _cli(capsys, *argv) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _as_legacy(run_dir: Path) -> Path:
    """`run_dir` as a version before run identities and seals wrote it: no run_id, no seals, unstamped parts."""
    data = json.loads((run_dir / MANIFEST).read_text())
    data.pop("run_id"), data.pop("seals", None)
    (run_dir / MANIFEST).write_text(json.dumps(data))
    (run_dir / RESULTS / LEDGER).unlink(missing_ok=True)
    for part in (run_dir / RESULTS).glob("*.parquet"):
        pq.write_table(pq.read_table(part).replace_schema_metadata(None), part)
    return run_dir


def _is_sealed(part: Path) -> bool:
    seal = _ledger(part.parent.parent).get(part.name)
    return seal == {"sha256": hashlib.sha256(part.read_bytes()).hexdigest(), "rows": pq.read_metadata(part).num_rows}


# --- what a run records -------------------------------------------------------------------------------------------

def test_a_runs_manifest_and_ledger_record_its_parts_seals(runs):
    run_dir = runs["a"]
    assert json.loads((run_dir / MANIFEST).read_text())["seals"] == 1
    assert sorted(p.name for p in (run_dir / RESULTS).iterdir()) == [PART, LEDGER]
    assert list(_ledger(run_dir)) == [PART] and _is_sealed(run_dir / RESULTS / PART)


def test_write_part_seals_what_it_writes(runs, tmp_path):
    run_dir = _copy(runs["a"], tmp_path / "run")
    rows = pq.read_table(run_dir / RESULTS / PART).to_pylist()
    (run_dir / RESULTS / PART).unlink()
    schema = pq.read_schema(runs["a"] / RESULTS / PART)
    for name, half in (("first", rows[:10]), ("rest", rows[10:])):
        assert _is_sealed(store.write_part(run_dir, name, half, schema))
    assert len(read_results(run_dir)) == len(rows)


# --- edited, swapped and added parts --------------------------------------------------------------------------------

def test_an_edited_part_that_keeps_its_run_id_is_refused_naming_it(runs, tiny_model_dir, tmp_path, capsys):
    edited = _copy(runs["a"], tmp_path / "edited")
    part = edited / RESULTS / PART
    table = pq.read_table(part)
    column = table.schema.get_field_index("expected")
    table = table.set_column(column, "expected", pa.array([0.5] * table.num_rows))
    pq.write_table(table, part)
    assert pq.read_schema(part).metadata[RUN_ID.encode()] == read_manifest(edited).run_id.encode()
    with pytest.raises(RunDirError, match=f"{part}: its content differs from what this run sealed"):
        read_results(edited)
    code, err = _cli(capsys, "analyze", edited, "--out", tmp_path / "out", "--permutations", "20")
    assert code == 2 and err.count("\n") == 1 and f"{part}: its content differs" in err, err
    with pytest.raises(RunDirError, match="its content differs"):  # on resume, before the model loads
        run(_config(tiny_model_dir), edited, progress=False)
    assert not (tmp_path / "out").exists() and sorted(p.name for p in (edited / RESULTS).iterdir()) == [PART, LEDGER]


def _restamped(part: Path, run_id: str) -> pa.Table:
    """The rows of `part` stamped with another run's identity."""
    table = pq.read_table(part)
    return table.replace_schema_metadata({**table.schema.metadata, RUN_ID.encode(): run_id.encode()})


def test_a_part_of_another_run_restamped_as_this_runs_is_refused_naming_it(runs, tmp_path):
    swapped = _copy(runs["a"], tmp_path / "swapped")
    part = swapped / RESULTS / PART
    pq.write_table(_restamped(runs["b"] / RESULTS / PART, read_manifest(swapped).run_id), part)
    with pytest.raises(RunDirError, match=f"{part}: its content differs from what this run sealed"):
        store.finished_units(swapped)

    added = _copy(runs["a"], tmp_path / "added")
    (added / RESULTS / PART).unlink()
    extra = added / RESULTS / "r000-000001.parquet"
    pq.write_table(_restamped(runs["b"] / RESULTS / PART, read_manifest(added).run_id), extra)
    rows = pq.read_metadata(extra).num_rows
    with pytest.raises(RunDirError, match=rf"{extra}: not sealed by this run \(sha256 [0-9a-f]{{64}}, {rows} rows"):
        read_results(added)


def test_stripping_the_run_id_from_a_sealed_runs_manifest_and_parts_lets_no_part_in(runs, tmp_path):
    stripped = _copy(runs["a"], tmp_path / "stripped")
    data = json.loads((stripped / MANIFEST).read_text())
    del data["run_id"]
    (stripped / MANIFEST).write_text(json.dumps(data))
    part = stripped / RESULTS / PART
    pq.write_table(pq.read_table(runs["b"] / RESULTS / PART).replace_schema_metadata(None), part)
    with pytest.raises(RunDirError, match=f"{part}: its content differs from what this run sealed"):
        read_results(stripped)


def test_a_sealed_run_without_its_ledger_refuses_its_parts_instead_of_reading_them_unchecked(runs, tmp_path):
    run_dir = _copy(runs["a"], tmp_path / "run")
    (run_dir / RESULTS / LEDGER).unlink()
    with pytest.raises(RunDirError, match=f"{run_dir / RESULTS / PART}: not sealed by this run"):
        store.check_parts(run_dir)


def test_a_damaged_ledger_is_one_line_naming_it(runs, tmp_path, capsys):
    run_dir = _copy(runs["a"], tmp_path / "run")
    (run_dir / RESULTS / LEDGER).write_text('{"r000-000000.parquet": {"sha256": "abc"}}')
    code, err = _cli(capsys, "analyze", run_dir, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and f"{run_dir / RESULTS / LEDGER}: not a seal ledger" in err, err


def test_an_exact_copy_of_a_runs_own_part_is_named_as_duplicate_rows(runs, tmp_path):
    run_dir = _copy(runs["a"], tmp_path / "run")
    shutil.copy(run_dir / RESULTS / PART, run_dir / RESULTS / "copied-in.parquet")
    rows = pq.read_metadata(run_dir / RESULTS / PART).num_rows
    with pytest.raises(RunDirError, match=rf"{rows} duplicate rows .* in copied-in.parquet, r000-000000.parquet"):
        read_results(run_dir)


# --- empty parts ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("legacy", [False, True])
def test_an_extra_part_with_no_rows_is_refused_naming_it(legacy, runs, tmp_path):
    run_dir = _copy(runs["a"], tmp_path / "run")
    if legacy:
        _as_legacy(run_dir)
    empty = run_dir / RESULTS / "r000-000001.parquet"
    pq.write_table(pq.read_table(run_dir / RESULTS / PART).slice(0, 0), empty)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncheckedPartsWarning)
        with pytest.raises(RunDirError, match=f"{empty}: holds no rows"):
            read_results(run_dir)
        with pytest.raises(RunDirError, match=f"{empty}: holds no rows"):
            store.check_parts(run_dir)


# --- runs made before seals ---------------------------------------------------------------------------------------

def test_a_run_made_before_seals_reads_with_one_warning_that_its_parts_cannot_be_checked(runs, tmp_path):
    legacy = _as_legacy(_copy(runs["a"], tmp_path / "legacy"))
    with pytest.warns(UncheckedPartsWarning) as caught:
        rows = read_results(legacy)
    assert len(rows) == len(read_results(runs["a"])) and len(caught) == 1
    message = str(caught[0].message)
    assert "\n" not in message and message.startswith(f"{legacy}: made before runs sealed their parts")
    assert "cannot be checked" in message
    # what the warning says: another run's part, unstamped like the run's own, cannot be told from them
    part = legacy / RESULTS / PART
    pq.write_table(pq.read_table(runs["b"] / RESULTS / PART).replace_schema_metadata(None), part)
    with pytest.warns(UncheckedPartsWarning, match="cannot be checked"):
        assert len(read_results(legacy)) == len(rows)


# --- kills while sealing ------------------------------------------------------------------------------------------

class Killed(BaseException):
    """A stand-in for SIGKILL at one point of sealing."""


def _killed_run(config: RunConfig, out: Path, monkeypatch) -> Path:
    """A run killed after its first batch, before it sealed its log: its log of that batch's rows."""
    real_rows, calls = run_mod.Runner.rows, []

    def dying_rows(self, units):
        if calls:
            raise Killed
        calls.append(1)
        return real_rows(self, units)

    with monkeypatch.context() as patch:
        patch.setattr(run_mod.Runner, "rows", dying_rows)
        patch.setattr(RowLog, "close", lambda self: None)  # as after a SIGKILL: the log is never sealed
        with pytest.raises(Killed):
            run(config, out, progress=False)
    [log] = (out / RESULTS).glob("*.arrows")
    return log


def _assert_finished_like(out: Path, expected: Path) -> None:
    """Every row of `expected` exactly once, only sealed parts, read without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = read_results(out)
    assert len(rows) == len(read_results(expected)) and not rows.duplicated(store.KEY).any()
    parts = sorted((out / RESULTS).glob("*.parquet"))
    assert parts and all(_is_sealed(p) for p in parts)
    assert sorted(p.name for p in (out / RESULTS).iterdir()) == sorted([*(p.name for p in parts), LEDGER])


def test_a_kill_after_a_parts_rename_before_its_seal_resumes_to_every_row_once(runs, tiny_model_dir, tmp_path,
                                                                            monkeypatch):
    out = tmp_path / "run"
    log = _killed_run(_config(tiny_model_dir), out, monkeypatch)
    logged = len(store._read_log(log))
    assert logged > 0
    real_write = store._write_file

    def dying_write(path, data):
        if path.name == LEDGER:
            raise Killed
        real_write(path, data)

    with monkeypatch.context() as patch, pytest.raises(Killed):
        patch.setattr(store, "_write_file", dying_write)
        store.seal_logs(out, 0)
    part = log.with_suffix(".parquet")
    assert log.exists() and part.exists() and not (out / RESULTS / LEDGER).exists()
    store.check_parts(out)  # the unsealed part is its log's, unread until the log is resealed
    assert len(read_results(out)) == 0
    run(_config(tiny_model_dir), out, progress=False)
    _assert_finished_like(out, runs["a"])


def test_an_unsealed_part_beside_its_log_is_never_trusted(runs, tiny_model_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    log = _killed_run(_config(tiny_model_dir), out, monkeypatch)
    logged = store._read_log(log)
    other = _restamped(runs["b"] / RESULTS / PART, read_manifest(out).run_id)
    assert other.num_rows > logged.num_rows
    pq.write_table(other, log.with_suffix(".parquet"))  # in the place of the part a kill left unsealed
    assert len(read_results(out)) == 0  # neither the part's rows nor the log's until the log is resealed
    run(_config(tiny_model_dir), out, progress=False)
    _assert_finished_like(out, runs["a"])
    resumed = pq.read_table(log.with_suffix(".parquet"))
    assert resumed.select(store.KEY).equals(logged.select(store.KEY))  # written again from its log


def test_a_kill_after_a_seal_before_its_logs_removal_resumes_to_every_row_once(runs, tiny_model_dir, tmp_path,
                                                                              monkeypatch):
    out = tmp_path / "run"
    log = _killed_run(_config(tiny_model_dir), out, monkeypatch)
    logged = log.read_bytes()
    store.seal_logs(out, 0)
    log.write_bytes(logged)  # the log the kill left beside its sealed part
    assert _is_sealed(log.with_suffix(".parquet"))
    assert len(read_results(out)) == len(store._read_log(log))  # the part's rows, not twice
    run(_config(tiny_model_dir), out, progress=False)
    _assert_finished_like(out, runs["a"])


def test_a_resumed_runs_parts_are_all_sealed(runs, tiny_model_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    _killed_run(_config(tiny_model_dir), out, monkeypatch)
    run(_config(tiny_model_dir), out, progress=False)
    assert len(list((out / RESULTS).glob("*.parquet"))) == 2
    _assert_finished_like(out, runs["a"])
