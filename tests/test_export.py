"""`export_runs`: runs as a tidy per-item Parquet dataset with a Hugging Face dataset card, read back by pandas and
by `datasets`, with labels, partial runs, data the user gave and bad input; the card's front matter and text give
each config's row, columns, label order of `probs`, and each run's options, decoding settings and templates, with
hostile manifest values kept as data; every suite's declared labels and templates match its items, and the card says
what each label stands for (scm: A = 5 … E = 1) and what fills each placeholder that no item field names."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from behavioral.analysis import export
from behavioral.analysis.export import DECODING, HEAD, META, TAIL, export_runs, source
from behavioral.analysis.runs import model_name
from behavioral.cli.commands import main
from behavioral.rundir.manifest import MANIFEST, read_manifest
from behavioral.suite.registry import SUITES, get_suite
from behavioral.runner.run import RunConfig, run
from behavioral.runner.reader import read_run
from behavioral.suite.protocol import Suite
from behavioral.suites import giebench, intergroup, isear, jaem, scm
from behavioral.suites.intergroup.settings import get_setting
from behavioral.suites.scm.traits import TRAIT_DEFINITIONS


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
                              lambda m: m["plan"].update(units=m["plan"]["units"] + 1, rows=m["plan"]["rows"] + 1,
                                                         groups=[*m["plan"]["groups"], ["not run", 1]]))
    return made


def _edited(run_dir: str | Path, edit) -> Path:
    """`run_dir` with `edit(manifest)` applied to its manifest."""
    path = Path(run_dir) / MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    return Path(run_dir)


def _front_matter(card: str) -> dict:
    """The YAML front matter of a dataset card: from its first line to the next line that is `---`."""
    lines = card.split("\n")
    assert lines[0] == "---"
    return yaml.safe_load("\n".join(lines[1:lines.index("---", 1)]))


def _body(card: str) -> str:
    """A dataset card's Markdown, after its front matter."""
    lines = card.split("\n")
    return "\n".join(lines[lines.index("---", 1) + 1:])


def test_every_row_comes_back_with_its_runs_values(runs, tmp_path):
    card = export_runs([runs["intergroup"], runs["isear"]], tmp_path / "out")
    assert card == tmp_path / "out" / "README.md"
    for suite in ("intergroup", "isear"):
        manifest, rows, _ = read_run(runs[suite], suite)
        got = pd.read_parquet(tmp_path / "out" / "data" / f"{suite}.parquet")
        assert list(got.columns) == [c for c, _, _ in HEAD] + list(get_suite(suite).fields) + [c for c, _, _ in TAIL]
        assert [c for c in got.columns if got[c].dtype == object] == ["probs"]  # the one list column
        assert len(got) == len(rows) and set(got["run"]) == {model_name(manifest.config)}
        assert set(got["model"]) == {manifest.config["model"]} and got["sweep_setting"].isna().all()  # no sweep
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
    assert set(got["run"]) == {"tiny"}
    assert got["sweep_setting"].value_counts().to_dict() == {"intergroup--full": 36, "intergroup--cut": 36}
    units = read_manifest(runs["intergroup"]).plan.units
    assert (f"- partial runs: `tiny` (`intergroup--cut`): PARTIAL run: {units} of {units + 1} work units (36 of 37 "
            "rows) finished") in card
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
    assert 'pd.read_parquet("data/isear.parquet")' in card and 'load_dataset(os.getcwd(), "isear", split=' in card
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


def test_the_card_lists_each_configs_probs_labels_and_each_runs_options_decoding_and_templates(runs, tmp_path):
    card = export_runs([runs["intergroup"], runs["isear"]], tmp_path / "out").read_text()
    meta = _front_matter(card)[META]
    assert list(meta) == ["intergroup", "isear"]
    eleven = [str(v) for v in range(11)]
    assert meta["intergroup"]["probs_labels"] == [{"rows": {"setting": "P0S1T0"}, "labels": eleven}]
    assert meta["isear"]["probs_labels"] == [{"rows": {}, "labels": list(isear.EMOTIONS)}]
    setting = get_setting("P0S1T0")
    templates = {"intergroup": {"P0S1T0 system": setting.system_template, "P0S1T0 user": setting.user_template},
                 "isear": {"user": isear.TEMPLATE}}
    for suite in ("intergroup", "isear"):
        config = read_manifest(runs[suite]).config
        got = pd.read_parquet(tmp_path / "out" / "data" / f"{suite}.parquet")
        assert list(meta[suite]["columns"]) == list(got.columns) and all(meta[suite]["columns"].values())
        assert meta[suite]["row"] == get_suite(suite).card.row and f"A row is {get_suite(suite).card.row}." in card
        [run] = meta[suite]["runs"]
        assert run["run"] == model_name(config) and run["sweep_setting"] is None and run["model"] == config["model"]
        assert run["options"] == config["options"] and run["templates"] == templates[suite]
        assert run["decoding"] == {k: config[k] for k in DECODING} and run["decoding"]["mode"] == "score"
        labels = {tuple(s["rows"].items()): len(s["labels"]) for s in meta[suite]["probs_labels"]}
        for probs, setting_name in zip(got["probs"], got.get("setting", [None] * len(got))):
            assert len(probs) == labels.get((("setting", setting_name),), labels.get(()))
    options = meta["intergroup"]["runs"][0]["options"]
    assert options["limit_events"] == 1 and options["categories"] == ["religion"] and options["settings"] == ["P0S1T0"]
    decoding = meta["isear"]["runs"][0]["decoding"]
    assert (decoding["temperature"], decoding["max_new_tokens"], decoding["seed"]) == (1.0, 300, 123)  # isear's own
    assert '- rows whose `setting` is `P0S1T0`: `["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]`' in card
    assert f"```text\n{setting.user_template}\n```" in card and f"```text\n{isear.TEMPLATE}\n```" in card
    assert "`limit_events` `1`" in card and "`max_new_tokens` `300`" in card


HOSTILE = "evil`` `\n---\n# <script>alert(1)</script> [x](javascript:alert(1))\r\n```\n..."


def test_hostile_manifest_values_stay_data_in_the_card(runs, tmp_path):
    markdown_it = pytest.importorskip("markdown_it")
    template = f"```` {HOSTILE} Imagine you are {{gender}}.\n---\n\"{{event}}\" <img src=x onerror=alert(1)>" + \
        "x" * 20_000
    hostile = _edited(shutil.copytree(runs["isear"], tmp_path / "run"),
                      lambda m: (m["config"].update(model=HOSTILE), m["config"]["options"].update(template=template)))
    card = export_runs([hostile], tmp_path / "out", [{"model": HOSTILE, "setting": "s"}]).read_text()
    front = card.split("\n")[1:card.split("\n").index("---", 1)]
    assert not [line for line in front if line.startswith(("---", "..."))]
    [run] = _front_matter(card)[META]["isear"]["runs"]
    assert (run["run"], run["model"], run["sweep_setting"]) == (HOSTILE, HOSTILE, "isear--s")
    assert run["options"]["template"] == template and run["templates"] == {"user": template}
    page = markdown_it.MarkdownIt("commonmark").enable("table").render(_body(card))
    assert "<script" not in page and "<img" not in page and "<a " not in page and "<hr" not in page
    assert page.count("<h1>") == 1  # the card's title alone
    blocks = [html.unescape(b) for b in re.findall(r'<pre><code class="language-text">(.*?)</code></pre>', page, re.S)]
    assert blocks == [template.replace("\r", "\\x0d") + "\n"]
    assert html.unescape(page).count(HOSTILE.replace("\n", "\\x0a").replace("\r", "\\x0d")) >= 3  # names, model


@pytest.mark.parametrize("suite, options", [
    ("intergroup", intergroup.Options(categories=("religion",), settings=("P0S0T0", "P0S1T0"), limit_events=1)),
    ("isear", isear.Options(events="project", sample_k=2)),
    ("scm", scm.Options(traits=("warm",), templates=("f01", "i02"))),
    ("giebench", giebench.Options(limit_items=3)),
    ("jaem", jaem.Options(limit=1)),
])
def test_each_suites_declared_labels_are_its_items_answer_sets(suite, options):
    found = get_suite(suite)
    sets = get_suite(suite).card.labels(options)
    items = [i for _, group in found.groups(found.dataset(RunConfig(suite, "m", options=options, mode="score")))
             for i in group]
    for item in items:
        declared = [s.labels for s in sets if all(item.fields[f] == v for f, v in s.rows)]
        assert declared == ([] if item.answers is None else [tuple(map(str, item.answers.names))]), item.item_id
    assert get_suite(suite).card.templates(options, {}) and set(get_suite(suite).card.fields) == set(found.fields)


@pytest.mark.parametrize("suite, options, names, values", [
    ("intergroup", intergroup.Options(settings=("P1S0T0",), limit_events=1),
     lambda i: [f"{i.setting} system", f"{i.setting} user"],
     lambda i: {"perceiver": i.perceiver, "experiencer": i.experiencer, "emotion": i.event.emotion,
                "narrative": i.event.narrative("text")}),
    ("isear", isear.Options(events="project", sample_k=1), lambda i: ["user"],
     lambda i: {"gender": i.gender, "event": i.event, "emotions": ", ".join(isear.EMOTIONS)}),
    ("giebench", giebench.Options(limit_items=2), lambda i: [i.prompt_type],
     lambda i: {"identity": i.item.identity, "question": i.item.question,
                **{f"answer_{letter}": text for letter, text in i.item.answers.items()}}),
])
def test_a_declared_template_filled_with_an_items_values_is_its_prompt(suite, options, names, values):
    found = get_suite(suite)
    templates = get_suite(suite).card.templates(options, {})
    for _, group in found.groups(found.dataset(RunConfig(suite, "m", options=options, mode="score"))):
        item = group[0]
        filled = [templates[name].format(**values(item)) for name in names(item)]
        assert filled == [message["content"] for message in item.prompt().messages]


@pytest.mark.parametrize("suite, options", [
    ("intergroup", intergroup.Options(categories=("religion",), limit_events=1)),  # every setting's templates
    ("isear", isear.Options(events="project", sample_k=1)),
    ("giebench", giebench.Options(limit_items=2)),
    ("scm", scm.Options(traits=("warm",), templates=("f01", "i02"))),
])  # jaem's dialogue slots ({AGE}, {SUBJ}, {is|are}) are its template files' own grammar (its card, its README)
def test_every_placeholder_of_a_declared_template_is_an_item_field_or_defined(suite, options):
    card = get_suite(suite).card
    found = {m for text in card.templates(options, {}).values() if text for m in re.findall(r"\{[^{}]*\}", text)}
    assert found and {m for m in found if m[1:-1] not in get_suite(suite).fields} <= set(card.placeholders)


def test_a_filled_scm_template_is_its_prompt_with_the_definitions_the_card_names():
    options = scm.Options(groups="us-stereotypes", traits=("competent", "warm"), templates=("f01", "i02"))
    suite = get_suite("scm")
    card, templates = suite.card, suite.card.templates(options, {})
    assert {"{question}", "[identity]", "[trait]", "{identity_definition}", "{trait_definition}"} <= set(
        card.placeholders)
    for _, group in suite.groups(suite.dataset(RunConfig("scm", "m", options=options, mode="score"))):
        for item in group:
            question = templates[f"question {item.template}"].replace("[identity]", item.group.name)
            filled = templates["user"].format(question=question.replace("[trait]", item.trait),
                                              identity_definition=item.group.definition,
                                              trait_definition=TRAIT_DEFINITIONS[item.trait])
            assert filled == item.prompt().messages[0]["content"], item.item_id


def test_the_scm_card_gives_each_letters_value_and_defines_its_placeholders(long_model_dir, tmp_path):
    options = scm.Options(groups="us-stereotypes", traits=("competent",), templates=("f01",))
    run_dir = run(RunConfig("scm", str(long_model_dir), options, mode="score", device="cpu", dtype="fp32"),
                  tmp_path / "run", progress=False)
    card = export_runs([run_dir], tmp_path / "out").read_text()
    meta = _front_matter(card)[META]["scm"]
    assert meta["probs_labels"] == [{"rows": {}, "labels": list("ABCDE"),
                                     "values": {"A": 5.0, "B": 4.0, "C": 3.0, "D": 2.0, "E": 1.0}}]
    assert meta["placeholders"] == dict(get_suite("scm").card.placeholders)
    assert ('- every row: `["A", "B", "C", "D", "E"]` (5 labels; as values (`value`, `score_value`, `expected`): '
            "A = 5, B = 4, C = 3, D = 2, E = 1)") in card
    for name, what in get_suite("scm").card.placeholders.items():
        assert f"- `{name}`: {what}" in card
    rows = pd.read_parquet(tmp_path / "out" / "data" / "scm.parquet")
    assert set(rows["expected"].between(1, 5)) == {True}  # `expected` is on the 1-5 scale the card gives


def test_an_export_of_a_users_template_files_says_their_text_is_not_in_it():
    options = jaem.Options(templates=("/mine/a.txt",))
    templates = get_suite("jaem").card.templates(options, {"templates": {"a": "0" * 64}})
    assert templates == {"ce instruction": jaem.samples.CE_PROMPT, "dialogue a": None}
    assert set(get_suite("giebench").card.templates(giebench.Options(data="/release"), {}).values()) == {None}


@pytest.mark.slow
def test_datasets_loads_each_config_by_name_as_the_card_says(runs, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    for name, value in (("HF_DATASETS_OFFLINE", "1"), ("HF_HUB_OFFLINE", "1"), ("HF_HOME", str(tmp_path / "hf"))):
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    card = export_runs([runs["intergroup"], runs["isear"]], out).read_text()
    meta = _front_matter(card)[META]
    for suite in ("intergroup", "isear"):
        expected = pd.read_parquet(out / "data" / f"{suite}.parquet")
        loaded = datasets.load_dataset(str(out), suite, split="train", cache_dir=str(tmp_path / "cache"))
        assert loaded.column_names == list(expected.columns) and loaded.num_rows == len(expected)
        assert loaded["item_id"] == expected["item_id"].tolist() and loaded["sample"] == expected["sample"].tolist()
        assert loaded["probs"] == expected["probs"].map(list).tolist()
        np.testing.assert_array_equal(np.array(loaded["expected"], dtype=float), expected["expected"])  # null: NaN
        [labels] = meta[suite]["probs_labels"]  # one label order per config in these runs
        assert {len(p) for p in loaded["probs"]} == {len(labels["labels"])}
        monkeypatch.chdir(out)  # the card's own code, run where it says: inside the folder
        [code] = [c for c in re.findall(r"```python\n(.*?)```", card, re.S) if f'getcwd(), "{suite}"' in c]
        scope: dict = {}
        exec(code, scope)
        assert scope["rows"].num_rows == len(expected) and os.getcwd() == str(out)


def test_every_built_in_suite_declares_its_card_and_a_suite_by_default_none():
    assert all(get_suite(name).card is not None for name in SUITES) and Suite.card is None


def test_a_suite_that_declares_no_card_is_exported_with_the_card_saying_so(runs, tmp_path, monkeypatch):
    monkeypatch.setattr(type(get_suite("isear")), "card", None)  # as for a suite a script registers
    card = export_runs([runs["isear"]], tmp_path / "out").read_text()
    meta = _front_matter(card)[META]["isear"]
    assert meta["probs_labels"] is None and meta["runs"][0]["templates"] is None and meta["row"] == export.ROW
    assert meta["columns"]["event"] == "the item's `event`, as the isear suite stores it (see its README)"
    assert "The isear suite declares no label order" in card and "None declared (the suite declares none" in card
