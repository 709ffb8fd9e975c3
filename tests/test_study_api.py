"""run_study as a scripting API: a study by name, its options as keywords or a dict (a misspelt one refused by name),
an already loaded model used instead of loading the run's (and refused where it is not the run's), and the result's
tables the very frames its CSVs were written from; the persona patching script loads its model once."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from behavioral.inference import models
from behavioral.cli.commands import main
from behavioral.analysis.study import run_study, study_options
from behavioral.analysis.studies import get_study, study_names
from tests.conftest import PINNED

README = Path(__file__).resolve().parents[1] / "README.md"

# the patch study at its smallest on the pinned tiny run: one event, the last layer, one mode, no sweep
PATCH = {"where": "category=religion,setting=P0S1T0", "limit_events": 1, "layers": "last", "layer_step": 1,
         "modes": "person", "sweep_events": 0, "device": "cpu"}


@pytest.fixture(scope="module")
def loaded():
    return models.load(str(PINNED / "model"), "cpu", "fp32")


@pytest.fixture(scope="module")
def results(pinned_run, loaded, tmp_path_factory):
    """The patch study run twice: loading the run's model itself, and given the loaded one while loading fails."""
    out = tmp_path_factory.mktemp("study-api")
    loading = run_study("patch", [pinned_run], out=out / "loading", progress=False, **PATCH)

    def no_load(*args, **kwargs):
        raise AssertionError("a study given model= loaded a model")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "load", no_load)
        given = run_study("patch", [pinned_run], PATCH, out / "given", progress=False, model=loaded)
    return loading, given


def test_a_given_model_loads_nothing_and_gives_the_same_tables(results):
    loading, given = results
    assert list(given.tables) == list(loading.tables) and "gap_by_layer" in given.tables
    for name, frame in given.tables.items():
        pd.testing.assert_frame_equal(frame, loading.tables[name])
    assert given.manifest["model"] == loading.manifest["model"]  # the same model, as the manifest records it


def test_the_tables_are_the_frames_the_csvs_were_written_from(results, tmp_path):
    _, given = results
    assert given.report == given.folder / "report.md" and given.report.is_file()
    assert given.manifest == json.loads((given.folder / "manifest.json").read_text())
    written = sorted(f.removesuffix(".csv") for f in given.manifest["output"]["files"] if f.endswith(".csv"))
    assert sorted(given.tables) == written
    for name, frame in given.tables.items():
        frame.to_csv(tmp_path / "frame.csv", index=False)
        pd.testing.assert_frame_equal(pd.read_csv(given.folder / f"{name}.csv"), pd.read_csv(tmp_path / "frame.csv"))


def test_a_given_model_other_than_the_runs_is_refused_naming_it(pinned_run, loaded, tmp_path):
    model, tokenizer, info = loaded
    other = (model, tokenizer, info | {"model": "another-model", "model_hash": "0" * 64})
    with pytest.raises(ValueError, match=r"the model another-model is not the one the run was made with "
                                         r"\(model_hash 0{64} loaded, 88d56f3e"):
        run_study("patch", [pinned_run], PATCH, tmp_path / "out", progress=False, model=other)
    assert not (tmp_path / "out").exists()


def test_a_model_is_refused_by_a_study_that_runs_none(pinned_run, loaded, tmp_path):
    with pytest.raises(ValueError, match="study clusters runs no model; model= goes to a study that reruns"):
        run_study("clusters", [pinned_run], out=tmp_path / "out", model=loaded)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", [{"layer": "1"}, {"options": {"layers": "1", "layer": "1"}}])
def test_a_misspelt_option_is_one_line_naming_it_and_the_study(pinned_run, tmp_path, given):
    with pytest.raises(ValueError, match=r"^unknown option 'layer' of study patch; expected one of device, dtype, "
                                         r"trust_remote_code, where, ") as err:
        run_study("patch", [pinned_run], out=tmp_path / "out", **given)
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_options_from_a_dict_keywords_or_an_instance():
    patch = get_study("patch")
    expected = patch.Options(where=("category=religion", "setting=P0S1T0"), layers="1", modes=("person",))
    assert study_options(patch, {"layers": "1"}, where="category=religion,setting=P0S1T0", modes=["person"]) == expected
    assert study_options(patch, patch.Options(layers="1", modes=("swap",)), where=expected.where,
                         modes="person") == expected
    assert study_options(patch) == patch.Options()
    assert study_options(get_study("steer"), coefs="-4,4").coefs == (-4.0, 4.0)


def test_every_study_that_loads_the_runs_model_takes_a_loaded_one():
    for name in study_names():
        study = get_study(name)
        loads = "load_model(" in inspect.getsource(type(study).analyze)
        assert study.reruns_model == loads, name
        assert ("model" in inspect.signature(study.analyze).parameters) == loads, name


def test_the_persona_patching_script_loads_the_model_once(tiny_model_dir, tmp_path, monkeypatch, load_experiment,
                                                          capsys):
    loads = []
    load = models.load
    monkeypatch.setattr(models, "load", lambda *args, **kwargs: loads.append(args) or load(*args, **kwargs))
    script = load_experiment("persona_patching")
    argv = ["--model", str(tiny_model_dir), "--out", str(tmp_path / "out"), "--layers", "last", "--layer-step", "1",
            "--mode", "person", "--sweep-events", "0", "--device", "cpu", "--dtype", "fp32"]
    assert script.main(argv) == 0
    assert len(loads) == 1
    printed = capsys.readouterr().out
    assert f"wrote {tmp_path / 'out' / 'patch' / 'report.md'}" in printed
    manifest = json.loads((tmp_path / "out" / "patch" / "manifest.json").read_text())
    assert manifest["options"]["where"] == [] and manifest["runs"]  # the study's own defaults: the run's slice


@pytest.mark.parametrize("study", study_names())
def test_every_studys_help_prints(study, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["interp", study, "--help"])
    assert exit_.value.code == 0 and "usage:" in capsys.readouterr().out


def test_the_readmes_persona_patch_is_short_and_runs(tiny_model_dir, tmp_path, monkeypatch):
    """The README's persona patch (under 15 lines, one model load) runs as written on the tiny model."""
    code = re.search(r"A persona patch, the model\nloaded once.*?```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) < 15 and code.count("models.load(") == 1
    monkeypatch.chdir(tmp_path)
    real_load, loads = models.load, []
    monkeypatch.setattr(models, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    namespace: dict = {}
    exec(code.replace('"smollm2-135m"', repr(str(tiny_model_dir))), namespace)
    assert len(loads) == 1
    table = namespace["patch"].tables["gap_by_layer"]
    assert set(table["mode"]) == {"person", "swap"}
    assert table["n_events"].eq(get_study("patch").Options().limit_events).all()  # the study's default sample
    assert table[["gap_raw_patched_low", "gap_raw_patched_high"]].notna().all().all()  # an interval over events
    written = pd.read_csv(tmp_path / "out" / "patch" / "gap_by_layer.csv")
    assert written["gap_raw_patched"].tolist() == pytest.approx(table["gap_raw_patched"].tolist(), nan_ok=True)
