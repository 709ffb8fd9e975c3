"""Identity capture of isear (the role-played gender) and jaem (each attribute's first slot): on the tiny model in chat
and plain formats every item's slot is found and stored once per key, a stored span equals a direct forward of the
whole prompt (the prefix rule), and behaviour per identity equals a hand computation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM

import activations.store as activation_store
from activations.capture import resid_post
from activations.spans import prompt_spans
from behavioral.rundir.manifest import Manifest
from behavioral.rundir.manifest import read_manifest
from behavioral.runner import run as run_mod
from behavioral.analysis.runs import Run
from behavioral.inference.chat import PLAIN, SYSTEM
from behavioral.suite.registry import get_suite
from behavioral.suites import isear, jaem
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS
from behavioral.suites.jaem.dimensions import ATTRIBUTES, PROJECT_DIMENSIONS
from behavioral.suites.jaem.metrics import view as jaem_view
from behavioral.suites.jaem.samples import LETTERS, Sample, build_samples
from behavioral.suites.jaem.templates import parse_template, project_templates
from tests.test_jaem import AUTHORS_A

FORMATS = {"chat": SYSTEM, "plain": PLAIN}


def _config(suite: str, model_dir: Path, prompt_format: str) -> run_mod.RunConfig:
    """A small score-mode capture of every span kind and the final token on the CPU (jaem's batches mix scored CE
    items with generated gen items: every item's final state is kept)."""
    if suite == "isear":
        options, kinds = isear.Options(events="project", sample_k=3), ("gender",)
    else:
        options, kinds = jaem.Options(limit=1), ATTRIBUTES
    return run_mod.RunConfig(suite=suite, model=str(model_dir), options=options, mode="score", device="cpu",
                             dtype="fp32", batch_size=4, unit_size=4, capture=(*kinds, "final"), max_new_tokens=2,
                             prompt_format=prompt_format)


@pytest.fixture(scope="module", params=[(s, f) for s in ("isear", "jaem") for f in FORMATS],
                ids=lambda p: "-".join(p))
def captured_isear_jaem(request, tiny_model_dir, long_model_dir, tmp_path_factory):
    """(suite, chat format, run directory, the run's items) of a capture run."""
    suite, prompt_format = request.param
    out = tmp_path_factory.mktemp("capture") / "run"
    config = _config(suite, tiny_model_dir if suite == "isear" else long_model_dir, prompt_format)
    run_mod.run(config, out, progress=False)
    s = get_suite(suite)
    items = [item for _, group in s.groups(s.dataset(config)) for item in group]
    return s, FORMATS[prompt_format], out, items


def test_each_items_slot_is_stored_once_per_key_and_spans_the_identity(captured_isear_jaem, tiny_tokenizer):
    suite, chat_format, out, items = captured_isear_jaem
    assert read_manifest(out).config["chat_format"] == chat_format
    store = activation_store.load(out)
    assert set(store.meta["spans"]) == set(suite.capture.spans)
    for kind, (slot, fields) in suite.capture.spans.items():
        assert store.slot_field(kind) == fields[-1] == slot
        _, index = store.spans(kind)
        keys = {tuple(item.fields[f] for f in fields) for item in items}
        assert len(index) == len(keys) and set(map(tuple, index[list(fields)].itertuples(index=False))) == keys
        for item in items:
            ids, spans = prompt_spans(tiny_tokenizer, item.prompt(), chat_format)
            span = spans[slot]
            assert item.fields[slot].lower() in tiny_tokenizer.decode(ids[span.start:span.end]).lower()


def test_a_stored_span_equals_a_forward_of_a_whole_prompt_with_its_key(captured_isear_jaem, tiny_model_dir,
                                                                       long_model_dir, tiny_tokenizer):
    suite, chat_format, out, items = captured_isear_jaem
    store = activation_store.load(out)
    model_dir = tiny_model_dir if suite.name == "isear" else long_model_dir
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    for kind, (slot, fields) in suite.capture.spans.items():
        states, index = store.spans(kind)
        row = len(index) - 1
        key = tuple(index.loc[row, list(fields)])
        item = [i for i in items if tuple(i.fields[f] for f in fields) == key][-1]  # isear: another event
        ids, spans = prompt_spans(tiny_tokenizer, item.prompt(), chat_format)
        direct = resid_post(model, torch.tensor([ids]))[:, 0]
        span = spans[slot]
        np.testing.assert_allclose(states[:, row], direct[:, span.start:span.end].mean(1).numpy(),
                                   rtol=2e-3, atol=2e-3)


def test_final_cells_are_the_capture_specs_cells(captured_isear_jaem):
    suite, _, out, items = captured_isear_jaem
    _, cells = activation_store.load(out).final()
    cell = list(suite.capture.cell)
    counts = pd.Series([tuple(item.fields[f] for f in cell) for item in items]).value_counts()
    assert dict(zip(map(tuple, cells[cell].itertuples(index=False)), cells["count"])) == counts.to_dict()


def test_isear_capture_refuses_a_template_naming_the_event_first(tiny_model_dir):
    late = 'Consider "{event}". Imagine you are {gender}. Pick one: {emotions}.'
    config = run_mod.RunConfig(suite="isear", model=str(tiny_model_dir), mode="score", capture=("gender",),
                               options=isear.Options(events="project", sample_k=1, template=late))
    with pytest.raises(ValueError, match="before \\{event\\}"):
        isear.SUITE.dataset(config)
    assert isear.SUITE.dataset(run_mod.RunConfig(suite="isear", model="m", mode="score", options=config.options))


def test_jaem_marks_the_first_slot_of_each_attribute_in_context_and_conversation():
    attributes = {"sexuality": "queer", "pronoun": "she", "age": "30", "race": "Black", "ses": "a nurse",
                  "education": "a doctorate", "religion": "Hindu"}
    sample = Sample(parse_template(AUTHORS_A, "a.txt"), attributes, "a/r0", (0, 1, 2, 3, 4))
    for task in ("ce", "gen"):
        prompt = sample.prompt(task)
        text = prompt.messages[0]["content"]
        assert [s.name for s in prompt.slots] == ["pronoun", "sexuality", "religion", "age", "race", "education",
                                                  "ses"]  # AUTHORS_A's order
        for slot in prompt.slots:
            assert prompt.text(slot) == attributes[slot.name] and text.index(attributes[slot.name]) == slot.start
        assert text.count("she has a doctorate") == 1  # {PRONOUN}'s second fill, not marked
        reordered = Sample(sample.template, attributes, "a/r1", (4, 3, 2, 1, 0)).prompt(task).messages[0]["content"]
        assert all(reordered[:slot.end] == text[:slot.end] for slot in prompt.slots)  # the key decides the prefix
        assert prompt.messages == tuple(sample.ce_messages() if task == "ce" else sample.gen_messages())
    tomatoes = Sample(project_templates()[-1], attributes, "t/r0", (0, 1, 2, 3, 4))
    prompt = tomatoes.prompt("gen")
    assert [prompt.text(s) for s in prompt.slots if s.name == "pronoun"] == ["She"]  # {Subj}


def _run(rows: pd.DataFrame, mode: str) -> Run:
    return Run("r", Path("."), Manifest({"mode": mode}, {}, {}), rows, None)


def test_isear_behaviour_is_p_emotion_given_gender_of_the_generated_replies():
    labels = {"a man": ["joy", "joy", "anger", None], "a woman": ["fear", None, None, "fear"],
              "a non-binary person": [None, None, None, None]}
    generated = pd.DataFrame([{"mode": "generate", "item_id": f"e{i}", "gender": g, "repetition": 0,
                               "reply": str(label), "label": label}
                              for g, ls in labels.items() for i, label in enumerate(ls)])
    probs = {f"p_{e}": float(e == "sadness") for e in EMOTIONS}
    scored = generated.assign(mode="score", reply=None, label="sadness", argmax_label="sadness", valid_mass=1.0,
                              **probs)
    run = _run(pd.concat([generated, scored], ignore_index=True), "both")
    frame = isear.SUITE.behaviour(run)
    assert list(frame.columns) == ["kind", "identity", *EMOTIONS] and set(frame["kind"]) == {"gender"}
    table = frame.set_index("identity")
    assert list(table.index) == list(GENDERS)
    assert table.loc["a man", "joy"] == pytest.approx(2 / 3) and table.loc["a man", "anger"] == pytest.approx(1 / 3)
    assert table.loc["a woman", "fear"] == 1.0 and table.loc["a woman", "joy"] == 0.0
    assert table.loc["a non-binary person", list(EMOTIONS)].isna().all()  # no emotion named: undefined, not 0
    men = isear.SUITE.behaviour(run, mode="score", gender="a man")
    assert men["identity"].tolist() == ["a man"] and men.loc[0, "sadness"] == 1.0 and men.loc[0, "joy"] == 0.0


def test_jaem_behaviour_is_ce_accuracy_its_z_and_p_gold_per_attribute_value():
    samples = build_samples(project_templates()[:1], PROJECT_DIMENSIONS, repeats=1)[:6]
    chosen = [s.gold_letter if i in (0, 3) else LETTERS[(LETTERS.index(s.gold_letter) + 1) % 5]
              for i, s in enumerate(samples)]
    probs = [np.eye(5)[LETTERS.index(c)] * 0.6 + 0.08 for c in chosen]
    rows = pd.DataFrame([{"task": "ce", "template": s.template.template_id, "sample_id": s.sample_id,
                          **s.attributes, "speaker_text": s.speaker_text, "response": None, "probs": p,
                          "answer": c, "gold_letter": s.gold_letter, "options": ",".join(s.option_labels)}
                         for s, c, p in zip(samples, chosen, probs)])
    frame = jaem.SUITE.behaviour(_run(jaem_view(rows), "score"))
    assert list(frame.columns) == ["kind", "identity", "ce_correct", "ce_correct_z", "p_gold"]
    assert list(dict.fromkeys(frame["kind"])) == list(ATTRIBUTES)
    correct = np.array([float(c == s.gold_letter) for s, c in zip(samples, chosen)])
    gold = np.array([p[LETTERS.index(s.gold_letter)] for s, p in zip(samples, probs)])
    mean, sd = correct.mean(), correct.std(ddof=1)  # over the run's samples, as the analysis's z
    for attribute in ATTRIBUTES:
        values = [s.attributes[attribute] for s in samples]
        part = frame[frame["kind"] == attribute].set_index("identity")
        assert set(part.index) == set(values)
        for value in part.index:
            mask = np.array(values) == value
            z = (correct[mask].mean() - mean) / (sd / math.sqrt(mask.sum()))
            assert part.loc[value, "ce_correct"] == pytest.approx(correct[mask].mean())
            assert part.loc[value, "ce_correct_z"] == pytest.approx(z, nan_ok=True)
            assert part.loc[value, "p_gold"] == pytest.approx(gold[mask].mean())
