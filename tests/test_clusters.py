"""Identity-embedding clusters: planted clusters recovered, random labels not, the family-wise correction across
layers, projections deterministic, and the nationality example script end to end on a synthetic run directory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import silhouette_score
from sklearn.model_selection import LeaveOneOut, cross_val_predict
from sklearn.neighbors import KNeighborsClassifier

from activations import store as activation_store
from behavioral.analysis.multiplicity import holm
from behavioral.suites.intergroup import SUITE
from behavioral.suites.intergroup.groups import get_category
from interp import clusters
from tests.test_analysis import make_run


def planted(n_clusters: int = 4, per: int = 6, d: int = 20, spread: float = 0.3, seed: int = 0):
    """Points around `n_clusters` random centres (unit-scale separation, `spread` noise) and their labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, d))
    labels = np.repeat([f"c{i}" for i in range(n_clusters)], per)
    X = np.repeat(centres, per, axis=0) + spread * rng.normal(size=(n_clusters * per, d))
    return X, list(labels)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_planted_clusters_are_recovered(metric: str) -> None:
    X, labels = planted()
    s = clusters.cluster_stats(X, labels, n_permutations=200, seed=0, k=3, metric=metric)
    assert s["silhouette"] > 0.5
    assert s["knn_accuracy"] >= 0.95
    assert s["silhouette_p"] == s["knn_p"] == pytest.approx(1 / 201)  # the smallest p 200 permutations allow
    assert s["knn_null_mean"] < 0.5 and s["silhouette_null_q95"] < s["silhouette"]
    assert s["metric"] == metric and s["n"] == 24 and s["n_labels"] == 4


def test_random_labels_are_not_recovered() -> None:
    rng = np.random.default_rng(1)
    ps = []
    for trial in range(20):
        X = rng.normal(size=(24, 20))
        labels = list(rng.permutation(np.repeat(["a", "b", "c", "d"], 6)))
        s = clusters.cluster_stats(X, labels, n_permutations=200, seed=trial)
        assert s["silhouette"] < 0.2 and s["knn_accuracy"] < 0.7
        ps += [s["silhouette_p"], s["knn_p"]]
    ps = np.array(ps)
    assert (ps < 0.05).mean() <= 0.2  # about uniform under the null, not piled up near 0
    assert ps.mean() > 0.3
    X, labels = planted()  # the planted points with shuffled labels
    s = clusters.cluster_stats(X, list(np.random.default_rng(3).permutation(labels)), n_permutations=200)
    assert s["silhouette_p"] > 0.05 and s["knn_p"] > 0.05


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_silhouette_equals_sklearn_including_singletons(metric: str) -> None:
    X, labels = planted(n_clusters=3, per=5, spread=1.0, seed=2)
    labels = labels[:-1] + ["alone"]  # a cluster of one scores 0, as in sklearn
    s = clusters.cluster_stats(X, labels, n_permutations=10, metric=metric)
    assert s["silhouette"] == pytest.approx(silhouette_score(X, labels, metric=metric), abs=1e-10)
    assert s["knn_ceiling"] == pytest.approx(14 / 15)


def test_knn_equals_sklearn_leave_one_out() -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(30, 5))
    labels = np.where(X[:, 0] + 0.5 * rng.normal(size=30) > 0, "x", "y")  # two labels, k odd: no ties
    s = clusters.cluster_stats(X, list(labels), n_permutations=10, k=3, metric="euclidean")
    predicted = cross_val_predict(KNeighborsClassifier(n_neighbors=3), X, labels, cv=LeaveOneOut())
    assert s["knn_accuracy"] == pytest.approx((predicted == labels).mean())


def test_layer_stats_one_row_per_layer() -> None:
    X, labels = planted(per=5)
    rng = np.random.default_rng(5)
    layers = np.stack([rng.normal(size=X.shape), X + rng.normal(size=X.shape), X])  # noise, then more structure
    hooks = ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    df = clusters.layer_stats(layers, labels, hooks=hooks, n_permutations=100)
    assert list(df.hook) == hooks and list(df.layer) == [-1, 0, 1]
    assert df.silhouette.iloc[0] < df.silhouette.iloc[2]
    assert df.silhouette_p.iloc[0] > 0.05 and df.silhouette_p.iloc[2] < 0.05
    # across layers: the max statistic over the same 100 permutations, and Holm over the 3 layers
    for name, statistic in (("silhouette", "silhouette"), ("knn", "knn_accuracy")):
        nulls = np.vstack([clusters.cluster_stats(X, labels, 100, 0, center=True, return_null=True)[f"null_{name}"]
                           for X in layers])
        assert df[f"{name}_p_fwe"].tolist() == pytest.approx(
            [(1 + np.sum(nulls.max(axis=0) >= v - 1e-12)) / 101 for v in df[statistic]])
        assert df[f"{name}_p_holm"].tolist() == pytest.approx(holm(df[f"{name}_p"]).tolist())
        assert (df[f"{name}_p_fwe"] >= df[f"{name}_p"]).all()
    assert df.silhouette_p_fwe.iloc[2] < 0.05  # the planted layer survives the correction
    with pytest.raises(ValueError, match="distinct labels"):
        clusters.layer_stats(layers, [f"x{i}" for i in range(20)], n_permutations=10)


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m == "umap" else m  # numba's JIT: 11 s
                                    for m in clusters.METHODS])
def test_projection_is_deterministic_for_a_seed(method: str) -> None:
    X, _ = planted(n_clusters=3, per=7, d=30)  # 21 points, as the countries
    a = clusters.project(X, method, seed=0, metric="cosine", center=True)
    b = clusters.project(X, method, seed=0, metric="cosine", center=True)
    assert a.shape == (21, 2) and np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)


def test_short_names_drop_the_words_every_name_begins_with() -> None:
    assert clusters.short_names(["a person from the United States", "a person from Japan"]) == [
        "the United States", "Japan"]
    assert clusters.short_names(["a Muslim", "a Jew"]) == ["Muslim", "Jew"]
    assert clusters.short_names(["a white person", "an Asian"]) == ["a white person", "an Asian"]
    assert clusters.short_names(["a person", "a person from Japan"]) == ["person", "person from Japan"]


def test_adapted_neighbourhoods() -> None:
    assert clusters.tsne_perplexity(21) == 5.0 and clusters.umap_neighbors(21) == 7
    assert clusters.tsne_perplexity(5) == 2.0 and clusters.tsne_perplexity(500) == 30.0


def synthetic_capture_run(run_dir: Path, setting: str = "P0S1T0", d: int = 16) -> list[str]:
    """A results-only run from test_analysis.make_run, plus persona activations: noise at the embeddings, the
    Inglehart-Welzel zones planted in block 1."""
    make_run(run_dir, categories=("nationality",), mode="score", settings=(setting,))
    cat = get_category("nationality")
    names = cat.with_unspecified
    hooks = ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    zones = list(dict.fromkeys(cat.zone_of.values()))
    rng = np.random.default_rng(0)
    centres = 3 * rng.normal(size=(len(zones) + 1, d))
    zone_index = [len(zones) if n == "a person" else zones.index(cat.zone_of[n]) for n in names]
    vectors = rng.normal(size=(len(names), 2, len(hooks), d))  # identities × (mean, last) × hooks × d
    vectors[:, :, 2] += centres[zone_index][:, None, :]
    spans = {kind: {"slot": slot, "fields": list(fields)} for kind, (slot, fields) in SUITE.capture.spans.items()}
    activation_store.write_meta(run_dir, {"hooks": hooks, "layers": [0, 1], "d_model": d, "kinds": ["persona"],
                                          "per_cell_samples": 0, "dtype": "float16", "reductions": ["mean", "last"],
                                          "spans": spans, "cell": list(SUITE.capture.cell)})
    index = pd.DataFrame({"setting": setting, "category": "nationality", "perceiver": list(names)})
    activation_store.write_shard(run_dir, "persona", f"{setting}--nationality", vectors[::-1], index[::-1])
    return hooks


def test_example_script_end_to_end(tmp_path: Path, capsys, tiny_model_dir: Path, load_experiment) -> None:
    synthetic_capture_run(tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    manifest["config"]["model"] = str(tiny_model_dir)  # the tokenizer that counts the personas' tokens
    (tmp_path / "run" / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    argv = ["--run", str(tmp_path / "run"), "--out", str(out), "--permutations", "50", "--project", "last",
            "--methods", "tsne", "--where", "category=nationality,setting=P0S1T0"]
    assert load_experiment("nationality_clusters").main(argv) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'clusters' / 'report.md'}" in printed and "rsa: " in printed
    stats = pd.read_csv(out / "clusters" / "cluster_stats.csv")
    assert list(stats.layer) == [-1, 0, 1] and stats.silhouette.iloc[2] > 0.3 and stats.knn_p.iloc[2] < 0.05
    assert stats.knn_p_fwe.iloc[2] < 0.05  # the planted zones survive the correction across layers
    identities = pd.read_csv(out / "clusters" / "identities.csv")
    cat = get_category("nationality")
    assert identities.identity.tolist() == list(cat.identities)
    assert identities.label.tolist() == [cat.zone_of[n] for n in cat.identities]
    projections = pd.read_csv(out / "clusters" / "projections.csv")
    assert set(projections.source) == {"persona, layer 1", "behaviour"} and set(projections.method) == {"tsne"}
    table = pd.read_csv(out / "rsa" / "rsa.csv")
    assert len(table) == 3 and table.rsa.between(-1, 1).all() and table.partial_p.between(0, 1).all()
    counts = pd.read_csv(out / "rsa" / "token_counts.csv").set_index("identity").tokens
    assert list(counts.index) == list(cat.identities) and counts.min() >= 4
    assert counts["a person from the United States"] > counts["a person from Japan"]
    manifest = json.loads((out / "rsa" / "manifest.json").read_text())
    assert manifest["options"]["where"] == ["category=nationality", "setting=P0S1T0"]
    assert manifest["options"]["permutations"] == 50  # a flag both studies declare goes to both


def test_example_script_fails_with_a_message(tmp_path: Path, capsys, load_experiment) -> None:
    script = load_experiment("nationality_clusters")
    make_run(tmp_path / "run", categories=("nationality",), settings=("P0S1T0",))  # no activations
    assert script.main(["--run", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 2
    assert "holds no activation store; rerun `empathy-gap run intergroup` with --capture" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--out", str(tmp_path / "out")])  # neither --run nor --model
    assert exit_info.value.code != 0
