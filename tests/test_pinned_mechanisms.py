"""Pinned numbers of the mechanistic pipeline, made before the interp/activations refactor: a small intergroup
capture run on the tests' tiny fp32 Llama (tests/data/pinned_capture/, made by its make.py with the code of commit
adeb179), and every number that code computed from it (expected.json). Each test recomputes one quantity with the
current code and asserts it equals the pin.

When an API moves, change ONLY the adapter functions in the first section (each names the old call it replaces);
never the numbers in expected.json. Tolerances: rtol 1e-6 on float statistics (float64 over the pinned float16
vectors, and fp32 CPU forwards that are bitwise reproducible across thread counts on one machine), exact for names,
ordering and counts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from activations import store as activation_store
from behavioral.suites.intergroup import activations as views
from behavioral.suites.intergroup.groups import get_category

DATA = Path(__file__).resolve().parent / "data" / "pinned_capture"
MODEL, RUN = DATA / "model", DATA / "run"
SETTING = "P0S0T0"
CATEGORIES = ("religion", "race")
REDUCTIONS = ("mean", "last")
RTOL = 1e-6
# What make.py computed with (change neither: the pins depend on them).
N_PERMUTATIONS, SEED = 50, 0
RELIGION_LABELS = {"a Christian": "A", "a Muslim": "B", "a Jew": "A", "a Buddhist": "B", "a Hindu": "A"}
BATCH_SIZE = 16
PROBE_RUNS = {"religion_ingroup_sample": ("religion", "ingroup", "sample"),
              "race_ingroup_sample": ("race", "ingroup", "sample"),
              "race_ingroup_cell": ("race", "ingroup", "cell"),
              "race_perceiver_group_event": ("race", "perceiver_group", "event")}


# --- adapters: the only code to change when an API moves -----------------------------------------------------------
#
# Reads of the activation store. The old ActivationStore.persona/experiencer/final/final_samples(category, setting)
# are intergroup's views on the generic store now (Table 1 order, "a person" first, as the pins hold).

def load_store(run_dir: Path):
    """Old: activations.store.load(run_dir)."""
    return activation_store.load(run_dir)


def store_hooks(store) -> list[str]:
    """Old: store.hooks."""
    return list(store.hooks)


def persona_vectors(store, category: str, reduction: str) -> tuple[np.ndarray, list[str]]:
    """Old: store.persona(category, SETTING, reduction) -> (hooks × identities × d, identities in Table 1 order)."""
    return views.persona(store, category, SETTING, reduction)


def experiencer_vectors(store, category: str, reduction: str) -> tuple[np.ndarray, pd.DataFrame]:
    """Old: store.experiencer(category, SETTING, reduction) -> (hooks × pairs × d, perceiver/experiencer frame)."""
    return views.experiencer(store, category, SETTING, reduction)


def final_means(store, category: str) -> tuple[np.ndarray, pd.DataFrame]:
    """Old: store.final(category, SETTING) -> (hooks × cells × d, perceiver/experiencer/count frame)."""
    return views.final(store, category, SETTING)


def final_samples(store, category: str) -> tuple[np.ndarray, pd.DataFrame]:
    """Old: store.final_samples(category, SETTING) -> (hooks × samples × d, item fields per sample)."""
    return views.final_samples(store, category, SETTING)


def identity_vectors(store, category: str, span: str, reduction: str, perceiver: str) -> tuple[np.ndarray, list[str]]:
    """Old: interp.clusters.identity_vectors(store, category, SETTING, span, reduction, perceiver) ("a person" left
    out; perceiver "a person" or "mean" for the experiencer span). New: interp.identities.read_identities
    on the store's rows of the category and setting (and of the perceiver, unless "mean"), in the suite's order."""
    from interp.identities import read_identities
    from behavioral.suites.intergroup import SUITE

    where = {"category": category, "setting": SETTING}
    if span == "experiencer" and perceiver != "mean":
        where["perceiver"] = perceiver
    read = read_identities(store, SUITE, span, reduction, where)
    return read.vectors, read.names


def category_labels(category: str, identities: list[str]) -> list[str] | None:
    """Old: interp.clusters.category_labels(category, identities). New: the intergroup suite's identity_set
    grouping."""
    from behavioral.suites.intergroup import SUITE

    return SUITE.identity_set("persona", identities)[1]


def layer_stats(store, category: str, span: str) -> pd.DataFrame:
    """Old: interp.clusters.layer_stats(store, labels, category=, setting=SETTING, span=, n_permutations=, seed=), the
    labels the category's groups (race) or RELIGION_LABELS (religion has no grouping). New: layer_stats on the
    identity vectors with their labels."""
    from interp import clusters

    vectors, names = identity_vectors(store, category, span, "mean", "a person")
    labels = category_labels(category, names) if category == "race" else [RELIGION_LABELS[n] for n in names]
    return clusters.layer_stats(vectors, labels, store_hooks(store), n_permutations=N_PERMUTATIONS, seed=SEED)


def behaviour_matrix(run_dir: Path, category: str) -> np.ndarray:
    """Old: M0[p, x], the mean expected intensity over the events of behavioral.suites.intergroup.suite.results(run)
    rows, every identity in Table 1 order ("a person" first)."""
    from behavioral.suites.intergroup.items import results

    rows = results(run_dir)
    rows = rows[(rows["category"] == category) & (rows["setting"] == SETTING)]
    names = list(get_category(category).with_unspecified)
    M0 = rows.pivot_table(index="perceiver", columns="experiencer", values="expected_intensity", aggfunc="mean")
    return M0.reindex(index=names, columns=names).to_numpy(dtype=np.float64)


def layer_rsa(persona: np.ndarray, M_rows: np.ndarray, hooks: list[str], control: np.ndarray) -> pd.DataFrame:
    """Old: interp.rsa.layer_rsa(persona, M_rows, hooks, n_permutations=, seed=, control=)."""
    from interp import rsa

    return rsa.layer_rsa(persona, M_rows, hooks, n_permutations=N_PERMUTATIONS, seed=SEED, control=control)


def difference_matrix(values) -> np.ndarray:
    """Old: interp.rsa.difference_matrix(values)."""
    from interp import rsa

    return rsa.difference_matrix(values)


def layer_probes(store, category: str, target: str, split: str) -> pd.DataFrame:
    """Old: interp.probes.layer_probes(store, category, SETTING, target, cv=2, seed=SEED, split=, n_shuffles=1). New:
    interp.probes.study.probe_table with the intergroup suite's labels (split "event" is the field event_id),
    without the control task the old call did not have."""
    from interp.probes.study import probe_table
    from behavioral.suites.intergroup import SUITE

    split_by = "event_id" if split == "event" else split
    table = probe_table(store, SUITE, {"category": category, "setting": SETTING}, [target], [split_by],
                        store_hooks(store), cv=2, seed=SEED, n_shuffles=1, matchings=0)
    return table.assign(category=category, setting=SETTING, split=split)


def ingroup_direction(store, category: str, unit: bool) -> np.ndarray:
    """Old: interp.steering.ingroup_direction(store, category, SETTING, unit=unit) -> [hooks, d]. New: the intergroup
    steering protocol's ingroup_direction (interp.steering.mean_difference over the suite's in-group label)."""
    from behavioral.suites.intergroup import steering

    return steering.ingroup_direction(store, category, SETTING, unit=unit)


def load_model():
    """Old: behavioral.inference.models.load(model_dir, "cpu", "fp32") -> (model, tokenizer, info)."""
    from behavioral.inference import models

    return models.load(str(MODEL), "cpu", "fp32")


def make_engine(model, tokenizer):
    """Old: behavioral.inference.engine.Engine(model, tokenizer, batch_size=BATCH_SIZE)."""
    from behavioral.inference.engine import Engine

    return Engine(model, tokenizer, batch_size=BATCH_SIZE)


def pinned_event(event_id: str):
    """The embedded event of that id (old: found among behavioral.suites.intergroup.corpus.sample_events(
    embedded_events(), 3), which the pinned run drew with the sampler of its day)."""
    from behavioral.suites.intergroup.corpus import embedded_events

    return next(e for e in embedded_events() if e.event_id == event_id)


def steered_scores(engine, store, perceiver: str, experiencer: str, event, layer: int, coef: float) -> tuple[dict, dict]:
    """Old: the engine's score of one patching prompt (interp.patching.build / get_trie) plain, then inside
    interp.steering.steer(model, layer, coef × the unit religion in-group direction's row of that layer). New: the
    prompt and trie from the intergroup patching protocol (build, setting_trie)."""
    from behavioral.inference import chat
    from behavioral.suites.intergroup import patching as P
    from interp import steering

    tokenizer = engine.tokenizer
    target = P.build(tokenizer, SETTING, perceiver, experiencer, event, chat.detect_format(tokenizer))
    trie = P.setting_trie(tokenizer, SETTING)
    direction = ingroup_direction(store, "religion", unit=True)[steering.hook_row(store_hooks(store), layer)]

    def score() -> dict:
        (s,) = engine.score([list(target.ids)], trie)
        return {"greedy": s.greedy, "expected": float(s.expected), "valid_mass": float(s.valid_mass),
                "start_mass": float(s.start_mass)}

    plain = score()
    with steering.steer(engine.model, layer, direction, coef=coef, engine=engine):
        steered = score()
    return plain, steered


def patched_gap(engine, setting: str, event, layers: list[int], positions: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Old: interp.patching.patched_gap_prompts(engine, "religion", setting, [event], layers, positions=) and
    interp.patching.gap_table(frame, "religion") -> (per-prompt frame, δ table). New: the same functions of the
    intergroup patching protocol."""
    from behavioral.suites.intergroup import patching as P

    frame = P.patched_gap_prompts(engine, "religion", setting, [event], layers, positions=positions)
    return frame, P.gap_table(frame, "religion")


# --- comparisons ---------------------------------------------------------------------------------------------------

def assert_checksum(array, pinned: dict, rtol: float = RTOL) -> None:
    """An array against its pinned shape, sum, sum of squares and first five values."""
    a = np.asarray(array, dtype=np.float64)
    flat = a.ravel()
    assert list(a.shape) == pinned["shape"]
    np.testing.assert_allclose(flat[:5], pinned["first"], rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(flat.sum(), pinned["sum"], rtol=rtol, atol=1e-9 * max(1.0, math.sqrt(pinned["sumsq"])))
    np.testing.assert_allclose((flat * flat).sum(), pinned["sumsq"], rtol=rtol)


def assert_table(frame: pd.DataFrame, pinned: dict[str, list], rtol: float = RTOL, atol: float = 1e-12) -> None:
    """The pinned columns of a table, in row order: numbers to rtol and atol (NaN equal to NaN), everything else
    exactly."""
    missing = sorted(set(pinned) - set(frame.columns))
    assert not missing, f"columns {missing} missing; have {list(frame.columns)}"
    for column, values in pinned.items():
        got = frame[column].tolist()
        assert len(got) == len(values), column
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values if v is not None):
            np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(values, dtype=np.float64),
                                       rtol=rtol, atol=atol, equal_nan=True, err_msg=column)
        else:
            assert [v.item() if hasattr(v, "item") else v for v in got] == values, column


# --- fixtures ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((DATA / "expected.json").read_text())


@pytest.fixture(scope="module")
def store():
    return load_store(RUN)


@pytest.fixture(scope="module")
def engine():
    model, tokenizer, _ = load_model()
    return make_engine(model, tokenizer)


# --- the store -----------------------------------------------------------------------------------------------------

def test_hooks(store, expected):
    assert store_hooks(store) == expected["hooks"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("category", CATEGORIES)
def test_persona_vectors(store, expected, category, reduction):
    vectors, names = persona_vectors(store, category, reduction)
    pinned = expected["store"][category][f"persona_{reduction}"]
    assert names == pinned["names"]
    assert_checksum(vectors, pinned["vectors"])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("category", CATEGORIES)
def test_experiencer_vectors(store, expected, category, reduction):
    vectors, pairs = experiencer_vectors(store, category, reduction)
    pinned = expected["store"][category][f"experiencer_{reduction}"]
    assert_table(pairs, pinned["pairs"])
    assert_checksum(vectors, pinned["vectors"])


@pytest.mark.parametrize("category", CATEGORIES)
def test_final_means(store, expected, category):
    means, cells = final_means(store, category)
    pinned = expected["store"][category]["final"]
    assert_table(cells, pinned["cells"])
    assert_checksum(means, pinned["means"])


@pytest.mark.parametrize("category", CATEGORIES)
def test_final_samples(store, expected, category):
    samples, index = final_samples(store, category)
    pinned = expected["store"][category]["final_samples"]
    assert set(pinned["columns"]) <= set(index.columns)
    assert_table(index, pinned["index"])
    assert_checksum(samples, pinned["samples"])


# --- clusters ------------------------------------------------------------------------------------------------------

IDENTITY_VECTORS = [(span, reduction, perceiver) for span, perceiver in
                    (("persona", "a person"), ("experiencer", "a person"), ("experiencer", "mean"))
                    for reduction in REDUCTIONS]


@pytest.mark.parametrize("span,reduction,perceiver", IDENTITY_VECTORS)
@pytest.mark.parametrize("category", CATEGORIES)
def test_identity_vectors(store, expected, category, span, reduction, perceiver):
    vectors, names = identity_vectors(store, category, span, reduction, perceiver)
    key = f"identity_vectors_{span}_{reduction}" + ("_mean_perceiver" if perceiver == "mean" else "")
    pinned = expected["clusters"][category][key]
    assert names == pinned["names"]
    assert_checksum(vectors, pinned["vectors"])


@pytest.mark.parametrize("category", CATEGORIES)
def test_category_labels(expected, category):
    assert category_labels(category, list(get_category(category).identities)) == \
        expected["clusters"][category]["category_labels"]


@pytest.mark.parametrize("span", ["persona", "experiencer"])
@pytest.mark.parametrize("category", CATEGORIES)
def test_layer_stats(store, expected, category, span):
    assert_table(layer_stats(store, category, span), expected["clusters"][category][f"layer_stats_{span}"])


# --- behaviour and RSA ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("category", CATEGORIES)
def test_behaviour_matrix(expected, category):
    np.testing.assert_allclose(behaviour_matrix(RUN, category), expected["behaviour"][category]["M0"], rtol=RTOL)


@pytest.mark.parametrize("category", CATEGORIES)
def test_layer_rsa(store, expected, category):
    persona, names = persona_vectors(store, category, "mean")  # make.py: the persona's identity_vectors
    assert names[0] == "a person"
    persona, names = persona[:, 1:], names[1:]
    control = difference_matrix([len(n) for n in names])
    table = layer_rsa(persona, behaviour_matrix(RUN, category)[1:], store_hooks(store), control)
    assert_table(table, expected["rsa"][category])


# --- probes --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", list(PROBE_RUNS))
def test_layer_probes(store, expected, key):
    assert_table(layer_probes(store, *PROBE_RUNS[key]), expected["probes"][key])


# --- steering ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("category", CATEGORIES)
def test_ingroup_direction(store, expected, category):
    pinned = expected["steering"][category]
    assert_checksum(ingroup_direction(store, category, unit=False), pinned["direction"])
    assert_checksum(ingroup_direction(store, category, unit=True), pinned["unit_direction"])


def test_steered_score(store, engine, expected):
    pinned = expected["steering"]["score"]
    plain, steered = steered_scores(engine, store, pinned["perceiver"], pinned["experiencer"],
                                    pinned_event(pinned["event_id"]), pinned["layer"], pinned["coef"])
    for got, want in ((plain, pinned["plain"]), (steered, pinned["steered"])):
        assert got["greedy"] == want["greedy"]
        for key in ("expected", "valid_mass", "start_mass"):
            assert got[key] == pytest.approx(want[key], rel=RTOL), key


# --- patching ------------------------------------------------------------------------------------------------------

def test_patched_gap(engine, expected):
    pinned = expected["patching"]
    frame, table = patched_gap(engine, pinned["setting"], pinned_event(pinned["event_id"]), pinned["layers"],
                               pinned["positions"])
    assert len(frame) == pinned["prompts"]["n"]
    assert_table(frame, pinned["prompts"]["keys"])
    assert_checksum(frame["expected"], pinned["prompts"]["expected"])
    assert_checksum(frame["expected_clean"], pinned["prompts"]["expected_clean"])
    # atol: δ divides a raw gap of about 2e-4 points by σ(M⁰) ≈ 0.006 (the tiny random model rates every cell alike),
    # so float noise of 1e-8 in the expected intensities, far inside their rtol above, moves δ by up to ~3e-5
    # (measured on an AMD EPYC CPU against the pin's machine: delta_change -0.012115 vs -0.012147), and
    # delta_removed, a ratio of two such δ, by up to ~1.2e-3 (-0.3773 vs -0.3785); every real effect of patching is
    # 1e-2 or larger
    ratio = ["delta_removed"]
    assert_table(table, {k: v for k, v in pinned["gap_table"].items() if k not in ratio}, atol=1e-4)
    assert_table(table, {k: pinned["gap_table"][k] for k in ratio}, atol=5e-3)
