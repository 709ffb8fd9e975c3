"""Representational similarity: RSA of a matrix with itself is 1, with a shuffled copy near 0; Mantel p-values small
for related matrices only; the vectorized null equals the plain computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from behavioral.analysis.multiplicity import holm
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
    # across layers: the max statistic over the same 200 permutations, and Holm over the 3 layers
    nulls = np.vstack([rsa.mantel(rsa.distance_matrix(X, "euclidean", True), rsa.distance_matrix(behavior,
                                                                                              "euclidean"),
                                  200, 0, return_null=True)[2] for X in persona])
    assert df.p_fwe.tolist() == pytest.approx([(1 + np.sum(nulls.max(axis=0) >= r - 1e-12)) / 201 for r in df.rsa])
    assert (df.p_fwe >= df.p).all() and df.p_holm.tolist() == pytest.approx(holm(df.p).tolist())
    assert df.p_fwe.iloc[2] < 0.01  # the planted layer survives the correction
    assert [line.get_label() for line in rsa.plot_rsa(df, "test").axes[0].lines][:1] == ["RSA (Spearman r)"]
    with pytest.raises(ValueError, match="behaviour rows"):
        rsa.layer_rsa(persona, behavior[:5])


def vegan_partial_mantel(D1: np.ndarray, D2: np.ndarray, Z: np.ndarray, perms: np.ndarray) -> tuple[float, list]:
    """vegan's mantel.partial(xdis=D2, ydis=D1, zdis=Z, method="spearman"), literally: three Spearman correlations
    over the lower triangles, part.cor, and xdis permuted (rows and columns together) for the null."""
    il = np.tril_indices(len(D1), k=-1)

    def part_cor(rxy, rxz, ryz):
        return (rxy - rxz * ryz) / np.sqrt(1 - rxz ** 2) / np.sqrt(1 - ryz ** 2)

    ydis, zdis = D1[il], Z[il]
    ryz = spearmanr(ydis, zdis).statistic
    statistic = part_cor(spearmanr(D2[il], ydis).statistic, spearmanr(D2[il], zdis).statistic, ryz)
    null = []
    for take in perms:
        permvec = permute(D2, take)[il]
        null.append(part_cor(spearmanr(permvec, ydis).statistic, spearmanr(permvec, zdis).statistic, ryz))
    return statistic, null


def test_partial_mantel_is_vegans_rule() -> None:
    rng = np.random.default_rng(11)
    tokens = rng.integers(1, 5, size=14)  # tied token counts, as persona lengths are
    Z = rsa.difference_matrix(tokens)
    A = rsa.distance_matrix(np.hstack([points(14, 3, seed=12), tokens[:, None]]), "euclidean")
    B = rsa.distance_matrix(np.hstack([points(14, 3, seed=13), tokens[:, None]]), "euclidean")
    r, p, null = rsa.partial_mantel(A, B, Z, n_permutations=60, seed=4, return_null=True)
    expected, expected_null = vegan_partial_mantel(A, B, Z, rsa.mantel_permutations(14, 60, seed=4))
    assert r == pytest.approx(expected, abs=1e-12)
    np.testing.assert_allclose(null, expected_null, atol=1e-12)
    assert p == pytest.approx((1 + np.sum(np.array(expected_null) >= r - 1e-12)) / 61)


def test_partial_mantel_removes_a_shared_confound_only() -> None:
    rng = np.random.default_rng(21)
    n = 24
    tokens = rng.integers(1, 6, size=n).astype(float)
    Z = rsa.difference_matrix(tokens)
    noise = lambda seed: np.random.default_rng(seed).normal(size=(n, 4))  # noqa: E731
    persona = rsa.distance_matrix(np.hstack([3 * tokens[:, None], noise(1)]), "euclidean")
    behavior = rsa.distance_matrix(np.hstack([3 * tokens[:, None], noise(2)]), "euclidean")
    r, p = rsa.mantel(persona, behavior, 500, seed=0)
    pr, pp = rsa.partial_mantel(persona, behavior, Z, 500, seed=0)
    assert r > 0.3 and p < 0.01  # both distances follow token count: RSA alone would call it a finding
    assert abs(pr) < 0.15 and pp > 0.05
    shared = noise(3)
    persona = rsa.distance_matrix(np.hstack([3 * tokens[:, None], shared]), "euclidean")
    behavior = rsa.distance_matrix(np.hstack([3 * tokens[:, None], shared + 0.3 * noise(4)]), "euclidean")
    pr, pp = rsa.partial_mantel(persona, behavior, Z, 500, seed=0)
    assert pr > 0.3 and pp < 0.01  # a relation beyond token count survives
    assert np.isnan(rsa.partial_mantel(persona, behavior, np.ones((n, n)) - np.eye(n), 20)[0])  # constant control
    with pytest.raises(ValueError, match="one value per point"):
        rsa.difference_matrix(np.ones((3, 2)))


def test_layer_rsa_with_a_control(tmp_path: Path) -> None:
    rng = np.random.default_rng(31)
    tokens = rng.integers(1, 5, size=21).astype(float)
    behavior = np.hstack([rng.normal(size=(21, 5)), 4 * tokens[:, None]])
    persona = np.stack([np.hstack([rng.normal(size=(21, 5)), 4 * tokens[:, None]]), behavior])
    df = rsa.layer_rsa(persona, behavior, metric="euclidean", n_permutations=200,
                       control=rsa.difference_matrix(tokens))
    assert {"partial_rsa", "partial_p", "partial_p_fwe", "partial_p_holm", "partial_null_mean",
            "partial_null_q95"} <= set(df.columns)
    assert df.partial_rsa.iloc[0] < df.rsa.iloc[0] and df.partial_p.iloc[1] < 0.01
    fig = rsa.plot_rsa(df, "test")
    for ax in fig.axes:  # both panels on one scale that holds every curve
        low, high = ax.get_ylim()
        assert low <= df[["rsa", "partial_rsa"]].min().min() and high >= df[["rsa", "partial_rsa"]].max().max()


def test_mantel_enumerates_every_relabelling_where_they_are_few_so_p_is_exact():
    from itertools import permutations

    from scipy.stats import spearmanr

    X = np.random.default_rng(3).normal(size=(5, 4))
    D1 = rsa.distance_matrix(X, "euclidean")
    D2 = D1 + np.random.default_rng(4).normal(scale=0.3, size=D1.shape)
    D2 = (D2 + D2.T) / 2
    np.fill_diagonal(D2, 0)
    iu = np.triu_indices(5, 1)
    r, p = rsa.mantel(D1, D2, n_permutations=1000)
    every = [spearmanr(D1[iu], D2[np.ix_(q, q)][iu])[0] for q in map(list, permutations(range(5)))]
    assert p == pytest.approx(np.mean(np.array(every) >= r - 1e-12))  # the exact p over all 5! relabellings
    assert p >= 1 / 120
    assert len(rsa.mantel_permutations(5, 119, 0)) == 119 and len(rsa.mantel_permutations(5, 118, 0)) == 118
