"""What no command may do to a user (issue 25): destroy files it did not write, analyse half a run as if whole, run a
model folder's code because a manifest says so, or answer bad input with a traceback."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from behavioral.rundir.manifest import MANIFEST, RunDirError
from behavioral.cli import commands as cli
from behavioral.inference import models
from behavioral.rundir import parts as store
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.parts import RESULTS, RowLog, seal_logs
from behavioral.suites import giebench, intergroup, isear, jaem, scm
from tests.test_analysis import make_run
from tests.test_suites import CONFIGS


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _cli(capsys, *argv: str) -> tuple[int, str]:
    """Exit status and stderr of `empathy-gap argv`."""
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


# The rules here need a finished run of each suite with its own options, not its size: the smallest grid of each
# that its analysis takes (36 to 6 rows; tests/test_suites.py's grids hold 55 to 6,400).
SMALL_OPTIONS = {
    "intergroup": intergroup.Options(categories=("religion",), settings=("P0S0T0",), limit_events=1),
    "jaem": jaem.Options(tasks=("ce",), limit=2),
    "giebench": giebench.Options(limit_items=2, swap="paper"),
    "isear": isear.Options(events="project", sample_k=2),
    "scm": scm.Options(groups="us-stereotypes", traits=("warm", "competent"), templates=("f01",)),
}
SMALL = {name: dataclasses.replace(config, options=SMALL_OPTIONS[name]) for name, config in CONFIGS.items()}


@pytest.fixture(scope="module")
def suite_runs(tmp_path_factory, long_model_dir) -> dict[str, Path]:
    """A finished score-mode run of every suite on the tiny model, on the small grids of SMALL_OPTIONS."""
    root = tmp_path_factory.mktemp("runs")
    return {name: run(dataclasses.replace(config, model=str(long_model_dir), mode="score", samples=None),
                      root / name, progress=False) for name, config in SMALL.items()}


def _copy_run(run_dir: Path, to: Path) -> Path:
    """A copy of a run directory's manifest and results (no analysis)."""
    for name, data in _tree(run_dir).items():
        if name.startswith((MANIFEST, RESULTS)):
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            (to / name).write_bytes(data)
    return to


# --- data destroyed ----------------------------------------------------------------------------------------------

def test_analyze_never_replaces_a_folder_holding_a_report_notes_and_the_run(suite_runs, tmp_path, capsys):
    proj = tmp_path / "proj"
    _copy_run(suite_runs["giebench"], proj / "gie-run")
    (proj / "report.md").write_text("my report")
    (proj / "notes.txt").write_text("my notes")
    before = _tree(proj)
    code, err = _cli(capsys, "analyze", proj / "gie-run", "--out", proj)
    assert code == 2 and err.count("\n") == 1 and "no empathy-gap output manifest names" in err
    assert _tree(proj) == before


@pytest.mark.parametrize("suite", sorted(CONFIGS))
def test_every_suite_analysis_replaces_only_its_own_earlier_output(suite, suite_runs, tmp_path, capsys):
    run_dir = _copy_run(suite_runs[suite], tmp_path / "run")
    out = tmp_path / "analysis"
    assert _cli(capsys, "analyze", run_dir, "--out", out)[0] == 0
    entry = json.loads((out / MANIFEST).read_text())["output"]
    assert entry["command"] == f"analyze {suite}" and entry["complete"] is True
    assert sorted(entry["files"] + [MANIFEST]) == sorted(_tree(out))  # every file named, nothing else
    assert _cli(capsys, "analyze", run_dir, "--out", out)[0] == 0  # an earlier output of the same command
    code, err = _cli(capsys, "analyze", out)  # the analysis taken for a run
    assert code == 2 and f"is the output of `analyze {suite}`, not a run directory" in err
    code, err = _cli(capsys, "analyze", run_dir, "--out", run_dir)  # the run itself
    assert code == 2 and "is a run directory" in err and json.loads((run_dir / MANIFEST).read_text())["config"]


def test_persona_patching_never_deletes_what_an_out_manifest_lists(tmp_path, tiny_model_dir, load_experiment,
                                                                   capsys):
    patching = load_experiment("persona_patching")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "cluster_stats.csv").write_text("another study's output")
    (out / MANIFEST).write_text(json.dumps({"outputs": [str(victim), "../victim.txt", "cluster_stats.csv"]}))
    before = _tree(out)
    assert patching.main(["--model", str(tiny_model_dir), "--out", str(out)]) == 2
    assert "lists no files written by an empathy-gap command" in capsys.readouterr().err
    assert victim.read_text() == "precious" and _tree(out) == before


@pytest.mark.parametrize("study, extra", [("nationality_clusters", ["--kind", "persona"]),
                                          ("gap_steering", ["--probes-only"]),
                                          ("persona_patching", [])])
def test_studies_refuse_a_run_directory_as_out(study, extra, tmp_path, load_experiment, capsys):
    run_dir = make_run(tmp_path / "run", categories=("religion",))
    before = _tree(run_dir)
    module = load_experiment(study)
    code = module.main(["--run", str(run_dir), "--out", str(run_dir), *extra])
    message = capsys.readouterr().err
    assert code == 2 and "is a run directory" in message
    assert _tree(run_dir) == before


def test_a_study_that_fails_on_bad_input_leaves_no_out_folder(tmp_path, load_experiment, capsys):
    run_dir = make_run(tmp_path / "run", categories=("religion",))
    manifest = json.loads((run_dir / MANIFEST).read_text())
    manifest["config"]["capture"] = ["final"]  # says so, but its activations are gone: found once --out is made
    (run_dir / MANIFEST).write_text(json.dumps(manifest))
    out = tmp_path / "new" / "out"
    assert load_experiment("gap_steering").main(["--run", str(run_dir), "--out", str(out), "--probes-only"]) == 2
    assert "holds no activation store" in capsys.readouterr().err and not (tmp_path / "new").exists()


# --- silently wrong results ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("suite", sorted(CONFIGS))
def test_every_suite_refuses_a_partial_run_unless_allowed_and_says_so(suite, suite_runs, tmp_path, capsys):
    run_dir = _copy_run(suite_runs[suite], tmp_path / "run")
    manifest = json.loads((run_dir / MANIFEST).read_text())
    units, rows = manifest["plan"]["units"], manifest["plan"]["rows"]
    manifest["plan"] = {"units": units + 1, "rows": rows + 3}  # as if a unit were still running or killed
    (run_dir / MANIFEST).write_text(json.dumps(manifest))
    code, err = _cli(capsys, "analyze", run_dir)
    assert code == 2 and f"is partial: {units} of {units + 1} work units ({rows} of {rows + 3} rows)" in err
    assert not (run_dir / "analysis").exists()
    assert _cli(capsys, "analyze", run_dir, "--allow-partial")[0] == 0
    assert f"PARTIAL run: {units} of {units + 1} work units" in (run_dir / "analysis" / "report.md").read_text()


# --- security ------------------------------------------------------------------------------------------------------

def test_a_manifest_never_switches_on_remote_code(tmp_path, tiny_model_dir):
    run_dir = make_run(tmp_path / "run", categories=("religion",))
    manifest = json.loads((run_dir / MANIFEST).read_text())
    manifest["config"] |= {"trust_remote_code": True, "model": str(tiny_model_dir)}
    (run_dir / MANIFEST).write_text(json.dumps(manifest))
    assert RunConfig.from_run_dir(run_dir).trust_remote_code is False
    assert RunConfig.from_run_dir(run_dir, trust_remote_code=True).trust_remote_code is True  # the user's flag


def test_a_model_folder_with_code_runs_none_of_it_without_the_users_flag(tmp_path, tiny_model_dir, load_experiment):
    folder = tmp_path / "model"
    folder.mkdir()
    for item in tiny_model_dir.iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    marker = tmp_path / "code-ran"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                    "from transformers import LlamaConfig as EvilConfig\n")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoConfig": "evil.EvilConfig"}}))
    run_dir = make_run(tmp_path / "run", categories=("religion",))
    manifest = json.loads((run_dir / MANIFEST).read_text())
    manifest["config"] |= {"trust_remote_code": True, "model": str(folder)}
    (run_dir / MANIFEST).write_text(json.dumps(manifest))
    patching = load_experiment("persona_patching")
    patching.main(["--run", str(run_dir), "--out", str(tmp_path / "out"), "--device", "cpu", "--layers", "last",
                   "--mode", "person", "--sweep-events", "0"])  # transformers may refuse the custom code outright
    assert not marker.exists()


# --- messages: one line, exit 2 -----------------------------------------------------------------------------------

def test_analyze_of_a_run_without_rows_or_with_an_edited_manifest_is_one_line(suite_runs, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / MANIFEST).write_bytes((suite_runs["isear"] / MANIFEST).read_bytes())
    code, err = _cli(capsys, "analyze", empty)
    assert code == 2 and "holds no results yet" in err and err.count("\n") == 1

    edited = _copy_run(suite_runs["isear"], tmp_path / "edited")
    manifest = json.loads((edited / MANIFEST).read_text())
    (edited / MANIFEST).write_text(json.dumps(manifest | {"config": manifest["config"] | {"suite": "scm"}}))
    code, err = _cli(capsys, "analyze", edited)
    assert code == 2 and "config.options.events is not an option of suite 'scm'" in err and err.count("\n") == 1

    (edited / MANIFEST).write_text(json.dumps(manifest | {"config": manifest["config"] | {"mode": "generate"}}))
    code, err = _cli(capsys, "analyze", edited)
    assert code == 2 and "says mode 'generate' but its results holds answer-set scores" in err

    (edited / MANIFEST).write_text(json.dumps(manifest | {"config": manifest["config"] | {"mode": "sample"}}))
    code, err = _cli(capsys, "analyze", edited)
    assert code == 2 and 'config.mode is "sample"; expected one of generate, score, both' in err


def test_a_garbage_row_log_is_never_read_by_analyze_and_one_line_where_a_resume_would_seal_it(suite_runs, tmp_path,
                                                                                                capsys):
    run_dir = _copy_run(suite_runs["scm"], tmp_path / "run")
    (run_dir / RESULTS / "r001-000000.arrows").write_bytes(b"\x00garbage, not an Arrow stream" * 10)
    assert _cli(capsys, "analyze", run_dir)[0] == 0  # an analysis reads sealed parts alone
    with pytest.raises(RunDirError, match="r001-000000.arrows: not an Arrow row log"):
        seal_logs(run_dir, 1)  # what a resume of rank 1 does first
    (run_dir / RESULTS / "r001-000000.arrows").write_bytes(b"\xff\xff")  # a log killed before its first batch
    seal_logs(run_dir, 1)
    assert not (run_dir / RESULTS / "r001-000000.arrows").exists()


def test_reading_a_missing_run_names_it(tmp_path):
    with pytest.raises(RunDirError, match="no such run directory"):
        from behavioral.suites.intergroup import results

        results(tmp_path / "missing")
    with pytest.raises(RunDirError, match="no such run directory"):
        store.read_results(tmp_path / "missing")
    from activations import store as activation_store

    with pytest.raises(ValueError, match="no such run directory"):
        activation_store.load(tmp_path / "missing")


def test_intergroup_results_of_another_suites_run_name_the_suite(suite_runs):
    from behavioral.suites.intergroup import results

    with pytest.raises(RunDirError, match="holds a run of suite 'giebench'; expected a intergroup run"):
        results(suite_runs["giebench"])


def test_a_full_disk_is_reported_once_naming_the_log(tmp_path, monkeypatch):
    class FullDisk:
        def write_table(self, table):
            raise OSError(28, "No space left on device")

        def close(self):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(pa.ipc, "new_stream", lambda sink, schema: FullDisk())
    with pytest.raises(OSError) as caught, RowLog(tmp_path / "run", store.CORE, rank=0) as log:
        log.write([{"unit_id": "u", "item_id": "i", "sample": 0}])
    assert "cannot write" in str(caught.value) and "r000-000000.arrows" in str(caught.value)
    assert "No space left on device" in str(caught.value)


def test_ctrl_c_while_the_suites_load_is_one_line(monkeypatch, capsys):
    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_parser", interrupted)
    assert cli.main(["run", "isear", "--model", "x", "--out", "y"]) == 130
    assert capsys.readouterr().err == "empathy-gap: interrupted; finished work is saved; rerun the same command to " \
                                      "resume\n"


def test_an_unreachable_hub_fails_at_once_with_one_line(monkeypatch):
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(models.ModelLoadError, match="cannot be reached and the model is not in the local cache"):
        models.load_tokenizer("no-such-org/no-such-model-" + os.urandom(4).hex())


def test_studies_refuse_another_suites_run_by_name(suite_runs, tmp_path, load_experiment, capsys):
    gie = suite_runs["giebench"]
    assert load_experiment("persona_patching").main(["--run", str(gie), "--out", str(tmp_path / "p")]) == 2
    refusal = "a run of suite 'giebench', which declares no {} protocol; {} runs on intergroup runs"
    assert refusal.format("patch", "patch") in capsys.readouterr().err
    assert load_experiment("nationality_clusters").main(["--run", str(gie), "--out", str(tmp_path / "c")]) == 2
    assert "a run of suite 'giebench'; the cluster study needs an intergroup run" in capsys.readouterr().err
    assert load_experiment("gap_steering").main(["--run", str(gie), "--out", str(tmp_path / "s"),
                                                 "--probes-only"]) == 2
    assert refusal.format("steer", "steer") in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
