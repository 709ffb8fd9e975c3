"""Probes: high accuracy on separable data, chance on shuffled labels, deterministic for a seed, per layer from a
synthetic store of final-token samples."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import activations.store as activation_store
from activations.capture import hook_names
from behavioral.run import RunConfig
from behavioral.suites.intergroup import SUITE
from behavioral.suites.intergroup.groups import get_category
from interp import probes
from tests.test_analysis import make_run

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


def test_layer_probes_find_the_planted_signals_layer_by_layer(tmp_path):
    _synthetic_sample_store(tmp_path)
    store = activation_store.load(tmp_path)
    ingroup = probes.layer_probes(store, "religion", SETTING, "ingroup", split="cell", n_shuffles=2)
    assert list(ingroup["hook"]) == store.hooks and list(ingroup["layer"]) == [-1, 0, 1]
    assert (ingroup["n"] == 25 * 4).all() and (ingroup["n_classes"] == 2).all()
    balanced = ingroup.set_index("layer")["balanced_accuracy_mean"]
    assert balanced[0] > 0.9 and balanced[-1] < 0.75 and balanced[1] < 0.75
    assert (ingroup["control_balanced_accuracy_mean"] < 0.7).all()
    perceiver = probes.layer_probes(store, "religion", SETTING, "perceiver_group", n_shuffles=2)
    accuracy = perceiver.set_index("layer")["accuracy_mean"]
    assert (perceiver["n_classes"] == 5).all() and accuracy[1] > 0.9 and accuracy[0] < 0.5
    assert (perceiver["control_accuracy_mean"] < 0.4).all()
    paths = probes.plot_probes(pd.concat([ingroup, perceiver]), tmp_path / "figures")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 0 for p in paths)
    with pytest.raises(ValueError, match="target"):
        probes.layer_probes(store, "religion", SETTING, "experiencer")


def _capture_run(tmp_path: Path) -> Path:
    """A score-mode religion run whose manifest says final-token capture, with a synthetic sample store."""
    run_dir = make_run(tmp_path / "run", categories=("religion",), mode="score", settings=(SETTING,))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["config"] |= {"capture": ["final"], "model": str(tmp_path / "no-such-model")}  # never loaded
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    _synthetic_sample_store(run_dir)
    return run_dir


def _gap_steering():
    path = Path(__file__).parents[1] / "experiments" / "gap_steering.py"
    spec = importlib.util.spec_from_file_location("gap_steering", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_gap_steering_probes_only_needs_no_model(tmp_path, capsys):
    run_dir = _capture_run(tmp_path)
    script = _gap_steering()
    out = tmp_path / "out"
    argv = ["--run", str(run_dir), "--out", str(out), "--probes-only", "--probe-layers", "embed,0", "--n-shuffles", "1",
            "--probe-splits", "cell"]
    assert script.main(argv) == 0
    table = pd.read_csv(out / "probes.csv")
    assert sorted(set(table["layer"])) == [-1, 0] and set(table["target"]) == set(probes.TARGETS)
    ingroup = table[table["target"] == "ingroup"].set_index("layer")["balanced_accuracy_mean"]
    assert ingroup[0] > 0.9 and ingroup[-1] < 0.75
    recorded = json.loads((out / "manifest.json").read_text())
    assert recorded["steer_config"] is None and recorded["probed_hooks"] == hook_names(2)[:2]
    assert not (out / "steering.csv").exists() and str(out / "probes.csv") in capsys.readouterr().out
    assert script.main([*argv[:-4], "--probe-layers", "7"]) == 2
    assert "--probe-layers: block 7 was not captured" in capsys.readouterr().err


def test_gap_steering_steers_a_sample_of_the_runs_events_when_asked(tmp_path):
    run_dir = _capture_run(tmp_path)
    script = _gap_steering()
    stored = RunConfig.from_run_dir(run_dir).options.limit_events

    def steered(*flags):
        return script.base_config(run_dir, script.parse_args(["--run", str(run_dir), "--out", "o", *flags]))

    assert steered().options.limit_events == stored
    config = steered("--limit-events", "1")
    assert config.options.limit_events == 1 and config.capture == () and config.options.categories == ("religion",)
    with pytest.raises(ValueError, match="--limit-events must be a positive number of events, got 0"):
        steered("--limit-events", "0")
