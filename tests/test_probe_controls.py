"""The probe's controls on synthetic activations where the right answer is known: the control task (wrong matchings
of identities) sees a planted in-group direction and finds nothing special in pure per-cell noise, even where the
shuffled-label control is fooled; the cross-name probe separates a same-string signal from a group relation; the
study wires both to the suite's labels and writes its readings and scope."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import activations.store as activation_store
from activations.capture import hook_names
from behavioral.cli.commands import main
from interp.probes.study import probe_tables
from behavioral.suites.intergroup import SUITE
from interp import probes
from interp.matchings import wrong_matchings

SETTING = "P0S1T0"
CELL = SUITE.capture.cell


def _cells(group: list[int], per_cell: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(persona name index, experiencer name index, cell id) per sample over every pair of names."""
    n = len(group)
    left, right = np.divmod(np.arange(n * n), n)
    return np.repeat(left, per_cell), np.repeat(right, per_cell), np.repeat(np.arange(n * n), per_cell)


def _activations(group: list[int], per_cell: int = 4, d: int = 16, seed: int = 0, ingroup: float = 0.0,
                 same_name: float = 0.0, cell_noise: float = 0.0):
    """Samples with a planted in-group direction (same group), a same-string direction (same name), and a random
    offset per cell, each of the given strength, over unit noise."""
    rng = np.random.default_rng(seed)
    left, right, cells = _cells(group, per_cell)
    group = np.asarray(group)
    X = rng.normal(size=(len(left), d))
    X += ingroup * np.outer(group[left] == group[right], rng.normal(size=d))
    X += same_name * np.outer(left == right, rng.normal(size=d))
    X += cell_noise * rng.normal(size=(cells.max() + 1, d))[cells]
    return X, left, right, cells


FOUR = [0, 1, 2, 3]  # four identities, each its own group (as religion's five): 23 wrong matchings, all enumerated
RACE_LIKE = [0, 0, 1, 1, 2, 2]  # three groups of two names


def test_a_planted_ingroup_direction_beats_every_wrong_matching():
    X, left, right, cells = _activations(FOUR, ingroup=3.0)
    matchings = wrong_matchings(4, 50)
    real, controls, folds = probes.matching_scores(X, left, right, matchings, groups=cells, cv=4)
    summary = probes.matching_summary(real, controls, 4)
    assert len(controls) == 23 and summary["matching_exact"] and folds == 4
    assert real > 0.95 and real > controls.max() + 0.1
    assert summary["selectivity"] > 0.3 and summary["matching_rank"] == 1
    assert summary["matching_p"] == pytest.approx(1 / 24) == summary["matching_p_floor"]


def test_pure_per_cell_noise_makes_no_matching_special_though_shuffled_labels_are_fooled():
    """Split by sample, a probe memorizes each cell's offset, so any labelling of the cells is readable: the real
    matching scores high and beats shuffled labels, yet sits among the wrong matchings (exact p, three seeds)."""
    p_values = []
    for seed in range(3):
        X, left, right, _ = _activations(FOUR, d=12, cell_noise=2.0, seed=seed)
        ordinary = probes.probe(X, left == right, cv=4, n_shuffles=2)
        assert ordinary["balanced_accuracy_mean"] > 0.8 and ordinary["control_balanced_accuracy_mean"] < 0.6
        real, controls, _ = probes.matching_scores(X, left, right, wrong_matchings(4, 50), cv=4)
        assert real == ordinary["balanced_accuracy_mean"] and np.median(controls) > 0.7  # as readable: cells are
        p_values.append(probes.matching_summary(real, controls, 4)["matching_p"])
    assert min(p_values) > 1 / 24 and np.median(p_values) > 0.2


def test_the_p_and_the_layer_wise_p_equal_literal_loops():
    X, left, right, cells = _activations(RACE_LIKE, ingroup=0.6, cell_noise=0.5, seed=2)
    noise = np.random.default_rng(3).normal(size=X.shape)
    groups = np.array(RACE_LIKE)
    matchings = wrong_matchings(3, 20)  # 3 groups: all 5 wrong matchings of the groups
    assert len(matchings) == 5
    samples, hooks = np.stack([noise, X]), ["hook_embed", "blocks.0.hook_resid_post"]
    table = probes.layer_matching_controls(samples, groups[left], groups[right], matchings, hooks, cells, cv=4)
    scores = []
    for layer in range(2):
        real = probes.probe(samples[layer], [groups[a] == groups[b] for a, b in zip(left, right)], cv=4,
                            groups=cells, n_shuffles=0)["balanced_accuracy_mean"]
        wrong = []
        for pi in matchings:
            labels = [pi[groups[a]] == groups[b] for a, b in zip(left, right)]
            wrong.append(probes.probe(samples[layer], labels, cv=4, groups=cells, n_shuffles=0)
                         ["balanced_accuracy_mean"])
        at_least = sum(1 for w in wrong if w >= real - 1e-12)  # a tie up to rounding counts against the real
        row = table.iloc[layer]
        assert row["matching_real"] == real and row["matching_p"] == (1 + at_least) / (len(wrong) + 1)
        assert row["matching_mean"] == pytest.approx(np.mean(wrong)) and row["matching_max"] == max(wrong)
        scores.append((real, wrong))
    largest = [max(scores[0][1][i], scores[1][1][i]) for i in range(len(matchings))]
    for layer, (real, _) in enumerate(scores):
        assert table.iloc[layer]["matching_p_fwe"] == (1 + sum(1 for w in largest if w >= real - 1e-12)) / 6


def test_cross_name_is_at_chance_for_a_same_string_signal_and_high_for_a_group_relation():
    group = np.array(RACE_LIKE)
    X, left, right, cells = _activations(RACE_LIKE, same_name=4.0, per_cell=6)
    ingroup, same = group[left] == group[right], left == right
    assert probes.probe(X, same, groups=cells)["balanced_accuracy_mean"] > 0.9  # the ordinary probe reads it
    assert probes.probe(X, ingroup)["balanced_accuracy_mean"] > 0.7  # and half the in-group cells carry it
    strings = probes.cross_name(X, ingroup, same, cells, n_bootstrap=500)
    assert abs(strings["cross_balanced_accuracy"] - 0.5) < 0.05 and strings["cross_ci_low"] <= 0.5
    assert strings["cross_recall"] < 0.1 and strings["cells_heldout"] == 6 and strings["n_source"] == 36
    X, *_ = _activations(RACE_LIKE, ingroup=4.0, per_cell=6)
    relation = probes.cross_name(X, ingroup, same, cells, n_bootstrap=500)
    assert relation["cross_balanced_accuracy"] > 0.9 and relation["cross_ci_low"] > 0.8


def test_cross_name_folds_hold_each_negative_cell_out_once_and_every_other_positive_out_always():
    _, left, right, cells = _activations(RACE_LIKE, per_cell=2)
    group = np.array(RACE_LIKE)
    ingroup, same = group[left] == group[right], left == right
    folds = probes.cross_name_folds(ingroup, same, cells, cv=5, seed=0)
    assert len(folds) == 5
    held = np.concatenate([test[~ingroup[test]] for _, test in folds])
    assert sorted(held) == list(np.flatnonzero(~ingroup))  # each negative tested exactly once
    for train, test in folds:
        assert set(train).isdisjoint(test) and set(cells[train]).isdisjoint(cells[test])
        assert set(np.flatnonzero(ingroup & same)) <= set(train) and set(np.flatnonzero(ingroup & ~same)) <= set(test)
    with pytest.raises(ValueError, match="source must imply the target"):
        probes.cross_name_folds(same, ingroup, cells)
    with pytest.raises(ValueError, match="positives with and without the source"):
        probes.cross_name_folds(same, same, cells)


RACE_NAMES = ["a white person", "a Caucasian", "a black person", "an African American", "an Asian",
              "an Asian American"]


def _race_store(root, per_cell: int = 3, d: int = 16, seed: int = 0) -> None:
    """final_sample shards for six race names and "a person": hook 1 carries a same-group direction, hook 2 a
    same-string direction, hook 0 noise."""
    rng = np.random.default_rng(seed)
    groups = {"a white person": 0, "a Caucasian": 0, "a black person": 1, "an African American": 1, "an Asian": 2,
              "an Asian American": 2}
    relation, string = rng.normal(size=d) * 3, rng.normal(size=d) * 3
    names = ["a person", *RACE_NAMES]
    index, vectors = [], []
    for p in names:
        for x in names:
            for k in range(per_cell):
                v = rng.normal(size=(3, d))
                v[1] += relation * (p in groups and x in groups and groups[p] == groups[x])
                v[2] += string * (p == x and p != "a person")
                index.append((SETTING, "race", p, x, f"event{k}", f"{p}|{x}|event{k}", k))
                vectors.append(v)
    frame = pd.DataFrame(index, columns=["setting", "category", "perceiver", "experiencer", "event_id", "item_id",
                                         "sample_rank"])
    activation_store.write_shard(root, "final_sample", "r000-000001", np.stack(vectors), frame)
    cells = frame[list(CELL)].drop_duplicates().assign(count=per_cell)
    means = np.stack(vectors).reshape(len(cells), per_cell, 3, d).mean(axis=1)
    activation_store.write_shard(root, "final_mean", "r000-000001", means, cells)
    activation_store.write_meta(root, {"hooks": hook_names(2), "layers": None, "d_model": d, "cell": list(CELL),
                                       "per_cell_samples": per_cell})


def test_the_study_finds_each_targets_matching_and_cross_name_source_from_the_suites_labels(tmp_path):
    _race_store(tmp_path)
    store = activation_store.load(tmp_path)
    found = probe_tables(store, SUITE, {"category": "race"}, ["ingroup", "same_name", "perceiver_group"], ["cell"],
                         store.hooks, cv=3, n_shuffles=0, matchings=5, n_bootstrap=200)
    designs = {d.target: d for d in found.designs}
    assert (designs["ingroup"].left, designs["ingroup"].right) == ("perceiver_group", "experiencer_group")
    assert designs["ingroup"].values == ("Asian", "Black", "White") and designs["ingroup"].source == "same_name"
    assert (designs["same_name"].left, designs["same_name"].right, designs["same_name"].source) == (
        "perceiver", "experiencer", None)
    assert designs["perceiver_group"].matching == "not defined" and designs["ingroup"].same_as is None
    assert found.n == 7 * 7 * 3 and found.events == 3
    ingroup = found.table[found.table.target == "ingroup"].set_index("layer")
    assert ingroup["matchings"].tolist() == [5, 5, 5] and ingroup["matching_exact"].all()  # 3 groups: 3! - 1
    assert ingroup.loc[0, "matching_real"] > ingroup.loc[0, "matching_max"]
    cross = found.cross.set_index("layer")
    assert cross.target.unique().tolist() == ["ingroup"] and (cross.source == "same_name").all()
    assert cross.loc[0, "cross_ci_low"] > 0.5  # the relation layer generalises across names
    assert cross.loc[1, "cross_ci_low"] <= 0.5  # the same-string layer does not
    same = found.table[found.table.target == "same_name"].set_index("layer")
    assert same.loc[1, "balanced_accuracy_mean"] > 0.9  # though a probe of the same string reads it there


def test_religion_ingroup_is_the_same_string_and_the_report_says_so(pinned_run, tmp_path):
    out = tmp_path / "religion"
    assert main(["interp", "probe", str(pinned_run), "--out", str(out), "--where", "category=religion", "--target",
                 "ingroup,same_name", "--split", "cell", "--layers", "embed,last", "--cv", "2", "--n-shuffles", "1",
                 "--matchings", "5", "--no-progress"]) == 0
    report = (out / "report.md").read_text()
    assert "## What each probe supports" in report and "## What this can and cannot show" in report
    assert "ingroup equals same_name on every row" in report
    assert "ingroup across names**: not defined" in report
    assert "p cannot fall to 0.05" in report  # 5 wrong matchings: floor 1/6
    assert "A control-task p below 0.167" in report
    table = pd.read_csv(out / "probes.csv")
    assert (table.matchings == 5).all() and not (out / "cross_name.csv").exists()


def test_race_through_the_cli_runs_the_cross_name_probe(pinned_run, tmp_path):
    out = tmp_path / "race"
    assert main(["interp", "probe", str(pinned_run), "--out", str(out), "--where", "category=race", "--target",
                 "ingroup", "--split", "cell", "--layers", "last", "--cv", "2", "--n-shuffles", "0", "--matchings",
                 "23", "--n-bootstrap", "100", "--no-progress"]) == 0
    table = pd.read_csv(out / "probes.csv")
    assert table.matchings.tolist() == [23] and table.matching_exact.tolist() == [True]  # 4 groups: all 4! - 1
    cross = pd.read_csv(out / "cross_name.csv")
    assert cross.source.tolist() == ["same_name"] and cross.cells_heldout.tolist() == [86 - 18]
    report = (out / "report.md").read_text()
    assert "ingroup across names** (trained on same_name rows" in report
