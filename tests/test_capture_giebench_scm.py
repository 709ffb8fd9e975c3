"""GIEBench's and SCM's identity captures on the tiny model, in chat and plain formats: every prompt that names a group
has its slot's span stored once per key, equal to a forward of a whole prompt of that key (the prefix rule); Raw and
swap prompts are left out of the spans; behaviour per identity equals a hand computation and names the identities
the store holds; a resumed capture run finds nothing left to do."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import activations.store as activation_store
from activations.capture import resid_post
from activations.recorder import Recorder
from activations.spans import prompt_spans
from behavioral.rundir.manifest import Manifest
from behavioral.inference import chat
from behavioral.inference import models
from behavioral.analysis import Run, read_runs
from behavioral.runner.run import RunConfig, run
from behavioral.suite.registry import get_suite
from behavioral.suites import giebench as gie
from behavioral.suites import scm
from behavioral.suites.giebench.items import GieItem
from behavioral.suites.giebench.prompts import LETTERS
from behavioral.suites.giebench.items import GieRunItem
from behavioral.suites.giebench.suite import check_shared_opening

OPTIONS = {"giebench": gie.Options(categories=("Age",), swap="Young people=Older people"),
           "scm": scm.Options(groups="us-stereotypes", traits=("warm",), templates=("f01", "i01"))}
KIND = {"giebench": "user", "scm": "group"}
FORMATS = {"chat": chat.SYSTEM, "plain": chat.PLAIN}  # the request, and the format the tiny tokenizer renders it in
CASES = [(suite, request) for suite in OPTIONS for request in FORMATS]
AGE_GROUPS = ["Older people", "Young people"]


def _config(suite: str, request: str, model_dir: Path) -> RunConfig:
    return RunConfig(suite=suite, model=str(model_dir), options=OPTIONS[suite], mode="score", prompt_format=request,
                     device="cpu", dtype="fp32", batch_size=8, capture=(KIND[suite], "final"))


@pytest.fixture(scope="module")
def loaded(long_model_dir):
    model, tokenizer, _ = models.load(str(long_model_dir), "cpu", "fp32")
    return model, tokenizer


@pytest.fixture(scope="module", params=CASES, ids=[f"{s}-{r}" for s, r in CASES])
def captured_giebench_scm(request, long_model_dir, tmp_path_factory):
    """(suite, format, config, run directory) of a score-mode capture run of the identity kind and `final`."""
    suite, asked = request.param
    config = _config(suite, asked, long_model_dir)
    out = tmp_path_factory.mktemp(f"{suite}-{asked}") / "run"
    run(config, out, progress=False)
    return suite, FORMATS[asked], config, out


def _spanned(config: RunConfig) -> dict[tuple, list]:
    """Key -> the run's items whose prompt marks the kind's slot, in run order."""
    suite = get_suite(config.suite)
    slot, fields = suite.capture.spans[KIND[config.suite]]
    keyed: dict[tuple, list] = {}
    for _, items in suite.groups(suite.dataset(config)):
        for item in items:
            if slot in {s.name for s in item.prompt().slots}:
                keyed.setdefault(tuple(item.fields[f] for f in fields), []).append(item)
    return keyed


def _stored_rows(out: Path, kind: str) -> pd.DataFrame:
    """Every index row the store holds for `kind`, across shards (before any de-duplication)."""
    return pd.concat([pd.read_parquet(p) for p in sorted((out / "activations").glob(f"{kind}--*.parquet"))],
                     ignore_index=True)


def test_every_prompt_naming_a_group_has_its_slot_stored_once_per_key(captured_giebench_scm, loaded):
    suite, fmt, config, out = captured_giebench_scm
    _, tokenizer = loaded
    kind = KIND[suite]
    fields = list(get_suite(suite).capture.spans[kind][1])
    keyed = _spanned(config)
    stored = _stored_rows(out, kind)
    assert not stored.duplicated(fields).any()
    assert set(map(tuple, stored[fields].itertuples(index=False))) == set(keyed)
    if suite == "giebench":  # COT and ID prompts of the two groups; Raw and swap prompts hold no `identity` slot
        assert set(keyed) == {(t, g) for t in ("cot", "id") for g in AGE_GROUPS}
    else:  # 2 templates x 16 groups x 1 trait (f01 puts the trait first, so it decides the prefix too)
        assert len(keyed) == 32
    for key, items in keyed.items():
        ids, spans = prompt_spans(tokenizer, items[0].prompt(), fmt)
        span = spans[get_suite(suite).capture.spans[kind][0]]
        assert key[-1] in tokenizer.decode(ids[span.start:span.end])
    store = activation_store.load(out)
    assert store.slot_field(kind) == fields[-1]
    assert store.identities(kind)[1] == sorted({key[-1] for key in keyed})


def test_final_cells_pool_the_cell_fields(captured_giebench_scm):
    suite, _, _, out = captured_giebench_scm
    _, cells = activation_store.load(out).final()
    if suite == "giebench":  # 2 questions per group and prompt type; Young people's swap prompts name Older people
        expected = {(t, g): 2 for t in ("cot", "id", "raw") for g in AGE_GROUPS}
        expected |= {("cot_swap", "Young people"): 2, ("id_swap", "Young people"): 2}
    else:  # one group's question on one trait, pooled over the 2 templates
        expected = {(g.name, "warm"): 2 for g in scm.GROUPS["us-stereotypes"]}
    assert {tuple(row[:-1]): row[-1] for row in cells.itertuples(index=False)} == expected


def _direct(model, tokenizer, prompt, fmt: str, slot: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean and last state (hooks x d) over `slot`'s span of the whole prompt run alone."""
    ids, spans = prompt_spans(tokenizer, prompt, fmt)
    states = resid_post(model, torch.tensor([ids]))[:, 0]
    span = spans[slot]
    return states[:, span.start:span.end].mean(1).numpy(), states[:, span.last].numpy()


def test_stored_span_equals_a_forward_of_another_whole_prompt_of_its_key(captured_giebench_scm, loaded):
    suite, fmt, config, out = captured_giebench_scm
    model, tokenizer = loaded
    kind = KIND[suite]
    slot, fields = get_suite(suite).capture.spans[kind]
    store = activation_store.load(out)
    for key, items in list(_spanned(config).items())[::7]:
        where = dict(zip(fields, key))
        mean, last = _direct(model, tokenizer, items[-1].prompt(), fmt, slot)  # giebench: the other question's
        np.testing.assert_allclose(store.spans(kind, **where)[0][:, 0], mean, rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(store.spans(kind, "last", **where)[0][:, 0], last, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("fmt", list(FORMATS.values()))
def test_a_swap_prompt_opens_as_the_prompt_naming_its_group(fmt, loaded):
    _, tokenizer = loaded
    young = next(i for i in gie.default_items() if i.identity == "Young people")
    older = next(i for i in gie.default_items() if i.identity == "Older people")
    swapped = GieRunItem(young, "cot_swap", "Older people").prompt()
    assert [s.name for s in swapped.slots] == ["swap_to"]
    ids, spans = prompt_spans(tokenizer, swapped, fmt)
    own_ids, own_spans = prompt_spans(tokenizer, GieRunItem(older, "cot").prompt(), fmt)
    span, own = spans["swap_to"], own_spans["identity"]
    assert (span.start, span.end) == (own.start, own.end) and ids[:span.end] == own_ids[:own.end]


def test_a_resumed_capture_run_finds_nothing_left(captured_giebench_scm, tmp_path, monkeypatch):
    _, _, config, out = captured_giebench_scm
    copy = shutil.copytree(out, tmp_path / "run")
    before = sorted(p.name for p in (copy / "activations").iterdir())
    batches = []
    monkeypatch.setattr(Recorder, "add", lambda self, units, states: batches.append(units))
    run(config, copy, progress=False)
    assert batches == []  # not even giebench's Raw prompts, which have no span to store
    assert sorted(p.name for p in (copy / "activations").iterdir()) == before


def test_behaviour_names_the_identities_the_store_holds(captured_giebench_scm):
    suite, _, _, out = captured_giebench_scm
    [read] = read_runs(get_suite(suite), [out])
    frame = get_suite(suite).behaviour(read)
    assert set(frame["kind"]) == {KIND[suite]}
    assert sorted(frame["identity"]) == activation_store.load(out).identities(KIND[suite])[1]


def test_release_prompts_that_open_differently_are_refused_for_capture():
    def item(key: str, opening: str) -> GieItem:
        texts = {t: f"{opening} The user belongs to the Young people group.\nQ?" for t in ("cot", "id")}
        return GieItem(key, "Age", "Young people", dict.fromkeys(("cot", "id", "raw"), "A"),
                       texts=texts | {"raw": "Q?"})

    check_shared_opening([item("a", "Judge."), item("b", "Judge.")], ("cot", "id", "raw"), "rel")
    with pytest.raises(ValueError, match="rel: the cot prompts of items a and c differ before the group"):
        check_shared_opening([item("a", "Judge."), item("c", "Judge!")], ("cot", "id", "raw"), "rel")


# --- behaviour on synthetic rows -------------------------------------------------------------------------------------

def _run(rows: pd.DataFrame, mode: str) -> Run:
    return Run("m", Path("m"), Manifest({"mode": mode}, {}, {}), rows, None)


def _gie_rows() -> pd.DataFrame:
    """View rows: A's questions q1, q2 and B's q3 under COT, ID and Raw, one swap; generate and score rows differ."""
    right = {("q1", "cot"): 1, ("q2", "cot"): 1, ("q1", "id"): 1, ("q2", "id"): 0, ("q1", "raw"): 0, ("q2", "raw"): 0,
             ("q3", "cot"): 0, ("q3", "id"): 1, ("q3", "raw"): 1, ("q1", "cot_swap"): 1}
    rows = []
    for mode in ("generate", "score"):
        for (q, t), ok in right.items():
            ok = ok if mode == "generate" else 1  # every score row right
            rows.append({"mode": mode, "item_id": q, "prompt_type": t, "category": "Age",
                         "identity": "A" if q != "q3" else "B", "swap_to": "B" if t == "cot_swap" else None,
                         "correct": "A", "is_correct": bool(ok), **{f"p_{x}": math.nan for x in LETTERS}})
    return pd.DataFrame(rows)


def test_giebench_behaviour_is_accuracy_per_named_group_and_its_shift_from_raw():
    frame = gie.SUITE.behaviour(_run(_gie_rows(), "both")).set_index("identity")
    assert list(frame.columns) == ["kind", "accuracy_cot", "accuracy_id", "accuracy_raw", "shift_cot", "shift_id"]
    assert frame.loc["A", "accuracy_cot":].tolist() == [1.0, 0.5, 0.0, 1.0, 0.5]  # the swap row is not A's COT
    assert frame.loc["B", "accuracy_cot":].tolist() == [0.0, 1.0, 1.0, -1.0, 0.0]
    score = gie.SUITE.behaviour(_run(_gie_rows(), "both"), mode="score").set_index("identity")
    assert score.loc["A", "accuracy_cot":].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]


def _scm_rows() -> pd.DataFrame:
    """View rows of a generate run: White rated on warm (5 by f01, 3 by i01), friendly (2 by f01) and competent (4 by
    f01, unparsed by i01); Black on warm (2) with competent unparsed; immigrants never parsed."""
    cells = [("White people", "warm", "f01", 5), ("White people", "warm", "i01", 3),
             ("White people", "friendly", "f01", 2), ("White people", "competent", "f01", 4),
             ("White people", "competent", "i01", None), ("Black people", "warm", "f01", 2),
             ("Black people", "competent", "f01", None), ("immigrants", "warm", "f01", None)]
    return pd.DataFrame([{"group": g, "trait": t, "template": f, "sample": 0,
                          "status": "unparsed" if r is None else "ABCDE"[5 - r], "rating": math.nan if r is None else r}
                         for g, t, f, r in cells])


def test_scm_behaviour_is_warmth_and_competence_per_group_as_the_mean_of_cell_means():
    frame = scm.SUITE.behaviour(_run(_scm_rows(), "generate"))
    assert list(frame.columns) == ["kind", "identity", "warmth", "competence"]
    assert frame["identity"].tolist() == ["White people", "Black people", "immigrants"]  # the suite's order
    np.testing.assert_array_equal(frame[["warmth", "competence"]].to_numpy(),
                                  [[(4 + 2) / 2, 4], [2, math.nan], [math.nan, math.nan]])
    f01 = scm.SUITE.behaviour(_run(_scm_rows(), "generate"), template="f01").set_index("identity")
    assert f01.loc["White people", ["warmth", "competence"]].tolist() == [(5 + 2) / 2, 4]
    with pytest.raises(ValueError, match="no field 'setting'"):
        scm.SUITE.behaviour(_run(_scm_rows(), "generate"), setting="x")
