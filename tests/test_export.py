"""`export_runs`: runs as a tidy per-item Parquet dataset with a Hugging Face dataset card, read back by pandas and
by `datasets`, with labels, partial runs, data the user gave and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from behavioral.analysis.export import HEAD, TAIL, export_runs, source
from behavioral.analysis.runs import model_name
from behavioral.cli import main
from behavioral.manifest import MANIFEST, read_manifest
from behavioral.registry import SUITES, get_suite
from behavioral.run import RunConfig, run
from behavioral.run_reader import read_run
from behavioral.suites import intergroup, isear


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    """Score runs of the tiny model: intergroup (religion, 0..10 scale so probs are kept, 1 event: 36 rows), isear
    (2 project events: 6 rows), a copy of the intergroup run, and a copy marked partial (its plan one unit more)."""
    root = tmp_path_factory.mktemp("export-runs")
    common = dict(model=str(tiny_model_dir), mode="score", device="cpu", dtype="fp32", batch_size=8, unit_size=4)
    made = {
        "intergroup": run(RunConfig("intergroup", options=intergroup.Options(
            categories=("religion",), settings=("P0S1T0",), limit_events=1), **common), root / "ig", progress=False),
        "isear": run(RunConfig("isear", options=isear.Options(events="project", sample_k=2), **common), root / "is",
                     progress=False),
    }
    made["copy"] = Path(shutil.copytree(made["intergroup"], root / "ig-copy"))
    made["partial"] = _edited(shutil.copytree(made["intergroup"], root / "ig-partial"),
                              lambda m: m["plan"].update(units=m["plan"]["units"] + 1, rows=m["plan"]["rows"] + 1))
    return made


def _edited(run_dir: str | Path, edit) -> Path:
    """`run_dir` with `edit(manifest)` applied to its manifest."""
    path = Path(run_dir) / MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    return Path(run_dir)


def _front_matter(card: str) -> dict:
    """The YAML front matter of a dataset card."""
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_every_row_comes_back_with_its_runs_values(runs, tmp_path):
    card = export_runs([runs["intergroup"], runs["isear"]], tmp_path / "out")
    assert card == tmp_path / "out" / "README.md"
    for suite in ("intergroup", "isear"):
        manifest, rows, _ = read_run(runs[suite], suite)
        got = pd.read_parquet(tmp_path / "out" / "data" / f"{suite}.parquet")
        assert list(got.columns) == [c for c, _, _ in HEAD] + list(get_suite(suite).fields) + [c for c, _, _ in TAIL]
        assert [c for c in got.columns if got[c].dtype == object] == ["probs"]  # the one list column
        assert len(got) == len(rows) and set(got["run"]) == {model_name(manifest.config)}
        assert set(got["model"]) == {manifest.config["model"]} and set(got["sweep_setting"]) == {""}
        assert set(got["model_hash"]) == {manifest.config["model_hash"]} and set(got["mode"]) == {"score"}
        for column in ("item_id", "sample", "answer", "expected", "valid_mass", *get_suite(suite).fields):
            np.testing.assert_array_equal(got[column].to_numpy(dtype=object if column != "expected" else float),
                                          rows[column].to_numpy(dtype=object if column != "expected" else float))
        assert all(list(a) == list(b) for a, b in zip(got["probs"], rows["probs"]))
        for probs, entropy, top in zip(got["probs"], got["entropy"], got["top_prob"]):
            assert entropy == pytest.approx(-sum(p * np.log(p) for p in probs if p > 0), abs=1e-12)
            assert top == max(probs)
        assert got["refused"].dtype == "boolean" and got["truncated"].isna().all()  # score mode: never truncated


def test_labels_name_the_runs_and_the_card_marks_the_partial_one(runs, tmp_path):
    labels = [{"model": "tiny", "setting": "full"}, {"model": "tiny", "setting": "cut"}]
    card = export_runs([runs["intergroup"], runs["partial"]], tmp_path / "out", labels).read_text()
    got = pd.read_parquet(tmp_path / "out" / "data" / "intergroup.parquet")
    assert set(got["run"]) == {"tiny"} and got["sweep_setting"].value_counts().to_dict() == {"full": 36, "cut": 36}
    units = read_manifest(runs["intergroup"]).plan.units
    assert f"- partial runs: `tiny` (PARTIAL run: {units} of {units + 1} work units (36 of 37 rows) finished)" in card
    assert card.count("PARTIAL run") == 2  # in the suite's list and in its run's provenance row
    provenance = read_manifest(runs["intergroup"]).provenance
    assert provenance["git_commit"] in card and provenance["created"] in card


def test_the_card_front_matter_names_each_data_file_and_the_licence(runs, tmp_path):
    card = export_runs([runs["intergroup"], runs["isear"]], tmp_path / "out").read_text()
    meta = _front_matter(card)
    assert meta["configs"] == [{"config_name": s, "data_files": f"data/{s}.parquet"} for s in ("intergroup", "isear")]
    assert all((tmp_path / "out" / c["data_files"]).is_file() for c in meta["configs"])
    assert meta["license"] == "mit" and meta["size_categories"] == ["n<1K"] and "Do not publish" not in card
    assert "- rows: 36" in card and "- rows: 6" in card
    assert 'pd.read_parquet("data/isear.parquet")' in card and 'load_dataset("parquet", data_files=' in card
    written = json.loads((tmp_path / "out" / MANIFEST).read_text())["output"]
    assert written["command"] == "export" and sorted(written["files"]) == ["README.md", "data/intergroup.parquet",
                                                                          "data/isear.parquet"]


def test_a_run_of_a_users_corpus_is_marked_not_to_be_published(runs, tmp_path):
    corpus = str(tmp_path / "crowd-envent")  # as if the run had read the user's crowd-enVENT copy
    user = _edited(shutil.copytree(runs["intergroup"], tmp_path / "user"),
                   lambda m: m["config"]["options"].update(events=corpus))
    card = export_runs([user, runs["isear"]], tmp_path / "out").read_text()
    assert _front_matter(card)["license"] == "other"
    name = model_name(read_manifest(user).config)
    assert f"**Do not publish this dataset**: the rows of `{name}` (intergroup)" in card
    assert f"`{corpus}`" in card and "event ids and emotions, not the narratives" in card


@pytest.mark.parametrize("config, licence, says", [
    ({"suite": "intergroup", "mode": "generate", "options": {"events": "/c"}}, None, "replies (`response`) may quote"),
    ({"suite": "isear", "mode": "score", "events_source": "isear"}, "cc-by-nc-sa-3.0", "the event texts, in `event`"),
    ({"suite": "isear", "mode": "score", "events_source": "file", "options": {"events": "/e.txt"}}, None, "`/e.txt`"),
    ({"suite": "giebench", "mode": "generate", "imported_from": "/r"}, None, "results imported from (`/r`)"),
    ({"suite": "jaem", "mode": "score", "options": {"templates": ["/t"]}}, None, "in `speaker_text`"),
    ({"suite": "scm", "mode": "both", "options": {"groups": "us-stereotypes"}}, "mit", "the project's own data"),
])
def test_each_runs_source_says_what_its_rows_hold_and_whether_they_may_be_published(config, licence, says):
    found = source(config)
    assert found.licence == licence and says in found.text
    assert ("Do not publish" in found.text) == (licence is None)


@pytest.mark.parametrize("case", ["empty", "not a run", "same label", "labels", "label key", "stranger"])
def test_bad_input_is_one_line_and_writes_nothing(case, runs, tmp_path):
    out = tmp_path / "new" / "out"
    given, labels, says = {
        "empty": ([], None, "no run directory given"),
        "not a run": ([runs["isear"], tmp_path], None, f"{tmp_path}: no manifest.json"),
        "same label": ([runs["intergroup"], runs["copy"]], None, f"{runs['copy']}: a second intergroup run labelled"),
        "labels": ([runs["isear"]], [{}, {}], "2 labels for 1 runs"),
        "label key": ([runs["isear"]], [{"name": "x"}], f"{runs['isear']}: labels name name; expected only model"),
        "stranger": ([runs["isear"]], None, "holds notes.txt"),
    }[case]
    if case == "stranger":
        out.mkdir(parents=True)
        (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError) as err:
        export_runs(given, out, labels)
    assert says in str(err.value) and "\n" not in str(err.value)
    if case == "stranger":
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
    else:
        assert not (tmp_path / "new").exists()



@pytest.mark.parametrize("inside", ["", "exp", "results/exp"])
def test_an_export_into_a_run_directorys_own_folder_is_one_line_naming_the_run(inside, runs, tmp_path, capsys):
    run_dir = Path(shutil.copytree(runs["isear"], tmp_path / "run"))
    before = sorted(run_dir.rglob("*"))
    assert main(["export", str(run_dir), "--to", str(run_dir / inside)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"empathy-gap: error: --to {run_dir / inside}") and err.count("\n") == 1, err
    assert f"run directory {run_dir}" in err or f"{run_dir}: is a run directory" in err, err
    assert sorted(run_dir.rglob("*")) == before


def test_the_exports_refusals_name_its_flag(runs, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", str(runs["isear"]), "--to", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"empathy-gap: error: --to {out}: holds notes.txt") and "--out" not in err, err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_the_export_columns_never_clash_with_a_suites_item_fields():
    exported = {c for c, _, _ in (*HEAD, *TAIL)}
    assert {name: set(get_suite(name).fields) & exported for name in SUITES} == {name: set() for name in SUITES}


def test_datasets_loads_the_same_rows(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import datasets

    export_runs([runs["intergroup"]], tmp_path / "out")
    path = str(tmp_path / "out" / "data" / "intergroup.parquet")
    loaded = datasets.load_dataset("parquet", data_files=path, cache_dir=str(tmp_path / "cache"))["train"]
    expected = pd.read_parquet(path)
    assert loaded.column_names == list(expected.columns) and loaded.num_rows == len(expected)
    assert loaded["item_id"] == expected["item_id"].tolist() and loaded["probs"] == expected["probs"].map(list).tolist()
    assert loaded["expected"] == expected["expected"].tolist() and loaded["sample"] == expected["sample"].tolist()
