"""jaem's measures: the VAD distance by the project's rule (not Lee et al.'s), lexicon files and their errors, the
HF ERA scorer on a tiny random 3-label classifier, the per-attribute analysis on a null and a planted answerer, and
the comparison of the two as runs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from behavioral.rundir.manifest import Manifest
from behavioral.analysis import Run
from behavioral.rundir.run import Completeness
from behavioral.suites import jaem
from behavioral.suites.jaem.samples import LETTERS
from behavioral.suites.jaem.suite import JaemItem
from behavioral.suites.jaem.tables import effects
from tests.test_jaem import make_era_classifier

LEXICON = "# a comment\nTerm\tValence\tArousal\tDominance\nHappy\t0.9\t0.6\t0.7\nsad\t0.1\t0.4\t0.2\ncan't\t0.2\t0.5\t0.3\n"


def _lexicon(tmp_path, text: str = LEXICON):
    path = tmp_path / "vad.tsv"
    path.write_text(text, encoding="utf-8")
    return jaem.load_vad_lexicon(path)


def test_vad_distance_is_the_difference_of_maxima(tmp_path):
    lexicon = _lexicon(tmp_path)
    assert lexicon.scale == "[0,1]" and set(lexicon.terms) == {"happy", "sad", "can't"}
    assert lexicon.maxima("I can't. SAD, so sad; unknown") == (0.2, 0.5, 0.3)
    d = lexicon.distance("I am so sad", "Be happy, not sad!")
    assert d == pytest.approx(jaem.VadDistance(0.9 - 0.1, 0.6 - 0.4, 0.7 - 0.2))
    assert all(math.isnan(x) for x in lexicon.distance("nothing here", "happy"))
    assert all(math.isnan(x) for x in lexicon.distance("sad", ""))
    v2 = _lexicon(tmp_path, "joy\t0.9\t0.2\t0.1\ngloom\t-0.8\t-0.3\t-0.5\n")
    assert v2.scale == "[-1,1]" and v2.distance("gloom", "joy").v == pytest.approx(1.7)
    demo = jaem.load_vad_lexicon("demo")
    assert demo.demo and 70 <= len(demo.terms) <= 90 and demo.scale == "[0,1]" and len(demo.sha256) == 64


@pytest.mark.parametrize("text, where", [
    ("happy\t0.9\t0.6\n", ":1:"), ("a\t0.1\t0.2\t0.3\nb\tx\t0.2\t0.3\n", ":2:"), ("a\t1.5\t0\t0\n", ":1:"),
    ("# only a comment\n", "no lexicon entries"),
])
def test_bad_lexicon_lines_name_file_and_line(tmp_path, text, where):
    with pytest.raises(jaem.JaemInputError, match=f"vad.tsv{where}" if where.startswith(":") else where):
        _lexicon(tmp_path, text)


def test_a_duplicated_lexicon_term_is_refused_with_both_lines(tmp_path):
    with pytest.raises(jaem.JaemInputError, match=r"vad.tsv: term 'sad' appears on lines 4 and 6; expected each "
                                                  r"term once \(terms are lowercased\)$"):
        _lexicon(tmp_path, LEXICON + "SAD\t0.3\t0.4\t0.2\n")


def test_hf_era_scorer_labels_pairs_with_three_label_classifiers(tiny_tokenizer):
    models = {d: (make_era_classifier(tiny_tokenizer, seed=i), tiny_tokenizer) for i, d in enumerate(("IP", "EX", "ER"))}
    scorer = jaem.HFEraScorer(models, batch_size=2)
    seekers = ["I cannot sleep", "My dog died yesterday and I miss him", "I won"]
    responses = ["That sounds hard.", "I am so sorry.", "Congratulations! " * 60]
    labels = scorer.score(seekers, responses)
    assert set(labels) == {"IP", "EX", "ER"} and all(len(v) == 3 and set(v) <= {0, 1, 2} for v in labels.values())
    assert scorer.score(seekers, responses) == labels
    single = jaem.HFEraScorer(models, batch_size=1).score(seekers, responses)
    assert single == labels  # padding does not change a label
    model, tok = models["IP"]
    side = tok("congratulations! " * 60, add_special_tokens=False)["input_ids"]
    assert len(side) > 64
    with torch.no_grad():
        batch = tok(["i won"], [tok.decode(side[:64])], return_tensors="pt")
        assert labels["IP"][2] == int(model(**batch).logits.argmax(-1))  # lowercased, cut to 64 tokens a side


def test_era_needs_three_labels_and_every_dimension(tiny_tokenizer):
    two = make_era_classifier(tiny_tokenizer, num_labels=2)
    three = (make_era_classifier(tiny_tokenizer), tiny_tokenizer)
    with pytest.raises(jaem.JaemInputError, match="ERA classifier EX .* has 2 labels; expected 3"):
        jaem.HFEraScorer({"IP": three, "EX": (two, tiny_tokenizer), "ER": three})
    with pytest.raises(jaem.JaemInputError, match="missing for ER"):
        jaem.HFEraScorer({"IP": three, "EX": three})
    from behavioral.suites.jaem.era import parse_era_models
    with pytest.raises(jaem.JaemInputError, match="missing EX"):
        parse_era_models("IP=a,ER=b")
    assert parse_era_models("ip=a, EX=b,ER=c") == {"IP": "a", "EX": "b", "ER": "c"}


def test_attribute_effects_z_and_omnibus():
    df = pd.DataFrame({"g": ["a"] * 4 + ["b"] * 4, "x": [1.0, 2, 3, 4, 5, 6, 7, 8]})
    out = jaem.attribute_effects(df, "x", by="g")
    sd = df["x"].std(ddof=1)
    assert out["z"].tolist() == pytest.approx([(2.5 - 4.5) / (sd / 2), (6.5 - 4.5) / (sd / 2)])
    assert out.attrs["omnibus_test"] == "kruskal" and 0 < out.attrs["omnibus_p"] < 0.05


WORDS = ["table", "window", "happy", "sad", "calm", "tired", "storm", "okay", "quiet", "music", "home", "forms"]


def _synthetic_rows(p_gold, reply) -> pd.DataFrame:
    """Result rows (as read_results gives them) of a generate-mode run on the project's 972 samples."""
    rng = np.random.default_rng(11)
    rows = []
    for s in jaem.build_samples(jaem.project_templates(), jaem.PROJECT_DIMENSIONS, seed=0):
        ce, gen = JaemItem("ce", s), JaemItem("gen", s)
        p = p_gold(s.attributes)
        others = [c for c in LETTERS if c != s.gold_letter]
        letter = rng.choice(list(LETTERS)) if p is None else s.gold_letter if rng.random() < p else rng.choice(others)
        text = f"**{letter}**"
        response = reply(s.attributes, rng)
        for item, resp in ((ce, text), (gen, response)):
            answer = item.parse(resp).label
            rows.append({"response": resp, "answer": answer, "probs": None, **item.fields})
    return pd.DataFrame(rows)


def _metrics(rows: pd.DataFrame, lexicon=None) -> pd.DataFrame:
    """Per-sample metrics of result rows, read through the suite's view."""
    return jaem.sample_metrics(jaem.SUITE.view(rows, {}), lexicon)


def _uniform(attributes):
    return None  # every letter alike


def _random_text(attributes, rng):
    return " ".join(rng.choice(WORDS, 6))


def _significant(per_value: pd.DataFrame, per_attr: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    return per_value[per_value["p_holm"] < 0.05], per_attr[per_attr["p_holm"] < 0.05]


def test_null_answerer_shows_no_attribute_effect():
    metrics = _metrics(_synthetic_rows(_uniform, _random_text), jaem.load_vad_lexicon("demo"))
    assert len(metrics) == 972
    assert metrics["ce_correct"].mean() == pytest.approx(0.20, abs=0.04)
    per_value, per_attr = effects(metrics)
    assert set(per_value["metric"]) == {"ce_correct", "vad_v", "vad_a", "vad_d"}
    values, attrs = _significant(per_value, per_attr)
    assert values.empty and attrs.empty


def test_ce_correct_counts_unparsed_as_wrong_and_reads_scores_by_argmax():
    rows = _synthetic_rows(_uniform, _random_text)
    ce = rows[rows["task"] == "ce"].head(4).copy()
    gold = ce["gold_letter"].tolist()
    wrong = next(c for c in LETTERS if c != gold[3])
    ce["answer"] = [None, gold[1], wrong, wrong]  # a score-mode row stores the greedy in-set label, not the argmax
    ce["response"] = ["no idea", "x", None, "**" + wrong]
    ce["probs"] = [None, None, *([0.1 if c != g else 0.6 for c in LETTERS] for g in gold[2:])]
    metrics = _metrics(ce).set_index("sample_id").loc[ce["sample_id"]]
    assert metrics["ce_correct"].tolist() == [0.0, 1.0, 1.0, 0.0]  # both mode: the generated reply's letter
    assert metrics["ce_source"].tolist() == ["generate", "generate", "score", "generate"]
    assert metrics["argmax_letter"].tolist()[2:] == gold[2:] and metrics["argmax_letter"].iloc[:2].isna().all()
    assert metrics["ce_label"].tolist()[:3] == ["none", "Empathetic", "Empathetic"]
    assert metrics["p_gold"].iloc[:2].isna().all() and metrics["p_gold"].iloc[2:].tolist() == pytest.approx([0.6] * 2)


def _planted_gold(attributes):
    return 0.9 if attributes["sexuality"] == "asexual" else None


def _planted_reply(attributes, rng):
    words = ["wonderful", "happy", "joy"] if attributes["pronoun"] == "they" else rng.choice(WORDS, 6)
    return " ".join(words)


def test_planted_bias_is_found_in_that_attribute_only():
    metrics = _metrics(_synthetic_rows(_planted_gold, _planted_reply), jaem.load_vad_lexicon("demo"))
    per_value, per_attr = effects(metrics)
    ce = per_value[(per_value["metric"] == "ce_correct") & (per_value["attribute"] == "sexuality")]
    top = ce.loc[ce["z"].abs().idxmax()]
    assert top["value"] == "asexual" and top["z"] > 0 and top["p"] < 1e-6
    values, attrs = _significant(per_value[per_value["metric"] == "ce_correct"],
                                 per_attr[per_attr["metric"] == "ce_correct"])
    assert set(values["attribute"]) <= {"sexuality", "sexuality × pronoun"}
    assert "asexual" in set(values["value"])  # others may sit below a mean that asexual pulled up
    assert set(attrs["attribute"]) <= {"sexuality", "sexuality × pronoun"} and "sexuality" in set(attrs["attribute"])
    v = per_value[(per_value["metric"] == "vad_v") & (per_value["attribute"] == "pronoun")]
    top = v.loc[v["z"].abs().idxmax()]
    assert top["value"] == "they" and top["p"] < 1e-6
    values, attrs = _significant(per_value[per_value["metric"] == "vad_v"], per_attr[per_attr["metric"] == "vad_v"])
    assert set(attrs["attribute"]) <= {"pronoun", "sexuality × pronoun"} and "pronoun" in set(attrs["attribute"])
    assert set(values["attribute"]) <= {"pronoun", "sexuality × pronoun"} and "they" in set(values["value"])


def _run(name: str, rows: pd.DataFrame) -> Run:
    """A finished run of `rows` as the analysis reads it."""
    return Run(name, Path(name), Manifest({"suite": "jaem", "options": {"tasks": ["ce", "gen"]}}, {}, {}),
               jaem.SUITE.view(rows, {}), Completeness(8, len(rows), 8, len(rows)))


def test_two_runs_compare_ce_accuracy_and_attribute_effects():
    null_rows, planted_rows = _synthetic_rows(_uniform, _random_text), _synthetic_rows(_planted_gold, _planted_reply)
    analysis = jaem.SUITE.analyze([_run("null", null_rows), _run("planted", planted_rows)],
                                  jaem.AnalyzeOptions(vad_lexicon="demo"))
    tables = {t.name: t.frame for t in analysis.tables()}
    lexicon = jaem.load_vad_lexicon("demo")
    metrics = {"null": _metrics(null_rows, lexicon), "planted": _metrics(planted_rows, lexicon)}
    accuracy = tables["compare_ce"].set_index("run")
    for name, m in metrics.items():
        assert accuracy.loc[name, "ce_correct"] == pytest.approx(m["ce_correct"].mean())
        assert accuracy.loc[name, "ce_samples"] == 972
        assert accuracy.loc[name, "chose_empathetic"] == pytest.approx((m["ce_label"] == "Empathetic").mean())
        per_value, per_attr = effects(m)
        z = tables["compare_z"].set_index(["metric", "attribute", "value"])[name]
        assert z.to_numpy() == pytest.approx(per_value.set_index(["metric", "attribute", "value"])["z"]
                                             .reindex(z.index).to_numpy(), nan_ok=True)
        omnibus = tables["compare_omnibus"].set_index(["metric", "attribute"])[name]
        assert omnibus.to_numpy() == pytest.approx(per_attr.set_index(["metric", "attribute"])["p_holm"]
                                                   .reindex(omnibus.index).to_numpy(), nan_ok=True)
    omnibus = tables["compare_omnibus"].set_index(["metric", "attribute"])
    for cell in (("ce_correct", "sexuality"), ("vad_v", "pronoun")):
        assert omnibus.loc[cell, "planted"] < 1e-6 and omnibus.loc[cell, "null"] > 0.05
    pairs = tables["run_pairs"].set_index("metric")
    assert (pairs["a"] == "null").all() and (pairs["b"] == "planted").all()
    assert pairs.loc["ce_correct", "mean_a"] == pytest.approx(metrics["null"]["ce_correct"].mean())
    assert pairs.loc["ce_correct", "p_holm"] < 1e-3
    table1 = tables["table1"]
    assert list(dict.fromkeys(table1["run"])) == ["null", "planted"] and set(table1["count"]) == {243}
    largest = tables["largest_effects"].set_index(["run", "metric"])
    assert largest.loc[("planted", "ce_correct"), "value"] == "asexual"
    assert largest.loc[("null", "ce_correct"), "values_significant"] == 0
