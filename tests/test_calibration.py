"""The calibration harness (tests/benchmarks/inference_calibration.py) in small worlds: the gap test keeps its size
in every null world it is run on, has power on a planted gap, and the interval of the gap over events covers the
truth at its level; the full table is in docs/BENCHMARKS.md."""

from __future__ import annotations

import numpy as np
import pytest

from tests.benchmarks import inference_calibration as harness

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("world", list(harness.NULLS))
def test_the_gap_test_keeps_its_size_in_every_null_world(world):
    size = harness.rejection(np.random.default_rng(1), harness.NULLS[world], 12, 1500, 1000)
    assert size <= 0.06  # the claim is 0.05; 1,500 runs give a binomial standard error of 0.006


def test_the_gap_test_has_power_and_its_interval_covers_the_gap_in_points():
    assert harness.rejection(np.random.default_rng(2), harness.planted(5.0), 12, 300, 1000) >= 0.85
    for world, gap in ((harness.planted(0.0), 0.0), (harness.planted(5.0), 5.0)):
        measured = harness.coverage(np.random.default_rng(3), world, gap, 4, 100, 200)
        assert measured["covers_gap"] >= 0.90  # the t-interval, at 4 events
    assert measured["covers_delta"] < 0.5  # δ's interval misses its many-event value: Table 2 prints none


def test_the_steering_change_interval_covers_the_true_change_at_few_events():
    measured = harness.change_coverage(np.random.default_rng(4), 4, 200, 200)
    assert measured["covers_gap"] >= 0.90  # the paired t-interval the steer study prints
    assert measured["covers_gap_bootstrap"] < 0.90  # the paired bootstrap it replaced runs short at 4 events


def test_the_patch_intervals_cover_at_few_events_and_stopping_is_never_claimed_at_the_margin():
    measured = harness.patch_intervals(12, 100, 100)
    assert measured["covers_gap"] >= 0.90  # the t-interval the patch study prints for the gap in points
    assert measured["covers_share"] >= 0.90 and measured["unbounded"] == 0  # Fieller's, for the share closed
    at_margin = harness.patch_claims(harness.PATCH_WORLDS["10% from 10 (the margin)"], 100, 100)
    assert at_margin["stops_mattering"] <= 0.06  # closing exactly 10% is not "stopped" within ±10%
    assert harness.patch_claims(harness.PATCH_WORLDS["stops at 10"], 100, 100)["stops_mattering"] >= 0.5  # power


def test_the_random_direction_control_never_passes_where_disturbance_alone_closes_the_gap():
    measured = {world: harness.random_control_world(world, 20) for world in harness.RANDOM_WORLDS[1:]}
    for world, result in measured.items():  # no feature; a gap that shrinks with any disturbance
        assert result["random_control_passes"] <= 0.05, world
    assert measured[harness.RANDOM_WORLDS[2]]["random_matched_mean"] > 0  # some direction disturbed as much
