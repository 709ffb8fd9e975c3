"""Representational similarity: RSA of a matrix with itself is 1, with a shuffled copy near 0; Mantel p-values small
for related matrices only; the vectorized null equals the plain computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from interp import rsa


def points(n: int = 30, d: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


def permute(D: np.ndarray, perm: np.ndarray) -> np.ndarray:
    return D[np.ix_(perm, perm)]


@pytest.mark.parametrize("metric", rsa.METRICS)
def test_rsa_of_a_matrix_with_itself_is_one(metric: str) -> None:
    D = rsa.distance_matrix(points(), metric)
    assert D.shape == (30, 30) and np.allclose(D, D.T) and np.allclose(np.diag(D), 0)
    assert rsa.rsa(D, D) == pytest.approx(1.0, abs=1e-12)


def test_rsa_with_a_shuffled_copy_is_near_zero() -> None:
    D = rsa.distance_matrix(points(), "euclidean")
    rng = np.random.default_rng(1)
    relabelled = permute(D, rng.permutation(30))  # points relabelled: rows and columns together
    assert abs(rsa.rsa(D, relabelled)) < 0.2
    iu = np.triu_indices(30, k=1)
    shuffled = np.zeros_like(D)
    shuffled[iu] = rng.permutation(D[iu])  # pair distances shuffled
    assert abs(rsa.rsa(D, shuffled + shuffled.T)) < 0.2


def test_rsa_is_spearman_over_the_upper_triangle_with_ties() -> None:
    A = rsa.distance_matrix(points(12, 3, seed=3), "euclidean")
    B = np.round(rsa.distance_matrix(points(12, 3, seed=4), "euclidean"))  # many ties
    iu = np.triu_indices(12, k=1)
    assert rsa.rsa(A, B) == pytest.approx(spearmanr(A[iu], B[iu]).statistic, abs=1e-12)
    with pytest.raises(ValueError, match="differ in shape"):
        rsa.rsa(A, A[:5, :5])


def test_mantel_related_and_unrelated() -> None:
    X = points()
    D = rsa.distance_matrix(X, "euclidean")
    noisy = rsa.distance_matrix(X + 0.5 * np.random.default_rng(5).normal(size=X.shape), "euclidean")
    r, p = rsa.mantel(D, noisy, n_permutations=500, seed=0)
    assert r > 0.5 and p == pytest.approx(1 / 501)
    unrelated = rsa.distance_matrix(points(seed=6), "euclidean")
    r, p = rsa.mantel(D, unrelated, n_permutations=500, seed=0)
    assert abs(r) < 0.2 and p > 0.05
    ps = [rsa.mantel(D, rsa.distance_matrix(points(seed=s), "euclidean"), 200, seed=s)[1] for s in range(10, 30)]
    assert np.mean(np.array(ps) < 0.05) <= 0.2 and np.mean(ps) > 0.3


def test_mantel_null_equals_the_plain_computation() -> None:
    A = rsa.distance_matrix(points(9, 4, seed=7), "cosine")
    B = rsa.distance_matrix(points(9, 4, seed=8), "euclidean")
    r, p, null = rsa.mantel(A, B, n_permutations=40, seed=3, return_null=True)
    assert r == pytest.approx(rsa.rsa(A, B), abs=1e-12)
    plain = [rsa.rsa(A, permute(B, perm)) for perm in rsa.mantel_permutations(9, 40, seed=3)]
    np.testing.assert_allclose(null, plain, atol=1e-12)
    assert p == pytest.approx((1 + np.sum(np.array(plain) >= r - 1e-12)) / 41)


def test_layer_rsa_follows_the_planted_relation(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    behavior = rng.normal(size=(21, 22))
    persona = np.stack([rng.normal(size=(21, 30)),  # unrelated
                        np.hstack([behavior, rng.normal(size=(21, 8))]),  # behavior plus noise dimensions
                        np.hstack([behavior, np.zeros((21, 8))])])  # behavior itself
    hooks = ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    df = rsa.layer_rsa(persona, behavior, hooks, metric="euclidean", n_permutations=200)
    assert list(df.hook) == hooks and list(df.layer) == [-1, 0, 1]
    assert df.p.iloc[0] > 0.05 and df.p.iloc[2] < 0.01
    assert df.rsa.iloc[0] < df.rsa.iloc[1] < df.rsa.iloc[2]
    assert df.rsa.iloc[2] == pytest.approx(1.0)  # centring leaves euclidean distances unchanged
    rsa.plot_rsa(df, "test", out=tmp_path / "rsa")
    assert (tmp_path / "rsa.png").stat().st_size > 0 and (tmp_path / "rsa.pdf").is_file()
    with pytest.raises(ValueError, match="behavior rows"):
        rsa.layer_rsa(persona, behavior[:5])
