"""The steer and patch studies end to end on the pinned tiny intergroup capture run, through the CLI and run_study,
their tables equal to interp and the intergroup protocol called directly; bad input (and another suite's run, and a
model that is not the run's) exits 2 with one line and writes nothing."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from activations import store as activation_store
from behavioral.inference import models
from behavioral.cli.commands import main
from behavioral.inference.engine import Engine
from behavioral.runner.run import RunConfig, run
from behavioral.analysis.studies import get_study
from behavioral.analysis.study import run_study
from behavioral.suites import giebench
from behavioral.suites.intergroup import patching as IP
from behavioral.suites.intergroup import steering as protocol
from behavioral.suites.intergroup.corpus import embedded_events, sample_events
from interp import patching as P
from interp import steering
from tests.conftest import PINNED
from tests.test_analysis import make_run
from interp.steering.controls import summarize

SETTING = "P0S0T0"  # the pinned run's
RELIGION = ("--where", "category=religion", "--where", f"setting={SETTING}")


@pytest.fixture(scope="module")
def run_dir(pinned_run) -> Path:
    return pinned_run


@pytest.fixture(scope="module")
def loaded():
    return models.load(str(PINNED / "model"), "cpu", "fp32")


def _csv(frame: pd.DataFrame, tmp_path: Path) -> pd.DataFrame:
    """A frame as it reads back from the CSV the studies write."""
    frame.to_csv(tmp_path / "direct.csv", index=False)
    return pd.read_csv(tmp_path / "direct.csv")


@pytest.mark.slow
def test_steer_study_through_the_cli_equals_the_direct_calls(run_dir, loaded, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["interp", "steer", str(run_dir), "--out", str(out), *RELIGION, "--layers", "last", "--coef=0,8",
                 "--unit", "--test-events", "5", "--permutations", "50", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert (f"steer: intergroup model: the direction of category=religion, setting={SETTING} from its final-token "
            "cells (ingroup true minus false, unit norm); fit on the run's 3 events, tested on a new sample of 5 "
            "events of the corpus less those; 3 reruns on 5 test events (the coefficient-0 check on 1) at layers "
            "[1]") in printed
    assert printed.index("steering: 2 runs × 180 prompts") < printed.index("steering 1/2: unsteered")  # estimate first

    store = activation_store.load(run_dir)
    direction = protocol.ingroup_direction(store, "religion", SETTING, unit=True)  # every captured event
    vectors = pd.read_csv(out / "direction_vectors.csv")
    assert vectors["hook"].tolist() == store.hooks
    np.testing.assert_array_equal(vectors.drop(columns="hook").to_numpy(np.float32), direction)
    raw = protocol.ingroup_direction(store, "religion", SETTING)
    means, _ = protocol.final(store, {"category": "religion", "setting": SETTING})
    pd.testing.assert_frame_equal(pd.read_csv(out / "directions.csv"),
                                  _csv(steering.direction_table(raw, means, store.hooks), tmp_path))

    fit = sorted(pd.read_csv(out / "events.csv").query("role == 'fit'")["event_id"])
    assert fit == ["anger-7", "disgust-19", "fear-25"]  # the capture's events
    stored = RunConfig.from_run_dir(run_dir)
    config, drawn = protocol.rerun(stored, {"category": "religion", "setting": SETTING}, 5, fit)
    config = dataclasses.replace(config, device="cpu", batch_size=32, capture=(), per_cell_samples=0)
    direct = steering.steered_run(config, tmp_path / "direct", loaded, 1, direction[-1], coef=8.0, progress=False)
    rows = pd.read_csv(out / "steering_rows.csv")
    assert not set(rows["event_id"]) & set(fit) and rows["event_id"].nunique() == 5  # held out: 5 drawn
    steered = rows[rows["condition"] == "L1 +8"].sort_values(list(protocol.KEY))
    np.testing.assert_array_equal(steered["expected_intensity"],
                                  protocol.read_rows(direct).sort_values(list(protocol.KEY))["expected_intensity"])
    conditions = steering.sweep_conditions([1], [0.0, 8.0])
    check = dataclasses.replace(protocol.slice_config(stored, {"category": "religion", "setting": SETTING}, 5,
                                                      fit + drawn[1:]), device="cpu", capture=(), per_cell_samples=0)
    measured = steering.run_conditions(config, out / "runs", loaded, {1: direction[-1]}, [conditions[0], conditions[2]],
                                       protocol.read_rows)  # resumed
    pd.testing.assert_frame_equal(pd.read_csv(out / "steering.csv"),
                                  _csv(summarize(protocol.measured(measured.assign(one_sided=False)), protocol, 50, 0),
                                       tmp_path))
    checked = steering.run_conditions(check, out / "runs" / "check", loaded, {1: direction[-1]}, conditions[:2],
                                      protocol.read_rows)  # resumed: the check's own unsteered rerun and coefficient 0
    assert set(checked["event_id"]) == {drawn[0]}
    check = pd.read_csv(out / "zero_coefficient_check.csv")
    assert check[["condition", "n_rows", "identical"]].values.tolist() == [["L1 +0", 36, True]]  # one test event

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["zero_coefficient_reproduces_unsteered"] is True and manifest["layers"] == [1]
    assert manifest["coefficients"] == [0.0, 8.0] and manifest["model"]["dtype"] == "float32"
    assert manifest["held_out"] is True and manifest["fit_events"] == fit
    assert (out / "figures" / f"steering_religion_{SETTING}.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "on 5 events the direction was not fit on" in report
    assert "no wrong-matching control ran" not in report  # no projection asked for
    assert "Whether the gap moves when one side alone is steered (--one-sided)" in report


@pytest.mark.slow
def test_patch_study_through_run_study_equals_the_direct_calls(run_dir, loaded, tmp_path, capsys):
    study = get_study("patch")
    options = study.Options(where=("category=religion", "setting=P0S1T0"), limit_events=1, layers="1", layer_step=1,
                            sweep_groups=("system", "persona_end:1"), device="cpu")
    report = run_study(study, [run_dir], options, tmp_path / "out").report
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert ("patch: intergroup model: religion P0S1T0, 1 events of the run's corpus (seed 0); headline: 2 modes × "
            "5² cells × 1 events × the layers of --layers 1 (every 1) at system; sweep: 5 in-group prompts") in text
    assert "plan: headline 2 modes × 5² cells × 1 events × 1 layers = 50 patched prompts" in text
    headline = text.index("plan: headline")
    assert text.index("headline: one main forward took") < text.index("sweep: ", headline)  # the estimate comes early
    out = report.parent

    events = sample_events(embedded_events(), 1, 0)
    engine = Engine(loaded[0], loaded[1], 32)
    frame = IP.patched_gap_prompts(engine, "religion", "P0S1T0", events, [1], "system")
    pd.testing.assert_frame_equal(pd.read_csv(out / "gap_by_layer.csv"),
                                  _csv(IP.gap_table(frame, "religion"), tmp_path))
    written = (out / "report.md").read_text()
    assert "No interval over events: one event" in written  # a sample of one event, and why
    assert "## What this can and cannot show" in written and "Which of the 1 tested layers (1)" in written
    targets, sources, meta = IP.ingroup_sweep_prompts(loaded[1], "religion", "P0S1T0", events)
    sweep = P.sweep(engine, targets, sources, [1], IP.setting_trie(loaded[1], "P0S1T0"), ("system", "persona_end:1"),
                    meta)
    pd.testing.assert_frame_equal(pd.read_csv(out / "sweep_summary.csv"), _csv(P.summarize(sweep), tmp_path))

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["study"] == "patch" and manifest["events"] == [e.event_id for e in events]
    assert manifest["layers"] == [1] and manifest["chat_format"] == "system"
    assert manifest["result"]["delta_run"] is None  # the run has no P0S1T0 rows
    files = manifest["output"]["files"]
    assert {"gap_by_layer.csv", "gap_prompts.csv", "sweep.csv", "sweep_summary.csv", "figures/gap_by_layer.png",
            "figures/sweep_frac_closed.png", "report.md"} <= set(files)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(
        [*files, "manifest.json"])  # nothing else in --out


@pytest.mark.parametrize("argv, message", [
    (["steer", *RELIGION, "--layers", "embed"], "--layers embed: names no decoder block (hook_embed is never steered)"),
    (["steer", "--layers", "7"], "--layers: block 7 was not captured"),
    (["steer", "--where", "perceiver=a Jew"], "--where perceiver: an intergroup steering or patching study selects"),
    (["steer", "--where", "category=nationality"], "no result rows of category=nationality, setting=P0S0T0"),
    (["steer", "--coef", "a"], "--coef a: expected numbers, e.g. --coef=-4,4"),
    (["steer", "--matchings", "3"], "--matchings and --random-directions go with --project"),
    (["steer", "--test-events", "0"], "--test-events must be at least 1, got 0"),
    (["steer", *RELIGION], "--per-cell-samples is 2 in the capture; a direction fit on 2 of the run's 3 events needs "
                           "it at least 3 (one final-token state per event of every cell): rerun the capture with "
                           "--per-cell-samples 3 (or --limit-events 2 or fewer), or fit on all its events"),
    (["patch", "--mode", "both"], "--mode: unknown mode 'both'; expected one of person, swap"),
    (["patch", "--positions", "middle"], "--positions: bad position group 'middle'"),
    (["patch", "--where", "setting=P9"], "unknown setting 'P9'; expected one of P0S0T0"),
    (["patch", "--sweep-events", "-1"], "--sweep-events must be at least 0, got -1"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(run_dir, tmp_path, capsys, argv, message):
    out = tmp_path / "new" / "out"
    assert main(["interp", argv[0], str(run_dir), "--out", str(out), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("study", ["steer", "patch"])
def test_a_study_reads_one_run(run_dir, tmp_path, capsys, study):
    other = make_run(tmp_path / "other", categories=("religion",), settings=(SETTING,))
    assert main(["interp", study, str(run_dir), str(other), "--out", str(tmp_path / "out")]) == 2
    assert f"interp {study} reads one run directory, got 2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_steering_a_run_without_capture_exits_2_naming_it(tmp_path, capsys):
    synthetic = make_run(tmp_path / "run", categories=("religion",), settings=(SETTING,))
    assert main(["interp", "steer", str(synthetic), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "holds no activation store; rerun `empathy-gap run intergroup` with --capture" in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_another_suites_run_has_no_protocol(long_model_dir, tmp_path, capsys):
    config = RunConfig("giebench", str(long_model_dir), giebench.Options(limit_items=1, categories=("Age",)),
                       mode="score", device="cpu", dtype="fp32")
    gie = run(config, tmp_path / "gie", progress=False)
    capsys.readouterr()  # the run's own loading messages
    for study in ("steer", "patch"):
        assert main(["interp", study, str(gie), "--out", str(tmp_path / study)]) == 2
        err = capsys.readouterr().err
        assert f"a run of suite 'giebench', which declares no {study} protocol; {study} runs on intergroup runs" in err
        assert err.count("\n") == 1
        assert not (tmp_path / study).exists()


def test_a_model_other_than_the_runs_is_refused(run_dir, tmp_path, capsys):
    edited = tmp_path / "run"
    shutil.copytree(run_dir, edited)
    manifest = json.loads((edited / "manifest.json").read_text())
    manifest["config"]["model_hash"] = "0" * 64
    (edited / "manifest.json").write_text(json.dumps(manifest))
    assert main(["interp", "patch", str(edited), "--out", str(tmp_path / "out"), "--device", "cpu"]) == 2
    last = capsys.readouterr().err.rstrip("\n").split("\n")[-1]  # after the library's loading bar
    assert last.startswith("empathy-gap: error: ") and "is not the one the run was made with (model_hash" in last
    assert not (tmp_path / "out").exists()
