"""Held-out steering and its controls on synthetic activations where the right answer is known: the split of events,
a planted in-group direction recovered from the fit events and separating held-out ones, the wrong-matching control
(ranked by the share of its own gap, which a shared feature does not make special) and the held-out-identity
control (which tells a shared in-group feature from one feature per identity), one-sided
steerings assembled from whole-grid reruns, and the options' bad input."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from interp.steering.study import Options, direction, labelled_difference, split_events, transfer_text
from behavioral.suites.intergroup import steering as protocol
from behavioral.suites.intergroup.groups import get_category
from tests.synthetic_worlds import cells_of, projection_rows, steering_states
from interp.matchings import matched, wrong_matchings
from interp.steering import mean_difference, one_sided, span_direction
from interp.matchings import matched_cells
from interp.steering import held_out
from interp.steering.controls import dose_response, matching_control, random_control, summarize
from interp.steering.held_out import held_out_control

SETTING = "P0S0T0"
RELIGION = get_category("religion")
NAMES = list(RELIGION.identities)
SELECTION = {"category": "religion", "setting": SETTING}


def test_the_default_split_is_seeded_disjoint_and_held_out():
    events = [f"e{i:02d}" for i in range(12)]
    split = split_events(events, Options())
    assert len(split.fit) == 6 and sorted(split.fit + split.test) == events and not set(split.fit) & set(split.test)
    assert split.held_out and split.exclude == split.fit and split.limit_events is None
    assert split_events(events, Options()) == split  # seeded
    assert split_events(events, Options(split_seed=1)).fit != split.fit
    assert len(split_events(events, Options(fit_fraction=0.75)).fit) == 9
    assert len(split_events(events[:2], Options(fit_fraction=0.99)).test) == 1  # never every event fit

    inside = split_events(events, Options(in_sample=True))
    assert inside.fit == inside.test == events and not inside.held_out
    new = split_events(events, Options(test_events=24))
    assert new.fit == events and new.test is None and new.limit_events == 24 and new.exclude == events
    with pytest.raises(ValueError, match="a split needs 2"):
        split_events(events[:1], Options())


@pytest.mark.parametrize("options, message", [
    (dict(matchings=3), "go with --project"),
    (dict(random_directions=1), "go with --project"),
    (dict(in_sample=True, test_events=4), "exclude each other"),
    (dict(fit_fraction=1.0), "--fit-fraction 1.0: expected a share between 0 and 1"),
    (dict(one_sided=True, coefs=(0.0,)), "--one-sided needs a nonzero --coef"),
    (dict(matchings=-1, project=True), "--matchings"),
])
def test_bad_options_name_the_flag(options, message):
    with pytest.raises(ValueError, match=message):
        Options(**options)


def _cells() -> pd.DataFrame:
    """The 5 × 5 named cells of religion plus "a person" (neither side), Table 1 order."""
    return cells_of(RELIGION)


def _states(plant: float, seed: int = 0, shared: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic steering world's states [cells, 30 events, 16] and its readout direction."""
    states, readout, _ = steering_states(plant, seed=seed, shared=shared)
    return states, readout


def _fake(states: np.ndarray, events: list[str]) -> SimpleNamespace:
    """A steering protocol whose store is `states` [cells, events, d] at one hook."""
    def final(store, selection, chosen=None):
        keep = [events.index(e) for e in (chosen if chosen is not None else events)]
        return states[:, keep].mean(axis=1)[None], _cells().assign(count=len(keep))
    return SimpleNamespace(final=final, SLOTS=protocol.SLOTS, identities=protocol.identities)


def test_a_planted_ingroup_direction_is_recovered_from_the_fit_events_and_separates_held_out_ones():
    events = [f"e{i:02d}" for i in range(30)]
    states, u = _states(plant=3.0)
    split = split_events(events, Options())
    found = direction(None, _fake(states, events), SELECTION, unit=True, events=split.fit)
    assert found.used.shape == (1, 16)
    assert float(found.used[0] @ u) > 0.95  # the planted direction, from the fit half alone
    held = [events.index(e) for e in split.test]
    scores = states[:, held] @ found.used[0]
    ingroup = matched_cells(_cells(), protocol.SLOTS, protocol.identities(SELECTION), None)
    inside = scores[ingroup.eq(True).fillna(False).to_numpy()].mean()
    outside = scores[ingroup.eq(False).fillna(False).to_numpy()].mean()
    assert inside - outside > 2.5  # held-out in-group states lie further along it by about the planted 3
    wrong = direction(None, _fake(states, events), SELECTION, unit=True, events=split.fit,
                      matching=np.array([1, 2, 3, 4, 0]))
    # a derangement's out-group holds every real in-group cell: its direction is the planted one reversed, which is
    # why wrong matchings are compared by the gap each closes of its own, not by their directions
    assert float(wrong.used[0] @ u) < -0.9


def _controls(plant: float, seed: int, shared: bool = True,
              with_matchings: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The wrong-matching (empty without `with_matchings`) and held-out-identity controls of one synthetic world
    (expected intensity)."""
    events = [f"e{i:02d}" for i in range(30)]
    states, u = _states(plant, seed=seed, shared=shared)
    readout = 3 * u + 0.3 * np.random.default_rng(seed + 1).standard_normal(len(u))
    split = split_events(events, Options())
    fake = _fake(states, events)
    matchings = wrong_matchings(5, 1000) if with_matchings else np.zeros((0, 5), int)  # all 119
    found = direction(None, fake, SELECTION, False, split.fit)
    directions = {"L1 project": found.used[0]}
    for m, matching in enumerate(matchings):
        directions[f"L1 project matching {m}"] = direction(None, fake, SELECTION, False, split.fit, matching).used[0]
    for j in range(5):
        directions[f"L1 project held out {j}"] = labelled_difference(found.means, found.cells, fake, SELECTION,
                                                                     False, None, j).used[0]
    held = [events.index(e) for e in split.test]
    rows = projection_rows(states[:, held], _cells(), readout, directions, split.test)
    matching = matching_control(protocol.measured(rows), matchings) if with_matchings else \
        pd.DataFrame({"measure": []})
    held_out = held_out_control(protocol.measured(rows))
    return (matching[matching["measure"] == "expected_intensity"],
            held_out[held_out["measure"] == "expected_intensity"])


def test_the_matching_control_ranks_each_matching_by_the_share_of_its_own_gap_closed():
    table = _controls(plant=3.0, seed=0)[0]
    real = table[table["matching"] == "real"].iloc[0]
    assert len(table) == 120 and real["fixed_points"] == 5
    assert real["gap_unsteered"] > 5 and abs(real["gap_projected"]) < 0.5 * real["gap_unsteered"]
    assert real["closed_low"] > 0  # the interval over held-out events excludes no effect
    assert real["closed_low"] <= real["closed_points"] <= real["closed_high"]
    wrong = table[table["matching"] != "real"]
    closed = np.sign(wrong["gap_unsteered"]) * (wrong["gap_unsteered"] - wrong["gap_projected"])
    np.testing.assert_allclose(wrong["closed_points"], closed)
    assert wrong["closed_low"].isna().all()
    assert (wrong["closed_points"] < real["closed_points"]).all()  # ranked by points it would win by construction
    assert real["p_real"] == (1 + (wrong["closed_share"] >= real["closed_share"] - 1e-12).sum()) / (len(wrong) + 1)


def test_the_held_out_identity_control_tells_a_shared_feature_from_per_identity_ones():
    shared = _controls(plant=3.0, seed=0, shared=True, with_matchings=False)[1]
    matching, per_identity = _controls(plant=3.0, seed=0, shared=False)
    for table in (shared, per_identity):
        assert table["identity"].tolist() == NAMES + ["pooled"]
        rows = table[table["identity"] != "pooled"]
        np.testing.assert_allclose(rows["closed_held_out"],
                                   rows["interaction_unsteered"] - rows["interaction_held_out"])
        pooled = table.iloc[-1]
        assert pooled["closed_real"] == pytest.approx(rows["closed_real"].mean())
        assert pooled["closed_real_low"] > 0  # the real direction, fit with every identity, lowers them
        assert pooled["closed_real"] > 0.7 * pooled["interaction_unsteered"]  # by most of what they were
        assert pooled["transfer"] == pytest.approx(pooled["closed_held_out"] / pooled["closed_real"])
        assert pooled["transfer_low"] <= pooled["transfer"] <= pooled["transfer_high"]
    assert shared["transfer"].iloc[-1] > 0.8  # a shared feature: the direction fit without an identity removes it
    assert per_identity["transfer"].iloc[-1] < 0.4  # one feature per identity: it does not
    # where the wrong-matching control cannot tell the two worlds apart: it passes here too
    assert matching[matching["matching"] == "real"]["p_real"].iloc[0] < 0.05


def test_without_planted_structure_the_real_matching_is_not_special():
    real = _controls(plant=0.0, seed=0)[0].iloc[0]
    assert real["matching"] == "real" and real["p_real"] > 0.2  # it closes its gap no more than wrong ones do


def _random_rows(shared: bool, n_random: int = 39) -> pd.DataFrame:
    """The steering rows of a synthetic world: the real direction and `n_random` random directions within the span of
    the fit cells' states (the real one's norm) projected out at layer 1."""
    events = [f"e{i:02d}" for i in range(30)]
    states, readout, cells = steering_states(3.0, seed=0, shared=shared)
    means = states[:, :15].mean(axis=1)[None]
    label = matched_cells(cells, protocol.SLOTS, protocol.identities(SELECTION), None)
    real = mean_difference(means, np.full(len(cells), 15), label.eq(True).fillna(False),
                           label.eq(False).fillna(False))[0]
    directions = {"L1 project": real, **{f"L1 project random {k}": span_direction(means[0], np.linalg.norm(real), k)
                                         for k in range(1, n_random + 1)}}
    other = np.random.default_rng(1).standard_normal(len(readout))  # the rating reads more than the gap's feature
    return projection_rows(states[:, 15:], cells, 3 * readout + other, directions, events[15:]).assign(unit_id=0)


def test_random_directions_are_matched_on_how_far_they_disturb_the_ratings_and_scored_on_the_real_gap():
    rows = _random_rows(shared=True)
    table = random_control(protocol.measured(rows))
    table = table[table["measure"] == "intensity"]
    real, random = table.iloc[0], table.iloc[1:]
    assert real["condition"] == "L1 project" and len(random) == 39
    summary = summarize(protocol.measured(rows), protocol, n_permutations=20)
    summary = summary[summary["measure"] == "intensity"].set_index("condition")
    base = rows[rows["condition"] == "unsteered"].set_index(["perceiver", "experiencer", "event_id"])["intensity"]
    for _, row in table.iterrows():
        # closed_points: the real gap's move toward 0; disturbance: mean |change| of the "a person" prompts
        assert row["closed_points"] == pytest.approx(
            -np.sign(summary.loc["unsteered", "gap_points"]) * summary.loc[row["condition"], "gap_points_change"])
        steered = rows[rows["condition"] == row["condition"]].set_index(["perceiver", "experiencer", "event_id"])
        outside = [k for k in steered.index if "a person" in k[:2]]
        assert row["disturbance"] == pytest.approx((steered.loc[outside, "intensity"] - base[outside]).abs().mean())
    matched = random["disturbance"] >= real["disturbance"]
    assert random["matched"].tolist() == matched.tolist() and real["n_matched"] == matched.sum() > 0
    exceed = (random.loc[matched, "closed_points"] >= real["closed_points"]).sum()
    assert real["p_matched"] == (1 + exceed) / (1 + matched.sum())
    assert real["p_floor"] == 1 / (1 + matched.sum())


def test_without_a_random_direction_as_disturbing_the_random_control_cannot_speak():
    states, readout, cells = steering_states(3.0, seed=0)
    blind = np.random.default_rng(2).standard_normal(len(readout))
    blind -= (blind @ readout) / (readout @ readout) * readout  # the rating does not read it: no disturbance
    rows = projection_rows(states, cells, readout, {"L1 project": readout, "L1 project random 1": blind},
                           [f"e{i}" for i in range(30)]).assign(unit_id=0)
    table = random_control(protocol.measured(rows)).query("measure == 'intensity'")
    assert table["disturbance"].iloc[1] < 1e-9 < table["disturbance"].iloc[0]
    assert table["n_matched"].iloc[0] == 0 and np.isnan(table["p_matched"].iloc[0]) and table["p_floor"].iloc[0] == 1


def test_the_dose_response_of_one_sided_steering_is_the_per_event_slope_of_the_gap_change():
    cells = _cells()
    events = [f"e{i}" for i in range(6)]
    rng = np.random.default_rng(0)
    base = projection_rows(rng.normal(size=(len(cells), 6, 4)), cells, np.ones(4), {}, events).assign(unit_id=0)
    label = matched_cells(base, protocol.SLOTS, protocol.identities(SELECTION), None)
    out_group = label.eq(False).fillna(False).to_numpy()
    frames = [base]
    for coef in (2.0, 4.0, -4.0):  # out-group raised 0.5 points per unit, in-group lowered 0.25, plus noise
        moved = base["intensity"] + np.where(out_group, 0.5 * coef, 0.0) * (coef > 0) \
            + np.where(label.eq(True).fillna(False), 0.25 * coef, 0.0) * (coef < 0) + rng.normal(0, 0.1, len(base))
        frames.append(base.assign(intensity=moved, expected_intensity=moved, score_intensity=moved, layer=1,
                                  coef=coef, condition=f"L1 {coef:+g}", project=False))
    rows = pd.concat(frames, ignore_index=True)
    inside = matched_cells(rows, protocol.SLOTS, protocol.identities(SELECTION))
    rows = pd.concat([rows, one_sided(rows, inside, protocol.KEY,
                                      protocol.SIDES)], ignore_index=True)
    table = dose_response(protocol.measured(rows), protocol.SIDES)
    table = table[table["measure"] == "intensity"].set_index("side")
    outside = table.loc["out-group only"]
    assert outside["coefs"] == "+2 +4" and outside["n_coefs"] == 2 and outside["n_events"] == 6
    assert outside["slope"] == pytest.approx(-0.5, abs=0.05)  # the gap falls 0.5 points per unit
    assert outside["slope_low"] < -0.5 < outside["slope_high"] and outside["monotone"]
    inside = table.loc["in-group only"]
    assert inside["coefs"] == "-4" and not inside["monotone"]  # one coefficient: no dose-response to read
    assert inside["slope"] == pytest.approx(0.25, abs=0.05)


def test_a_wrong_matching_labels_cells_by_its_permutation():
    cells = _cells()
    label = matched_cells(cells, protocol.SLOTS, protocol.identities(SELECTION), np.array([1, 2, 3, 4, 0]))
    named = cells[label.notna()]
    assert label.isna().sum() == 11  # "a person" on either side
    chosen = named[label[label.notna()].astype(bool)]
    assert [(NAMES.index(p), NAMES.index(x)) for p, x in chosen[["perceiver", "experiencer"]].to_numpy()] == [
        (0, 1), (1, 2), (2, 3), (3, 4), (4, 0)]
    np.testing.assert_array_equal(matched([0, 1, -1], [0, 1, 0]), [True, True, False])


def test_one_sided_steerings_take_the_steered_results_on_one_side_only():
    cells = _cells()
    base = cells.assign(event_id="e0", unit_id=range(len(cells)), expected_intensity=50.0)
    common = dict(project=False, random=0, matching=-1)
    rows = pd.concat([base.assign(condition="unsteered", layer=-1, coef=np.nan, **common),
                      base.assign(condition="L1 +4", layer=1, coef=4.0, expected_intensity=60.0, **common),
                      base.assign(condition="L1 -4", layer=1, coef=-4.0, expected_intensity=40.0, **common)],
                     ignore_index=True)
    inside = matched_cells(rows, protocol.SLOTS, protocol.identities(SELECTION), None)
    sided = one_sided(rows, inside, ("unit_id", "event_id"), protocol.SIDES)
    assert list(dict.fromkeys(sided["condition"])) == ["L1 +4 out-group only", "L1 -4 in-group only"]
    label = matched_cells(cells, protocol.SLOTS, protocol.identities(SELECTION), None)
    up = sided[sided["condition"] == "L1 +4 out-group only"].set_index("unit_id")["expected_intensity"]
    down = sided[sided["condition"] == "L1 -4 in-group only"].set_index("unit_id")["expected_intensity"]
    assert (up[label.eq(False).fillna(False).to_numpy()] == 60).all() and (up[label.ne(False).fillna(True).to_numpy()] == 50).all()
    assert (down[label.eq(True).fillna(False).to_numpy()] == 40).all() and (down[label.ne(True).fillna(True).to_numpy()] == 50).all()
    assert sided["one_sided"].all() and sided["coef"].tolist() == [4.0] * 36 + [-4.0] * 36


@pytest.mark.slow
def test_a_check_of_every_test_event_joins_the_sweep_and_the_held_out_control_runs_through_the_cli(pinned_run,
                                                                                                  tmp_path):
    from behavioral.analysis.runs import read_runs
    from behavioral.cli.commands import main
    from behavioral.suites.intergroup.suite import SUITE

    out = tmp_path / "out"
    assert main(["interp", "steer", str(pinned_run), "--out", str(out), "--where", "category=religion", "--where",
                 f"setting={SETTING}", "--layers", "last", "--coef=0", "--in-sample", "--check-events", "0",
                 "--project", "--held-out-identities", "2", "--random-directions", "2", "--permutations", "20",
                 "--device", "cpu", "--no-progress"]) == 0
    check = pd.read_csv(out / "zero_coefficient_check.csv")
    assert check[["condition", "n_rows", "identical"]].values.tolist() == [["L1 +0", 108, True]]  # 3 events × 36
    assert not (out / "runs" / "check").exists()  # no second unsteered rerun
    steered = {"unsteered", "L1 project", "L1 project held out 0", "L1 project held out 1", "L1 project random",
               "L1 project random 2"}
    assert set(pd.read_csv(out / "steering.csv")["condition"]) == steered  # the check is no steering
    rows = pd.read_csv(out / "steering_rows.csv")
    table = pd.read_csv(out / "held_out_control.csv")
    (run,) = read_runs(SUITE, [pinned_run], allow_partial=True)
    tokens = protocol.identity_tokens(run, SELECTION)
    assert tokens == {"a Christian": (8, 8), "a Muslim": (6, 6), "a Jew": (5, 5), "a Buddhist": (8, 8),
                      "a Hindu": (6, 6)}  # the tiny model's tokenizer: lengths differ, the length term is fit
    held = held_out_control(protocol.measured(rows), tokens)
    assert table["identity"].tolist() == held["identity"].tolist() == ["a Christian", "a Muslim", "pooled"] * 2
    assert (table["length_control"] == held_out.LENGTHS_FIT).all()
    np.testing.assert_allclose(table["closed_held_out"], held["closed_held_out"])
    report = (out / "report.md").read_text()
    assert "in-sample, on the 3 events the direction was fit on" in report
    assert "Control: each identity held out of the fit" in report and "no held-out-identity control ran" not in report
    random = pd.read_csv(out / "random_control.csv")
    expected = random_control(protocol.measured(rows))
    assert random["condition"].tolist() == expected["condition"].tolist() == ["L1 project", "L1 project random",
                                                                              "L1 project random 2"] * 2
    np.testing.assert_allclose(random["closed_points"], expected["closed_points"])
    claims = pd.read_csv(out / "claims.csv").set_index("control")
    assert claims["here"].str.startswith("p_matched").sum() == 1
    assert claims["here"].str.startswith("transfer").sum() == 1
    assert (claims["here"] == "not run (in-sample)").sum() == 1 and (claims["here"] == "not run").sum() == 2
    transfer = claims.loc[claims["here"].str.startswith("transfer"), "here"].iloc[0]
    assert transfer == transfer_text(held)
