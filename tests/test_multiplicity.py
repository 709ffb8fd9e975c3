"""Holm's adjustment and the max-statistic adjustment against literal implementations of their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from behavioral.analysis.multiplicity import holm, max_statistic


def _holm_by_definition(p: list[float]) -> list[float]:
    """Holm (1979): sort the m p-values; the i-th smallest is adjusted to max over j <= i of min(1, (m - j + 1) p_(j))."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted, running = [0.0] * m, 0.0
    for j, i in enumerate(order, start=1):
        running = max(running, min(1.0, (m - j + 1) * p[i]))
        adjusted[i] = running
    return adjusted


@pytest.mark.parametrize("seed", range(5))
def test_holm_equals_its_literal_definition(seed):
    p = np.random.default_rng(seed).uniform(0, 0.2, 9).tolist()
    assert holm(p) == pytest.approx(_holm_by_definition(p))


def test_holm_ignores_missing_p_values_in_the_family():
    adjusted = holm([0.01, float("nan"), 0.04, 0.03, 0.005])
    assert math.isnan(adjusted[1])
    assert adjusted[[0, 2, 3, 4]] == pytest.approx(_holm_by_definition([0.01, 0.04, 0.03, 0.005]))


def test_max_statistic_equals_a_literal_loop_over_permutations():
    rng = np.random.default_rng(0)
    null = rng.normal(size=(4, 300))
    observed = np.array([2.5, 0.1, 1.7, -1.0])
    expected = [(1 + sum(null[:, b].max() >= r for b in range(300))) / 301 for r in observed]
    assert max_statistic(observed, null) == pytest.approx(expected)


def test_max_statistic_is_never_below_the_raw_p_and_ignores_undefined_tests():
    rng = np.random.default_rng(1)
    null = rng.normal(size=(3, 500))
    null[1] = np.nan
    observed = np.array([2.0, np.nan, 1.0])
    adjusted = max_statistic(observed, null)
    raw = [(1 + np.sum(null[k] >= observed[k])) / 501 for k in (0, 2)]
    assert math.isnan(adjusted[1]) and (adjusted[[0, 2]] >= raw).all()


def test_max_statistic_keeps_the_family_wise_error_under_a_global_null():
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(200):
        data = rng.normal(size=(10, 201))  # 10 tests, column 0 observed, the rest the shared permutations
        hits += bool((max_statistic(data[:, 0], data[:, 1:]) <= 0.05).any())
    assert hits / 200 <= 0.1  # family-wise 0.05 ± 3 standard errors
