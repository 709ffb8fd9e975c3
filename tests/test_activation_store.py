"""The generic activation store: reads by a capture spec's own fields, for any suite."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import activations.store as activation_store
from activations.store import ActivationStoreError, write_meta, write_shard

HOOKS = ["hook_embed", "blocks.0.hook_resid_post"]
D = 3


def _meta() -> dict:
    return {"hooks": HOOKS, "layers": [0], "d_model": D, "kinds": ["group", "final"], "per_cell_samples": 1,
            "dtype": "float16", "reductions": ["mean", "last"], "cell": ["template", "group"],
            "spans": {"group": {"slot": "identity", "fields": ["template", "group"]}}}


def _span_array(values: list[float]) -> np.ndarray:
    """[rows, 2 reductions, hooks, d]: mean = v, last = -v, hook 1 = 10 v."""
    out = np.zeros((len(values), 2, len(HOOKS), D), dtype=np.float32)
    for i, v in enumerate(values):
        out[i, 0] = [[v] * D, [10 * v] * D]
        out[i, 1] = -out[i, 0]
    return out


@pytest.fixture
def store(tmp_path):
    write_meta(tmp_path, _meta())
    # two processes' shards, out of order, one key stored twice (the first one stored is kept)
    write_shard(tmp_path, "group", "r001-000001", _span_array([3.0, 1.0]),
                pd.DataFrame({"template": ["b", "a"], "group": ["women", "women"]}))
    write_shard(tmp_path, "group", "r000-000001", _span_array([2.0, 4.0, 9.0]),
                pd.DataFrame({"template": ["a", "a", "b"], "group": ["men", "women", "women"]}))
    means = np.stack([np.full((len(HOOKS), D), v, dtype=np.float32) for v in (1.0, 3.0, 5.0)])
    write_shard(tmp_path, "final_mean", "r000-000001", means,
                pd.DataFrame({"template": ["a", "a", "a"], "group": ["men", "men", "women"], "count": [1, 3, 2]}))
    return activation_store.load(tmp_path)


def test_spans_are_read_by_the_spec_fields_in_sorted_key_order(store):
    states, index = store.spans("group")
    assert list(zip(index.template, index.group)) == [("a", "men"), ("a", "women"), ("b", "women")]
    # rank 1 stored ("b", "women") = 3 and ("a", "women") = 1 too: the first shard read (rank 0's) wins
    np.testing.assert_allclose(states[0, :, 0], [2.0, 4.0, 9.0])
    np.testing.assert_allclose(states[1, :, 0], [20.0, 40.0, 90.0])
    last, _ = store.spans("group", "last", template="b")
    np.testing.assert_allclose(last[0, :, 0], [-9.0])


def test_where_takes_a_value_or_a_list(store):
    _, one = store.spans("group", group="men")
    _, two = store.spans("group", template=["a", "b"], group="women")
    assert one.template.tolist() == ["a"] and two.template.tolist() == ["a", "b"]


def test_identities_average_an_identity_over_its_prefixes(store):
    assert store.slot_field("group") == "group"
    vectors, names = store.identities("group")
    assert names == ["men", "women"]
    np.testing.assert_allclose(vectors[0, :, 0], [2.0, (4.0 + 9.0) / 2])


def test_final_means_pool_shares_by_count(store):
    means, cells = store.final()
    assert cells.to_dict("list") == {"template": ["a", "a"], "group": ["men", "women"], "count": [4, 2]}
    np.testing.assert_allclose(means[0, :, 0], [(1 * 1 + 3 * 3) / 4, 5.0])


def test_rows_are_addressed_by_hook_name_and_block_not_by_position(store):
    """Integers are blocks (-1 the last captured), not array rows; hook names and --layers entries name themselves."""
    assert store.select(-1) == store.select("last") == store.select("blocks.0.hook_resid_post") == \
        ["blocks.0.hook_resid_post"]
    assert store.rows(["blocks.0.hook_resid_post", "hook_embed"]) == store.rows([-1, "embed"]) == [1, 0]
    assert store.rows(0) == [1]  # block 0, the second row: not row 0
    assert store.select("all") == HOOKS
    states, _ = store.spans("group")
    for layers in (-1, "blocks.0.hook_resid_post", [0]):
        np.testing.assert_array_equal(store.spans("group", layers=layers)[0], states[[1]])
        np.testing.assert_array_equal(store.final(layers=layers)[0], store.final()[0][[1]])
    vectors, names = store.identities("group", "last", layers=["hook_embed"], template="a")
    np.testing.assert_array_equal(vectors, store.identities("group", "last", template="a")[0][[0]])


@pytest.mark.parametrize("layers, message", [
    (1, "layers: block 1 was not captured; captured: [0]"), (-2, "layers: block -2 was not captured"),
    ("blocks.5.hook_resid_post", "layers: block 5 was not captured"), (1.5, "layers: 1.5 is not a layer"),
])
def test_a_layer_the_store_did_not_capture_is_one_line(store, layers, message):
    for call in (store.select, lambda x: store.final(layers=x), lambda x: store.spans("group", layers=x)):
        with pytest.raises(ValueError) as err:
            call(layers)
        assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("call, message", [
    (lambda s: s.spans("persona"), "no span kind 'persona'"),
    (lambda s: s.spans("group", category="x"), "no field 'category'"),
    (lambda s: s.spans("group", group="nobody"), "no group activations for"),
    (lambda s: s.spans("group", "median"), "unknown reduction 'median'"),
])
def test_questions_the_store_cannot_answer_name_what_is_wrong(store, call, message):
    with pytest.raises(ActivationStoreError, match=message):
        call(store)


def test_a_capture_without_samples_says_which_flag_keeps_them(store):
    store.meta["per_cell_samples"] = 0
    with pytest.raises(ActivationStoreError, match=r"no single-prompt final-token samples; the run kept none "
                                                   r"\(--per-cell-samples 0\)"):
        store.final_samples()


def test_a_run_without_capture_says_how_to_get_one(tmp_path):
    (tmp_path / "manifest.json").write_text('{"config": {"suite": "scm", "schema": 2, "model": "m", "mode": "score"}}')
    with pytest.raises(ActivationStoreError, match=r"rerun `empathy-gap run scm` with --capture"):
        activation_store.load(tmp_path)
