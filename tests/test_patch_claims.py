"""The patching study's claims on synthetic per-event tables whose answer is known: the intervals cover the planted
gap closed (Fieller's for the share, literally the ratios a paired t-test does not reject; NaN with one event or an
unpatched gap that may be 0, saying why), the raw gap is the literal in-group minus out-group difference of cell
means, the family-wise p is a literal max-statistic count over the 5! matchings, and the headline names the planted
layer from which patching stops mattering."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from behavioral.analysis import Table
from interp.patching import gap_report
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.corpus import EMOTIONS, Event
from behavioral.suites.intergroup import patching as IP
from behavioral.suites.intergroup.patching import gap_table
from interp.patching.gap_by_layer import ONE_EVENT
from behavioral.analysis.paired import UNBOUNDED, closed
from behavioral.analysis.cell_gap import zscore
from tests.synthetic_worlds import GAP, patched_rows
from interp.patching.claims import beyond, equivalent, stops_mattering, undetermined_from

RELIGION = get_category("religion")
NAMES = RELIGION.identities
SAME = RELIGION.in_group()


def synthetic(closed: dict[int, float], n_events: int, noise: float = 0.3, seed: int = 0,
              category=RELIGION) -> pd.DataFrame:
    """The synthetic patching rows of `tests.synthetic_worlds` (no patch noise)."""
    return patched_rows(closed, n_events, noise, seed, category)


def test_the_intervals_cover_the_planted_gap_closed():
    shares = {0: 1.0, 5: 0.6, 10: 0.0}
    table = gap_table(synthetic(shares, n_events=30), RELIGION).set_index("layer")
    for layer, share in shares.items():
        row = table.loc[layer]
        assert row["gap_closed_low"] <= share <= row["gap_closed_high"], layer
        assert row["gap_closed_points_low"] <= share * GAP <= row["gap_closed_points_high"], layer
    # no patch noise: each event's gap closes by exactly share × GAP, so both intervals are points
    assert table.loc[5, "gap_closed"] == pytest.approx(0.6 * GAP / table.loc[5, "gap_raw_unpatched"])
    assert table.loc[5, "gap_closed_points_high"] - table.loc[5, "gap_closed_points_low"] < 1e-9
    assert (table["interval_note"] == "").all()


def test_the_share_interval_is_fieller_the_ratios_a_paired_t_test_does_not_reject():
    frame = patched_rows({3: 0.5}, 8, noise=2.0, seed=4, patch_noise=1.0)
    row = gap_table(frame, RELIGION).iloc[0]
    gaps = {}
    for column in ("expected_clean", "expected"):
        per_event = []
        for _, part in frame.groupby("event_id", sort=False):
            cells = part.groupby(["perceiver", "experiencer"])[column].mean()
            per_event.append(np.mean([cells[p, p] for p in NAMES])
                             - np.mean([cells[p, x] for p in NAMES for x in NAMES if p != x]))
        gaps[column] = np.array(per_event)
    closed, before = gaps["expected_clean"] - gaps["expected"], gaps["expected_clean"]
    assert row["gap_closed"] == pytest.approx(closed.mean() / before.mean(), rel=1e-9)
    # the literal definition: R is inside iff the t-test of the per-event closed − R × gap has p >= 0.05
    grid = np.linspace(row["gap_closed"] - 2, row["gap_closed"] + 2, 4001)
    kept = [r for r in grid if scipy.stats.ttest_1samp(closed - r * before, 0).pvalue >= 0.05]
    step = grid[1] - grid[0]
    assert min(kept) == pytest.approx(row["gap_closed_low"], abs=step)
    assert max(kept) == pytest.approx(row["gap_closed_high"], abs=step)


def test_the_share_interval_covers_at_about_its_level():
    covered = []
    for seed in range(40):
        row = gap_table(patched_rows({3: 0.5}, 12, noise=2.0, seed=seed, patch_noise=1.0), RELIGION).iloc[0]
        covered.append(row["gap_closed_low"] <= 0.5 <= row["gap_closed_high"])
    assert 35 <= sum(covered) <= 40


def test_the_share_has_no_interval_where_the_unpatched_gap_may_be_zero():
    frame = patched_rows({3: 0.5}, 4, noise=2.0, seed=0, patch_noise=1.0)
    frame["expected"] -= np.where(frame["perceiver"] == frame["experiencer"], GAP, 0.0)  # no gap left anywhere
    frame["expected_clean"] -= np.where(frame["perceiver"] == frame["experiencer"], GAP, 0.0)
    row = gap_table(frame, RELIGION).iloc[0]
    assert row["gap_raw_unpatched_low"] <= 0 <= row["gap_raw_unpatched_high"]
    assert math.isnan(row["gap_closed_low"]) and row["interval_note"] == UNBOUNDED
    assert row["gap_closed_points_low"] < row["gap_closed_points_high"]  # the points closed keep theirs
    text = gap_report.headline(gap_table(frame, RELIGION), last_block=23)
    assert "the share closed divides by a gap that may be nothing and has no bounded interval" in text


def test_one_event_has_no_interval_and_says_why():
    table = gap_table(synthetic({0: 1.0, 1: 0.0}, n_events=1), RELIGION)
    for column in [c for c in table.columns if c.endswith(("_low", "_high")) and not c.startswith("null_ci")]:
        assert table[column].isna().all(), column
    assert (table["interval_note"] == ONE_EVENT).all()
    text = gap_report.headline(table, last_block=1)
    assert "No interval over events: one event" in text
    assert "Where patching stops mattering cannot be read without intervals (one event" in text
    events = _events("joy")
    scope = gap_report.scope_section(table, 1, IP.events_cannot(events, EMOTIONS), [0, 1], 1, 1, "system").text
    assert "one event (e0), no interval; rerun with --limit-events 2 or more" in scope
    assert "without an interval (one event" in scope


def test_the_raw_gap_is_the_literal_difference_of_cell_means():
    frame = synthetic({0: 0.4}, n_events=6, seed=3)
    row = gap_table(frame, RELIGION).iloc[0]
    for column, raw in (("expected_clean", "gap_raw_unpatched"), ("expected", "gap_raw_patched")):
        inside, outside = [], []
        for p in NAMES:
            for x in NAMES:
                mean = frame.loc[(frame["perceiver"] == p) & (frame["experiencer"] == x), column].mean()
                (inside if p == x else outside).append(mean)
        assert row[raw] == pytest.approx(sum(inside) / len(inside) - sum(outside) / len(outside), rel=1e-12)
        # its interval: Student's t over the same literal gap in each of the six events
        gaps = []
        for _, part in frame.groupby("event_id", sort=False):
            cells = part.groupby(["perceiver", "experiencer"])[column].mean()
            gaps.append(np.mean([cells[p, p] for p in NAMES])
                        - np.mean([cells[p, x] for p in NAMES for x in NAMES if p != x]))
        half = scipy.stats.t.ppf(0.975, len(gaps) - 1) * np.std(gaps, ddof=1) / np.sqrt(len(gaps))
        assert (row[f"{raw}_low"], row[f"{raw}_high"]) == pytest.approx(
            (np.mean(gaps) - half, np.mean(gaps) + half), rel=1e-9)
    assert row["gap_raw_patched"] == pytest.approx(row["gap_raw_unpatched"] - 0.4 * GAP, rel=1e-9)


def test_the_family_wise_p_is_a_literal_max_statistic_over_the_matchings():
    frame = synthetic({0: 1.0, 1: 0.7, 2: 0.3, 3: 0.0}, n_events=4, noise=0.8, seed=1)
    table = gap_table(frame, RELIGION)
    assert (table["p_test"] == "exact over 120 matchings").all() and (table["p_min"] == 1 / 120).all()
    matrices = [zscore(part.pivot_table(index="perceiver", columns="experiencer", values="expected")
                       .reindex(index=NAMES, columns=NAMES).to_numpy()) for _, part in frame.groupby("layer")]
    observed = [M[SAME].mean() - M[~SAME].mean() for M in matrices]
    largest = []
    for matching in itertools.permutations(range(5)):
        gaps = []
        for M in matrices:
            inside = [M[i, matching[i]] for i in range(5)]
            gaps.append(np.mean(inside) - (M.sum() - sum(inside)) / 20)
        largest.append(max(gaps))
    for k, row in table.iterrows():
        assert row["delta_patched"] == pytest.approx(observed[k])
        p_fwe = sum(m >= observed[k] - 1e-12 for m in largest) / 120
        assert row["p_patched_fwe"] == pytest.approx(p_fwe, abs=1e-12)
        assert row["p_patched_fwe"] >= row["p_patched"]
        assert math.isclose(row["p_patched"] * 120, round(row["p_patched"] * 120))  # exact: a multiple of 1/120


def test_a_sampled_test_says_so_and_its_family_wise_p_is_not_below_p():
    race = get_category("race")
    table = gap_table(synthetic({0: 1.0, 1: 0.2}, n_events=3, category=race), race)
    assert (table["p_test"] == "2000 permutations").all() and (table["p_min"] == 1 / 2001).all()
    assert (table["p_patched_fwe"] >= table["p_patched"]).all()


@pytest.mark.parametrize("layers, low, high, expected", [
    ([0, 1, 2, 3, 4], [0.9, 0.5, -0.1, 0.2, -0.05], [1.1, 0.8, 0.05, 0.4, 0.05], 4),  # the dip at 2 is not "from on"
    ([0, 5, 10], [0.9, -0.05, -0.1], [1.0, 0.08, 0.1], 5),
    ([10, 0, 5], [-0.1, 0.9, -0.05], [0.1, 1.0, 0.08], 5),  # unsorted
    ([0, 1], [0.9, 0.1], [1.0, 0.3], None),  # the last tested layer still matters
    ([0, 1], [0.9, -0.2], [1.0, 0.3], None),  # the last includes 0 but reaches beyond ±10%: not shown to be none
    ([0, 1], [math.nan, math.nan], [math.nan, math.nan], None),  # no intervals
    ([0, 1], [-0.1, -0.1], [0.1, 0.1], 0),
])
def test_stops_mattering_needs_every_interval_from_there_within_the_margin(layers, low, high, expected):
    assert stops_mattering(layers, low, high, margin=0.1) == expected


def test_an_interval_that_only_includes_zero_is_read_as_undetermined():
    assert undetermined_from([0, 1, 2], [0.9, -0.2, -0.3], [1.0, 0.3, 0.4]) == 1
    assert stops_mattering([0, 1, 2], [0.9, -0.2, -0.3], [1.0, 0.3, 0.4], margin=0.1) is None
    assert stops_mattering([0, 1, 2], [0.9, -0.2, -0.3], [1.0, 0.3, 0.4], margin=0.5) == 1


def test_a_half_closed_gap_at_every_layer_is_never_read_as_stopping_to_matter():
    # the review's world: 50% closed everywhere; with 3 events the old intervals (1 − δ ratio over event resamples)
    # were about 3 wide and "includes 0" would have said "stops mattering" in 5 of these 10 runs
    for events, unbounded in ((3, 7), (12, 0)):
        declared, missing = 0, 0
        for seed in range(10):
            frame = patched_rows({0: 0.5, 10: 0.5, 20: 0.5}, n_events=events, noise=2.0, seed=seed, patch_noise=1.0)
            table = gap_table(frame, RELIGION)
            declared += gap_report.result(table, 23)["person"]["stops_mattering"] is not None
            missing += (table["interval_note"] == UNBOUNDED).any()
            if events == 12:  # paired by event, the share closed is told from 0 at every layer
                assert (table["gap_closed_low"] > 0).all()
        assert declared == 0 and missing == unbounded


def test_the_headline_names_the_planted_layer():
    shares = {0: 1.0, 4: 0.8, 8: 0.5, 12: 0.0, 16: 0.4, 20: 0.0, 23: 0.0}  # 12 dips to 0, 16 matters again
    table = gap_table(synthetic(shares, n_events=12, noise=0.2), RELIGION)
    text = gap_report.headline(table, last_block=23)
    assert "from layer 20 on, every patched layer's effect is within ±10.0% of none (the gap closed within ±10.0% " \
        "of the unpatched gap: an equivalence test at 0.025 over 12 events, both one-sided t-tests (11 degrees of " \
        "freedom) of an effect at ±10.0% rejecting" in text
    # layer 16 closes 40%, its interval beyond ±10%: shown to matter, so the change lies between 16 and 20
    assert "beyond ±10.0% (its 95% interval outside it): the persona's states at these positions stop mattering " \
        "between layers 16 and 20" in text
    assert "at layer 0 the patch closes" in text and "about 100% is expected by construction" in text
    assert "Here the interval excludes" not in text
    assert gap_report.result(table, 23)["person"]["stops_mattering"]["layer"] == 20
    still = gap_table(synthetic({0: 1.0, 23: 0.5}, n_events=12, noise=0.2), RELIGION)
    assert "No layer from which patching is shown to stop mattering among those tested" in \
        gap_report.headline(still, last_block=23)
    wide = gap_table(synthetic({0: 1.0, 23: 0.0}, n_events=4, seed=2), RELIGION)
    wide_text = gap_report.headline(wide.assign(gap_closed_low=[0.9, -0.3], gap_closed_high=[1.1, 0.4]), 23)
    assert "From layer 23 on every interval includes 0 but reaches beyond ±10.0%: not distinguishable from 0" in \
        wide_text
    last = gap_report.headline(gap_table(synthetic({0: 1.0, 10: 0.5, 23: 0.0}, n_events=12, noise=0.2), RELIGION),
                                 last_block=23)
    assert "stop mattering between layers 10 and 23" in last
    assert "Layer 23 is the last block, where a patch before the answer's position changes nothing by construction." \
        in last


def test_a_layer_that_only_failed_the_equivalence_test_is_not_said_to_matter():
    # the issue-48 world: patching closes 0 from layer 10 on; layer 10's interval is neither inside ±10% nor beyond
    # it, layer 20's is inside: the headline used to say "stop mattering between layers 10 and 20"
    table = gap_table(patched_rows({0: 1.0, 10: 0.0, 20: 0.0}, 4, 0.3, 3, patch_noise=0.3), RELIGION)
    bounds = table[["gap_closed_low", "gap_closed_high"]].to_numpy()
    assert not equivalent(*bounds[1]) and not beyond(*bounds[1]) and equivalent(*bounds[2])
    text = gap_report.headline(table, last_block=23)
    assert "from layer 20 on, every patched layer's effect is within ±10.0% of none" in text
    assert "over 4 events, both one-sided t-tests (3 degrees of freedom)" in text
    assert "Layer 10 before it closes" in text and "neither shown within ±10.0% nor beyond it, so the tests do not " \
        "say whether patching still matters there." in text
    assert "between layers" not in text and "mattered" not in text


@pytest.mark.parametrize("low, high, expected", [
    (0.11, 0.5, True), (-0.5, -0.2, True), (0.05, 0.5, False), (-0.05, 0.05, False), (math.nan, 0.5, False),
])
def test_beyond_needs_the_whole_interval_outside_the_margin(low, high, expected):
    assert beyond(low, high, 0.1) is expected


def test_the_share_within_the_margin_is_the_two_one_sided_t_tests_with_n_minus_1_degrees_of_freedom():
    # Fieller's interval of the share closed lies inside ±m exactly where both one-sided paired t-tests of
    # closed − m × before < 0 and closed + m × before > 0 reject at 0.025 (n − 1 degrees of freedom)
    rng = np.random.default_rng(48)
    outcomes = []
    for k in range(400):
        n = 3 + k % 10
        before = rng.normal(1.5, 0.5, n)
        after = before - rng.normal(rng.uniform(-0.2, 0.2), 0.1, n)
        change = closed(before, after)
        upper = scipy.stats.ttest_1samp(before - after - 0.1 * before, 0, alternative="less").pvalue
        lower = scipy.stats.ttest_1samp(before - after + 0.1 * before, 0, alternative="greater").pvalue
        tost = max(upper, lower) < 0.025
        assert equivalent(change.share_low, change.share_high, 0.1) == tost, k
        outcomes.append(tost)
    assert 0.2 < np.mean(outcomes) < 0.8  # both outcomes well represented


def _events(*emotions: str, cluster: str | None = None) -> list[Event]:
    """Events e0, e1, ... of these emotions (texts unused by the scope)."""
    return [Event(f"e{k}", emotion, "t", "t", cluster=cluster) for k, emotion in enumerate(emotions)]


def test_events_lacking_some_of_the_corpus_emotions_or_sharing_clusters_are_scoped_to_what_they_hold():
    table = gap_table(synthetic({0: 1.0, 5: 0.0}, n_events=4), RELIGION)
    events = _events("anger", "anger", "joy", "fear", cluster="t")
    text = gap_report.scope_section(table, 4, IP.events_cannot(events, EMOTIONS), [0, 5], 5, 23, "chatml").text
    assert ("Narratives of emotions the 4 events lack: they hold anger 2, fear 1, joy 1; 3 of the corpus's 12, so "
            "the intervals speak of events of these emotions, not of the corpus") in text
    assert "4 of the events belong to clusters of the corpus, which these intervals count as independent" in text


def test_the_scope_is_built_from_the_settings():
    table = gap_table(synthetic({0: 1.0, 5: 0.0}, n_events=8), RELIGION)
    section = gap_report.scope_section(table, 8, IP.events_cannot(_events(*["joy"] * 8), ("joy",)), [0, 5], 5, 23,
                                       "chatml")
    assert section.title == "What this can and cannot show"
    assert "Which of the 2 tested layers (0, 5)" in section.text
    assert "with 95% intervals over the 8 events (t in points, Fieller as a share)" in section.text
    assert "A δ comparable with one over another number of events" in section.text
    assert "exact over 120 matchings, floor 0.00833" in section.text
    assert "about 100% in mode person: true by construction" in section.text
    assert "every 5-th of --layers" in section.text and "prompts in the chatml chat format" in section.text
    assert "Narratives beyond the corpus the 8 events were drawn from: the intervals treat them as a random" in \
        section.text
    headers, rows = Table("gap_by_layer", "", table, gap_report.FORMATS, columns=gap_report.COLUMNS).printed()
    assert set(gap_report.COLUMNS) <= set(table.columns)  # every printed column is one of the CSV's
    assert headers == list(gap_report.COLUMNS.values()) and len(rows) == len(table)
    assert set(gap_report.DEFINITIONS) <= set(headers)
