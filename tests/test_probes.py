"""Probes: high accuracy on separable data, chance on shuffled labels, deterministic for a seed, per layer on arrays
and, through the probe study's table, on a synthetic store of final-token samples with the suite's labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import activations.store as activation_store
from activations.capture import hook_names
from interp.probes.study import probe_table
from behavioral.suites.intergroup import SUITE
from behavioral.suites.intergroup.groups import get_category
from interp import probes

SETTING = "P0S1T0"
CELL = SUITE.capture.cell


def _separable(n: int = 120, d: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    X = rng.normal(size=(n, d))
    X[:, 0] += 4.0 * (2 * y - 1)
    return X, y


def test_probe_separates_separable_data_and_its_control_sits_at_chance():
    X, y = _separable()
    result = probes.probe(X, y, cv=5, seed=0)
    assert result["accuracy_mean"] > 0.95 and result["balanced_accuracy_mean"] > 0.95
    assert abs(result["control_accuracy_mean"] - 0.5) < 0.12
    assert abs(result["control_balanced_accuracy_mean"] - 0.5) < 0.12
    assert result["chance"] == 0.5 and result["majority"] == 0.5 and result["folds"] == 5 and result["n"] == 120


def test_probe_is_at_chance_on_noise_and_deterministic_for_a_seed():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(120, 20)), np.repeat([0, 1], 60)
    first = probes.probe(X, y, seed=3)
    assert abs(first["accuracy_mean"] - 0.5) < 0.15
    assert probes.probe(X, y, seed=3) == first
    assert probes.probe(X, y, seed=4) != first


def test_probe_folds_shrink_to_the_smallest_class_and_refuse_too_few():
    X, y = _separable(40)
    y = y.copy()
    y[:17] = 1  # 3 samples of class 0
    assert probes.probe(X, y, cv=5)["folds"] == 3
    with pytest.raises(ValueError, match="2 classes"):
        probes.probe(X, np.zeros(40))
    y[:19] = 1
    with pytest.raises(ValueError, match="too few"):
        probes.probe(X, y)


def _synthetic_sample_store(root, d: int = 24, per_cell: int = 4, seed: int = 0):
    """final_sample shards for religion: hook 1 carries an in-group offset, hook 2 the perceiver, hook 0 noise."""
    rng = np.random.default_rng(seed)
    names = get_category("religion").with_unspecified
    perceiver_code = {name: rng.normal(size=d) * 3 for name in names}
    ingroup = rng.normal(size=d) * 3
    index, vectors = [], []
    for p in names:
        for x in names:
            for k in range(per_cell):
                v = rng.normal(size=(3, d))
                v[1] += ingroup * (p == x and p != "a person")
                v[2] += perceiver_code[p]
                index.append((SETTING, "religion", p, x, f"event{k}", f"{p}|{x}|event{k}", k))
                vectors.append(v)
    frame = pd.DataFrame(index, columns=["setting", "category", "perceiver", "experiencer", "event_id", "item_id",
                                         "sample_rank"])
    activation_store.write_shard(root, "final_sample", "r000-000001", np.stack(vectors), frame)
    cells = frame[list(CELL)].drop_duplicates().assign(count=per_cell)  # a run writes both shards
    means = np.stack(vectors).reshape(len(cells), per_cell, 3, d).mean(axis=1)
    activation_store.write_shard(root, "final_mean", "r000-000001", means, cells)
    activation_store.write_meta(root, {"hooks": hook_names(2), "layers": None, "d_model": d, "cell": list(CELL),
                                       "per_cell_samples": per_cell})


def test_layer_probes_find_a_planted_signal_layer_by_layer():
    rng = np.random.default_rng(2)
    X, y = _separable(80)
    samples = np.stack([rng.normal(size=X.shape), X])  # noise, then the separable layer
    hooks = ["hook_embed", "blocks.0.hook_resid_post"]
    groups = np.repeat(np.arange(16), 5)
    table = probes.layer_probes(samples, y, hooks, groups, cv=4, seed=1, n_shuffles=2)
    assert list(table.hook) == hooks and list(table.layer) == [-1, 0]
    for i in range(2):  # each layer is `probe` on its own states, with the same folds and seed
        assert table.iloc[i].drop(["hook", "layer"]).to_dict() == probes.probe(samples[i], y, 4, 1, groups, 2)
    assert table.balanced_accuracy_mean.iloc[1] > 0.95 and table.balanced_accuracy_mean.iloc[0] < 0.75
    with pytest.raises(ValueError, match="one hook name per layer"):
        probes.layer_probes(samples, y, hooks[:1])


def test_probe_table_reads_the_suites_labels_and_finds_the_planted_signals(tmp_path):
    _synthetic_sample_store(tmp_path)
    store = activation_store.load(tmp_path)
    where = {"category": "religion", "setting": SETTING}
    table = probe_table(store, SUITE, where, None, ["event_id"], store.hooks, n_shuffles=2, matchings=2)
    derived = ["ingroup", "perceiver_group", "experiencer_group", "same_name"]
    assert list(dict.fromkeys(table.target)) == derived  # the suite's labels by default
    by_target = table.groupby("target")["matchings"].first()
    assert by_target["ingroup"] == by_target["same_name"] == 2  # equalities of two fields get the control task
    assert by_target[["perceiver_group", "experiencer_group"]].isna().all()  # the others have none defined
    assert set(table.split) == {"event_id"} and (table.n == 25 * 4).all()
    ingroup = probe_table(store, SUITE, where, ["ingroup"], ["cell"], store.hooks, n_shuffles=2,
                          matchings=0).set_index("layer")
    assert list(ingroup.hook) == store.hooks and (ingroup.n_classes == 2).all()
    balanced = ingroup["balanced_accuracy_mean"]
    assert balanced[0] > 0.9 and balanced[-1] < 0.75 and balanced[1] < 0.75
    assert (ingroup["control_balanced_accuracy_mean"] < 0.7).all()
    perceiver = table[table.target == "perceiver_group"].set_index("layer")
    assert (perceiver["n_classes"] == 5).all() and perceiver.accuracy_mean[1] > 0.9 and perceiver.accuracy_mean[0] < 0.5
    assert (perceiver["control_accuracy_mean"] < 0.4).all()
    fields = probe_table(store, SUITE, where, ["experiencer"], ["sample"], store.hooks[:1], n_shuffles=0)
    assert fields.n.tolist() == [6 * 6 * 4] and fields.n_classes.tolist() == [6]  # an index field: every row
    figure = probes.probe_figure(table, title="religion")
    assert len(figure.axes) == table["target"].nunique() * table["split"].nunique()
    with pytest.raises(ValueError, match="--target 'mood': expected a field of the final-token index"):
        probe_table(store, SUITE, where, ["mood"], ["sample"], store.hooks)
    with pytest.raises(ValueError, match="--split 'colour': expected sample, cell or a field"):
        probe_table(store, SUITE, where, ["ingroup"], ["colour"], store.hooks)
