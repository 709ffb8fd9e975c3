"""The patching study's claims on synthetic per-event tables whose answer is known: the event-bootstrap interval covers
the planted gap closed (and is NaN with one event, saying why), the raw gap is the literal in-group minus out-group
difference of cell means, the family-wise p is a literal max-statistic count over the 5! matchings, and the headline
names the planted layer from which patching stops mattering."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from behavioral.cli import main
from behavioral.suites.intergroup import patch_report
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.patch_gap import ONE_EVENT, gap_table
from behavioral.suites.intergroup.stats import zscore
from behavioral.suites.intergroup.synthetic import GAP, patched_rows, true_closed
from interp.patch_claims import stops_mattering, undetermined_from

RELIGION = get_category("religion")
NAMES = RELIGION.identities
SAME = RELIGION.in_group()


def synthetic(closed: dict[int, float], n_events: int, noise: float = 0.3, seed: int = 0,
              category=RELIGION) -> pd.DataFrame:
    """The synthetic patching rows of `behavioral.suites.intergroup.synthetic` (no patch noise)."""
    return patched_rows(closed, n_events, noise, seed, category)


def test_the_interval_covers_the_planted_gap_closed():
    shares = {0: 1.0, 5: 0.6, 10: 0.0}
    table = gap_table(synthetic(shares, n_events=30), RELIGION, n_bootstrap=500).set_index("layer")
    for layer, share in shares.items():
        row = table.loc[layer]
        assert row["delta_removed_low"] <= true_closed(share) <= row["delta_removed_high"], layer
        assert row["delta_removed_low"] < row["delta_removed_high"] or share == 0
    assert table.loc[5, "delta_removed_low"] > 0.2 and table.loc[5, "delta_removed_high"] < 0.8  # informative width
    assert (table["n_bootstrap"] == 500).all() and (table["interval_note"] == "").all()


def test_the_interval_covers_at_about_its_level():
    share = 0.5
    covered = [gap_table(synthetic({3: share}, n_events=20, noise=0.6, seed=seed), RELIGION, n_bootstrap=300)
               .pipe(lambda t: t["delta_removed_low"].iloc[0] <= true_closed(share) <= t["delta_removed_high"].iloc[0])
               for seed in range(20)]
    assert sum(covered) >= 16


def test_one_event_has_no_interval_and_says_why():
    table = gap_table(synthetic({0: 1.0, 1: 0.0}, n_events=1), RELIGION)
    for column in [c for c in table.columns if c.endswith(("_low", "_high")) and not c.startswith("null_ci")]:
        assert table[column].isna().all(), column
    assert (table["interval_note"] == ONE_EVENT).all() and (table["n_bootstrap"] == 0).all()
    text = patch_report.headline(table, last_block=1)
    assert "No interval over events: one event" in text
    assert "Where patching stops mattering cannot be read without intervals (one event" in text
    scope = patch_report.scope_section(table, ["e0"], [0, 1], 1, 1, "system").text
    assert "one event (e0), no interval; rerun with --limit-events 2 or more" in scope
    assert "without an interval (one event" in scope


def test_the_raw_gap_is_the_literal_difference_of_cell_means():
    frame = synthetic({0: 0.4}, n_events=6, seed=3)
    row = gap_table(frame, RELIGION, n_bootstrap=200).iloc[0]
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
    table = gap_table(frame, RELIGION, n_bootstrap=50)
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
    table = gap_table(synthetic({0: 1.0, 1: 0.2}, n_events=3, category=race), race, n_bootstrap=20)
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
    # the review's world: 50% closed everywhere, 3 events, intervals about 3 wide; "includes 0" (the old rule)
    # would have said "stops mattering" in 5 of these 10 runs
    undetermined, declared = 0, 0
    for seed in range(10):
        frame = patched_rows({0: 0.5, 10: 0.5, 20: 0.5}, n_events=3, noise=2.0, seed=seed, patch_noise=1.0)
        table = gap_table(frame, RELIGION, n_bootstrap=100)
        bounds = table["layer"].tolist(), table["delta_removed_low"].tolist(), table["delta_removed_high"].tolist()
        undetermined += undetermined_from(*bounds) is not None
        declared += patch_report.result(table, 23)["person"]["stops_mattering"] is not None
    assert undetermined == 5 and declared == 0


def test_the_headline_names_the_planted_layer():
    shares = {0: 1.0, 4: 0.8, 8: 0.5, 12: 0.0, 16: 0.4, 20: 0.0, 23: 0.0}  # 12 dips to 0, 16 matters again
    table = gap_table(synthetic(shares, n_events=12, noise=0.2), RELIGION, n_bootstrap=300)
    text = patch_report.headline(table, last_block=23)
    assert "from layer 20 on, every tested layer's gap closed lies within ±10.0% of the unpatched gap" in text
    assert "stop mattering between layers 16 and 20" in text
    assert "at layer 0 the patch closes" in text and "about 100% is expected by construction" in text
    assert "Here the interval excludes" not in text
    assert patch_report.result(table, 23)["person"]["stops_mattering"]["layer"] == 20
    still = gap_table(synthetic({0: 1.0, 23: 0.5}, n_events=12, noise=0.2), RELIGION, n_bootstrap=300)
    assert "No layer from which patching is shown to stop mattering among those tested" in \
        patch_report.headline(still, last_block=23)
    wide = gap_table(synthetic({0: 1.0, 23: 0.0}, n_events=4, seed=2), RELIGION, n_bootstrap=300)
    wide_text = patch_report.headline(wide.assign(delta_removed_low=[0.9, -0.3], delta_removed_high=[1.1, 0.4]), 23)
    assert "From layer 23 on every interval includes 0 but reaches beyond ±10.0%: not distinguishable from 0" in \
        wide_text
    last = gap_table(synthetic({0: 1.0, 10: 0.5, 23: 0.0}, n_events=12, noise=0.2), RELIGION, n_bootstrap=300)
    assert ("Layer 23 is the last block, where a patch before the answer's position changes nothing by construction; "
            "layer 10 is the last tested layer where patching mattered") in patch_report.headline(last, last_block=23)


def test_the_scope_is_built_from_the_settings():
    table = gap_table(synthetic({0: 1.0, 5: 0.0}, n_events=8), RELIGION, n_bootstrap=100)
    section = patch_report.scope_section(table, [f"e{k}" for k in range(8)], [0, 5], 5, 23, "chatml")
    assert section.title == "What this can and cannot show"
    assert "Which of the 2 tested layers (0, 5)" in section.text
    assert "with a 95% interval over 100 resamples of the 8 events" in section.text
    assert "exact over 120 matchings, floor 0.00833" in section.text
    assert "about 100% in mode person: true by construction" in section.text
    assert "every 5-th of --layers" in section.text and "prompts in the chatml chat format" in section.text
    shown = patch_report.display(table)
    assert list(shown.columns) == ["mode", "layer", "gap closed", "δ patched", "gap patched (points)", "p",
                                   "p (max-T over layers)"]


def test_bootstrap_below_one_exits_2(pinned_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["interp", "patch", str(pinned_run), "--out", str(out), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert "--bootstrap must be at least 1, got 0" in err and err.count("\n") == 1
    assert not out.exists()
