"""A run directory or sweep folder from a stranger, read as one: only regular files are read (a FIFO, a device or a
link to one is one line, never a hang), records past their size limit are refused, rows come only from sealed parts
whose work units the plan holds (each once, with its planned rows), a row log never stands in for a sealed part,
every stored value is checked against its column's range (named with its file and row) even after a part and its
seal were edited together, a manifest cannot drop its seals while ledgers seal its parts, a planted symlink never
carries an output folder's writes elsewhere, and a kill during an analysis's first commit leaves a folder the rerun
finishes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from behavioral.cli import commands as cli
from behavioral.analysis import output_folder
from behavioral.rundir import parts as store
from behavioral.rundir.manifest import MANIFEST, RunDirError
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.parts import RESULTS, read_results
from behavioral.suites.intergroup import Options

PART = "r000-000000.parquet"
LEDGER = "r000-seals.json"
ROWS = 72  # 6 x 6 religion cells x 2 events


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model_dir) -> Path:
    """A finished intergroup score run of the tiny model: 36 units of 2 rows, one sealed part."""
    config = RunConfig(suite="intergroup", model=str(tiny_model_dir), mode="score", device="cpu", dtype="fp32",
                       unit_size=2, options=Options(categories=("religion",), settings=("P0S0T0",), limit_events=2))
    return run(config, tmp_path_factory.mktemp("shared") / "run", progress=False)


@pytest.fixture(autouse=True)
def no_hang():
    """A read that blocks (a FIFO) fails the test after 120 s instead of hanging the suite."""
    def stop(*_):
        raise TimeoutError("the read blocked")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _copy(run_dir: Path, to: Path) -> Path:
    return shutil.copytree(run_dir, to)


def _cli(capsys, *argv) -> tuple[int, list[str]]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err.splitlines()


def _reseal(part: Path, table: pa.Table) -> None:
    """Write `table` as `part` and record its seal in the ledger as the run would: an edit no hash can catch."""
    pq.write_table(table, part)
    ledger = part.parent / LEDGER
    seals = json.loads(ledger.read_text())
    seals[part.name] = {"sha256": hashlib.sha256(part.read_bytes()).hexdigest(), "rows": table.num_rows}
    ledger.write_text(json.dumps(seals))


def _edited(run_dir: Path, column: str, value, row: int = 5) -> Path:
    """The run with one cell of its part set to `value`, part and seal edited together."""
    part = run_dir / RESULTS / PART
    table = pq.read_table(part)
    cells = table.column(column).to_pylist()
    cells[row] = value
    i = table.schema.get_field_index(column)
    _reseal(part, table.set_column(i, table.schema.field(i), pa.array(cells, table.schema.field(i).type)))
    return run_dir


# --- values checked where they are read ---------------------------------------------------------------------------

@pytest.mark.parametrize("column, value, expected", [
    ("tree_nodes", -5, "expected a count of the tree's nodes (0 to "),
    ("tree_nodes", 10 ** 6, "expected a count of the tree's nodes (0 to "),
    ("expected_bound", float("nan"), "expected a finite bound of at least 0 where the tree was read"),
    ("expected_bound", float("inf"), "expected a finite bound of at least 0 where the tree was read"),
    ("probs_bound", 7.5, "expected a finite bound of at least 0 and at most 1 where the tree was read"),
    ("entropy_bound", -1.0, "expected a finite bound of at least 0 where the tree was read"),
    ("valid_mass", 2.0, "expected a probability (0 to 1) or null"),
    ("start_mass", -0.5, "expected a probability (0 to 1) or null"),
    ("expected", 250.0, "expected a value within the answers' 0 to 100, or null"),
    ("unit_probs", [0.5, 0.5], "expected null, or one probability per label of an answer set (101 labels) summing "
                               "to 1"),
    ("unit_probs", [1.0] + [0.0] * 100 + [], None),  # a distribution of the right length is a value it may hold
    ("unit_probs", [0.5] * 101, "summing to 1"),
    ("sample", 3, "expected a sample index below 1"),
])
def test_an_impossible_value_is_refused_naming_its_file_row_and_column(finished, tmp_path, capsys, column, value,
                                                                       expected):
    row = 0 if column == "unit_probs" else 5  # unit_probs: a unit's first row
    run_dir = _edited(_copy(finished, tmp_path / "run"), column, value, row)
    if expected is None:
        assert len(read_results(run_dir)) == ROWS
        return
    with pytest.raises(RunDirError) as refused:
        read_results(run_dir)
    message = str(refused.value)
    assert message.startswith(f"{run_dir / RESULTS / PART}: row {row} (unit 'P0S0T0|religion|") and column in message
    assert expected in message
    code, err = _cli(capsys, "analyze", run_dir, "--out", tmp_path / "out")
    assert code == 2 and len(err) == 1 and not (tmp_path / "out").exists()
    code, err = _cli(capsys, "export", run_dir, "--to", tmp_path / "dataset")
    assert code == 2 and len(err) == 1 and not (tmp_path / "dataset").exists()


def test_an_infinite_temperature_in_a_manifest_is_refused(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path / "run")
    text = (run_dir / MANIFEST).read_text().replace('"temperature": 0.0', '"temperature": Infinity')
    (run_dir / MANIFEST).write_text(text)
    code, err = _cli(capsys, "analyze", run_dir)
    assert code == 2 and err == [f"empathy-gap: error: {run_dir / MANIFEST}: config.temperature is Infinity; expected "
                                 "a finite number (is the manifest damaged or edited?)"]


# --- only what the plan holds is counted ---------------------------------------------------------------------------

def _forged_part(run_dir: Path, name: str, rank: int, units: str) -> Path:
    """A part of this run's rows with invented unit ids (or copied ones), sealed in its own rank's ledger."""
    table = pq.read_table(run_dir / RESULTS / PART)
    ids = pc.binary_join_element_wise(table.column("unit_id"), pa.scalar(units), "")
    table = table.set_column(0, table.schema.field(0), ids)
    part = run_dir / RESULTS / name
    pq.write_table(table, part)
    ledger = run_dir / RESULTS / f"r{rank:03d}-seals.json"
    ledger.write_text(json.dumps({name: {"sha256": hashlib.sha256(part.read_bytes()).hexdigest(),
                                         "rows": table.num_rows}}))
    return part


def test_an_extra_sealed_part_of_invented_units_is_refused(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path / "run")
    part = _forged_part(run_dir, "r009-000000.parquet", 9, "-x")
    code, err = _cli(capsys, "analyze", run_dir)
    assert code == 2 and err == [f"empathy-gap: error: {part}: holds work unit 'P0S0T0|religion|a person|a person|0-x'"
                                 ", which the run's plan does not; expected only the planned units' rows (was the part "
                                 "forged or copied in?): move it away"]
    assert not (run_dir / "analysis").exists()


def test_a_planned_unit_in_two_parts_is_refused(finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    table = pq.read_table(run_dir / RESULTS / PART)
    extra = table.slice(0, 1).set_column(1, table.schema.field(1), pa.array(["other"], pa.string()))
    part = run_dir / RESULTS / "r009-000000.parquet"
    pq.write_table(extra, part)
    (run_dir / RESULTS / "r009-seals.json").write_text(json.dumps(
        {part.name: {"sha256": hashlib.sha256(part.read_bytes()).hexdigest(), "rows": 1}}))
    with pytest.raises(RunDirError, match=r"holds work unit 'P0S0T0\|religion\|a person\|a person\|0', which "
                                          r"r000-000000.parquet holds too|r000-000000.parquet: holds work unit"):
        read_results(run_dir)


def test_a_unit_with_other_rows_than_planned_is_refused(finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    part = run_dir / RESULTS / PART
    table = pq.read_table(part)
    _reseal(part, table.slice(1))  # the first unit's first row dropped, the seal made to match
    with pytest.raises(RunDirError, match=r"holds 1 rows of work unit 'P0S0T0\|religion\|a person\|a person\|0', "
                                          r"whose plan has 2"):
        read_results(run_dir)


def test_a_row_log_with_invented_units_is_never_counted(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path / "run")
    forged = _forged_part(run_dir, "r009-000000.parquet", 9, "-x")
    log = store.RowLog(run_dir, pq.read_table(forged).schema, rank=9)
    log.write(pq.read_table(forged).to_pylist())
    forged.unlink()
    (run_dir / RESULTS / "r009-seals.json").unlink()
    assert len(read_results(run_dir)) == ROWS  # the log is not read: 36 of 36 units, not 72
    code, err = _cli(capsys, "analyze", run_dir, "--permutations", "20")
    assert code == 0
    assert "complete: 36 of 36 work units (72 of 72 rows)" in (run_dir / "analysis/report.md").read_text()


def test_a_row_log_never_stands_in_for_a_deleted_sealed_part(finished, tmp_path, capsys, tiny_model_dir):
    run_dir = _copy(finished, tmp_path / "run")
    part = run_dir / RESULTS / PART
    table = pq.read_table(part)
    tampered = table.set_column(table.schema.get_field_index("expected"), "expected",
                                pa.array([0.0] * table.num_rows))
    part.unlink()
    log = store.RowLog(run_dir, table.schema, rank=0)
    log.path = part.with_suffix(".arrows")  # in the deleted part's place
    log.write(tampered.to_pylist())
    code, err = _cli(capsys, "analyze", run_dir)
    assert code == 2 and err == [f"empathy-gap: error: {run_dir}: holds no results yet; run it first (rerun its "
                                 "command to resume)"]  # the log's rows are not the deleted part's
    with pytest.raises(RunDirError, match=rf"{PART}: sealed by this run but missing, and r000-000000.arrows stands in "
                                          "its place"):
        store.seal_logs(run_dir, 0)  # what the resume does first
    assert not part.exists()


# --- seals, downgraded ------------------------------------------------------------------------------------------------

def test_a_manifest_whose_seals_were_removed_while_ledgers_seal_its_parts_is_refused(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path / "run")
    data = json.loads((run_dir / MANIFEST).read_text())
    del data["seals"]
    (run_dir / MANIFEST).write_text(json.dumps(data))
    code, err = _cli(capsys, "analyze", run_dir)
    assert code == 2 and err == [f"empathy-gap: error: {run_dir / MANIFEST}: records no seals, but {LEDGER} seals "
                                 "its parts; expected the manifest of the run that sealed them (was \"seals\" "
                                 "removed from it?)"]


def test_a_run_made_before_seals_says_so_on_its_report_and_in_the_analysis_manifest(finished, tmp_path, capsys,
                                                                                   tiny_model_dir):
    run_dir = _copy(finished, tmp_path / "run")
    data = json.loads((run_dir / MANIFEST).read_text())
    del data["seals"]
    (run_dir / MANIFEST).write_text(json.dumps(data))
    (run_dir / RESULTS / LEDGER).unlink()
    code, err = _cli(capsys, "analyze", run_dir, "--permutations", "20")
    unchecked = "its parts are unchecked (made before runs sealed their parts"
    assert code == 0 and unchecked in (run_dir / "analysis/report.md").read_text()
    record = json.loads((run_dir / "analysis" / MANIFEST).read_text())
    assert all(unchecked in r["completeness"] for r in record["runs"].values())
    (run_dir / RESULTS / PART).unlink()  # its units to compute again: the resume keeps the run as it was made
    code, err = _cli(capsys, "run", "intergroup", "--model", tiny_model_dir, "--out", run_dir, "--mode", "score",
                     "--device", "cpu", "--dtype", "fp32", "--unit-size", "2", "--categories", "religion",
                     "--settings", "P0S0T0", "--limit-events", "2", "--no-progress")
    assert code == 0 and len(read_results(run_dir)) == ROWS and not (run_dir / RESULTS / LEDGER).exists()


# --- only regular files, of a bounded size ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", [LEDGER, PART, "r000-000001.arrows", MANIFEST])
@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "link to a FIFO"])
def test_a_fifo_device_or_link_in_a_run_directory_is_one_line_not_a_hang(finished, tmp_path, capsys, name, kind):
    run_dir = _copy(finished, tmp_path / "run")
    path = run_dir / (name if name == MANIFEST else f"{RESULTS}/{name}")
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(tmp_path / "fifo")
        path.symlink_to(tmp_path / "fifo")
    for argv in (["analyze", run_dir, "--out", tmp_path / "out"], ["export", run_dir, "--to", tmp_path / "data"]):
        code, err = _cli(capsys, *argv)
        if name.endswith(".arrows"):  # a log is not read by an analysis
            assert code == 0
            continue
        assert code == 2 and len(err) == 1 and str(path) in err[0], err
        assert "is not a regular file" in err[0] or "is a symbolic link" in err[0]
    with pytest.raises(RunDirError, match="is not a regular file|is a symbolic link"):
        store.seal_logs(run_dir, 0) if name.endswith(".arrows") else store.check_parts(run_dir)


def test_a_ledger_past_its_size_limit_is_refused_unread(finished, tmp_path):
    run_dir = _copy(finished, tmp_path / "run")
    with open(run_dir / RESULTS / LEDGER, "r+b") as f:
        f.truncate(65 * 2 ** 20)  # sparse: nothing is written, and nothing should be read
    with pytest.raises(RunDirError, match=r"holds 68,157,440 bytes, more than the 67,108,864 such a file may"):
        read_results(run_dir)


# --- output folders that a planted link cannot redirect --------------------------------------------------------------

def test_a_planted_analysis_link_never_redirects_the_analysis(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path / "run")
    theirs = tmp_path / "users-other-analysis"
    assert _cli(capsys, "analyze", finished, "--out", theirs, "--permutations", "20")[0] == 0
    before = {p: p.read_bytes() for p in theirs.rglob("*") if p.is_file()}
    for target in (theirs, tmp_path / "empty"):
        target.mkdir(exist_ok=True)
        (run_dir / "analysis").unlink(missing_ok=True)
        (run_dir / "analysis").symlink_to(target)
        code, err = _cli(capsys, "analyze", run_dir, "--permutations", "20")
        assert code == 2 and err == [f"empathy-gap: error: --out {run_dir / 'analysis'}: is a symbolic link, which "
                                     "would carry the writes elsewhere; expected a folder of its own (name the folder "
                                     "it points to as --out if that is where you want them)"]
    assert {p: p.read_bytes() for p in theirs.rglob("*") if p.is_file()} == before
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_run_directory_or_its_results_as_a_link_is_refused(finished, tmp_path, capsys, tiny_model_dir):
    args = ["run", "intergroup", "--model", tiny_model_dir, "--mode", "score", "--device", "cpu", "--dtype", "fp32",
            "--unit-size", "2", "--categories", "religion", "--settings", "P0S0T0", "--limit-events", "2"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "linked"
    linked.symlink_to(elsewhere)
    code, err = _cli(capsys, *args, "--out", linked)
    assert code == 2 and err == [f"empathy-gap: error: --out {linked}: is a symbolic link, which would carry the "
                                 "run's writes elsewhere; expected a run directory of its own files"]
    run_dir = _copy(finished, tmp_path / "run")
    shutil.move(run_dir / RESULTS, elsewhere / RESULTS)
    (run_dir / RESULTS).symlink_to(elsewhere / RESULTS)
    code, err = _cli(capsys, *args, "--out", run_dir)
    assert code == 2 and err == [f"empathy-gap: error: --out {run_dir}: holds results as a symbolic link, which would "
                                 "carry the run's writes elsewhere; expected a run directory of its own files"]
    assert list(elsewhere.iterdir()) == [elsewhere / RESULTS]


def test_a_kill_during_the_first_commit_leaves_a_folder_the_rerun_finishes(finished, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    real = os.replace
    moved = []

    def dying(src, dst):
        if Path(dst).parent.name != "out" or Path(dst).name == MANIFEST or len(moved) < 2:
            moved.append(dst)
            return real(src, dst)
        raise KeyboardInterrupt  # as a kill between two of the first commit's files

    with monkeypatch.context() as patch:
        patch.setattr(output_folder.os, "replace", dying)
        assert _cli(capsys, "analyze", finished, "--out", out, "--permutations", "20")[0] == 130
    assert any(p.is_file() for p in out.iterdir())  # the files moved before the kill stay
    assert _cli(capsys, "analyze", finished, "--out", out, "--permutations", "20")[0] == 0
    record = json.loads((out / MANIFEST).read_text())["output"]
    assert record["complete"] and sorted(record["files"]) == sorted(
        p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != MANIFEST)


def _swept(tmp_path: Path, model_dir: Path):
    """A finished one-run sweep (the tiny model, one religion cell grid of one event) in tmp_path/sweep."""
    from behavioral.sweep.config import read_sweep
    from behavioral.sweep.runner import run_sweep

    path = tmp_path / "sweep.toml"
    path.write_text(f'out = "{tmp_path / "sweep"}"\n[run]\ndevice = "cpu"\ndtype = "fp32"\n[[model]]\nname = "m"\n'
                    f'id = "{model_dir}"\n[suite.intergroup]\nmode = "score"\noptions = {{ categories = '
                    '["religion"], settings = ["P0S0T0"], limit_events = 1 }\n')
    sweep = read_sweep(path)
    run_sweep(sweep, progress=False)
    return sweep


def test_a_sweeps_analysis_out_inside_one_of_its_runs_is_refused(tmp_path, capsys, tiny_model_dir):
    _swept(tmp_path, tiny_model_dir)
    inside = tmp_path / "sweep/runs/m/intergroup/results/x"
    code, err = _cli(capsys, "analyze", tmp_path / "sweep", "--out", inside)
    assert code == 2 and len(err) == 1 and f"--out {inside}: is inside the run directory" in err[0]
    assert not inside.exists()


def test_another_run_of_the_same_model_and_suite_in_a_sweep_slot_is_refused(tmp_path, capsys, tiny_model_dir):
    sweep = _swept(tmp_path, tiny_model_dir)
    slot = tmp_path / "sweep/runs/m/intergroup"
    other = run(sweep.runs[0].config, tmp_path / "other", progress=False)  # the same settings, another run
    shutil.rmtree(slot)
    shutil.copytree(other, slot)
    for argv in (["analyze", tmp_path / "sweep"], ["export", tmp_path / "sweep", "--to", tmp_path / "dataset"]):
        code, err = _cli(capsys, *argv)
        assert code == 2 and len(err) == 1 and err[0].startswith(f"empathy-gap: error: {slot}: holds run ")
        assert "but sweep.json records run " in err[0] and err[0].endswith(
            "finished there; expected the sweep's own run (was another run moved in?)")
    assert not (tmp_path / "dataset").exists()


def test_a_planted_interp_link_never_redirects_a_study(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "interp").symlink_to(elsewhere)
    code, err = _cli(capsys, "interp", "clusters", run_dir)
    assert code == 2 and err == [f"empathy-gap: error: --out {run_dir / 'interp/clusters'}: lies below "
                                 f"{run_dir / 'interp'}, which is a symbolic link, which would carry the writes "
                                 "elsewhere; expected a folder of its own (name the folder it points to as --out if "
                                 "that is where you want them)"]
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_a_sweep_file_that_is_a_fifo_or_device_is_one_line(tmp_path, capsys, kind):
    path = tmp_path / "sweep.toml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    code, err = _cli(capsys, "sweep", path, "--dry-run", "--no-calibrate")
    assert code == 2 and err == [f"empathy-gap: error: {path}: is not a regular file (a FIFO, socket or device); "
                                 "expected a sweep file (TOML)"]
