"""Wilson's interval of a proportion against scipy's, and the share of independent items that suites report with it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from behavioral.analysis.proportion import item_share, wilson


@pytest.mark.parametrize("level", [0.95, 0.9])
def test_wilson_equals_scipys_elementwise(level):
    k, n = np.array([0, 1, 2, 4, 37, 500]), np.array([4, 1, 11, 4, 50, 999])
    low, high = wilson(k, n, level)
    for i in range(len(k)):
        interval = binomtest(int(k[i]), int(n[i])).proportion_ci(level, method="wilson")
        assert (low[i], high[i]) == pytest.approx((interval.low, interval.high))


def test_wilson_of_no_items_is_missing():
    low, high = wilson([0, 3], [0, 5])
    assert math.isnan(low[0]) and math.isnan(high[0]) and 0 < low[1] < 0.6 < high[1] < 1


def test_item_share_leaves_out_missing_rows_and_needs_one_row_per_item():
    share, low, high = item_share(pd.Series([1.0, 0.0, np.nan, 1.0]), pd.Series(["a", "b", "c", "d"]))
    interval = binomtest(2, 3).proportion_ci(0.95, method="wilson")
    assert (share, low, high) == pytest.approx((2 / 3, interval.low, interval.high))
    share, low, high = item_share(pd.Series([True, False, True]), pd.Series(["a", "a", "b"]))
    assert share == pytest.approx(2 / 3) and math.isnan(low) and math.isnan(high)
    assert all(math.isnan(v) for v in item_share(pd.Series([np.nan]), pd.Series(["a"])))


def test_wilson_covers_a_fair_coin_about_95_times_in_100():
    rng = np.random.default_rng(0)
    k = rng.binomial(30, 0.5, size=400)
    low, high = wilson(k, np.full(400, 30))
    assert 0.91 <= np.mean((low < 0.5) & (0.5 < high)) <= 0.99
