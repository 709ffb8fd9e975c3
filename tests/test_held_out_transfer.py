"""The held-out-identity control's score and ratio (issue 48): an identity's in-group interaction (its in-group cell
less the perceiver and experiencer main effects fit on the out-group cells) on small matrices worked by hand, a
projection that only shifts an identity's row counted as no transfer (it counted as 0.75 before), transfer refused
where the real closing is not distinguishable from 0 or lies below it; the length term (issue 59): a rating that reads persona tokens
× experiencer tokens passed without it and is refused with it, and equal lengths need none; and, slow, the
calibration harness's worlds: separation of a shared feature from per-identity ones, the coverage of transfer's
interval, and the length-confound world failing."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from behavioral.analysis.paired import t_interval
from behavioral.suites.intergroup import steering
from behavioral.suites.intergroup.groups import get_category
from tests.synthetic_worlds import cells_of, projection_rows
from tests.benchmarks import inference_calibration as harness
from interp.steering import held_out
from interp.steering.held_out import held_out_control

RELIGION = get_category("religion")
NAMES = list(RELIGION.identities)


def test_the_interaction_of_an_additive_matrix_with_an_ingroup_bonus_is_the_bonus():
    rows, cols, bonus = np.array([0.0, 1, 2]), np.array([10.0, 20, 30]), np.array([3.0, 0, -1])
    M = np.add.outer(rows, cols) + np.diag(bonus)
    np.testing.assert_allclose(held_out.ingroup_interaction(M, np.eye(3, dtype=bool)), np.diag(bonus), atol=1e-12)


def test_one_outgroup_cell_off_the_additive_model_leaves_its_cycle_and_moves_the_diagonal_by_hand():
    # 3 × 3 without the diagonal: 6 cells, 5 parameters; the one residual contrast is +1 on the cycle (0,1), (1,2),
    # (2,0) and -1 on (0,2), (1,0), (2,1). 6 at (0, 1) leaves residual 1 × it; the fitted rows 0, -2, -4 and
    # columns 3, 5, 1 predict 3, 3, -3 on the diagonal, whose cells are 0.
    M = np.zeros((3, 3))
    M[0, 1] = 6.0
    expected = [[-3, 1, -1], [-1, -3, 1], [1, -1, 3]]
    np.testing.assert_allclose(held_out.ingroup_interaction(M, np.eye(3, dtype=bool)), expected, atol=1e-12)


def test_other_ingroup_cells_do_not_leak_into_an_identitys_interaction():
    M = np.diag([3.0, 0, 0, 0, 0])  # identity 0's in-group cell alone
    interaction = held_out.ingroup_interaction(M, np.eye(5, dtype=bool))
    np.testing.assert_allclose(np.diag(interaction), [3, 0, 0, 0, 0], atol=1e-12)
    centred = M - M.mean(axis=0) - M.mean(axis=1)[:, None] + M.mean()
    assert centred[1, 1] == pytest.approx(3 / 25)  # a double-centring over all cells mixes 1/n² of it in


def test_blocks_of_several_identities_per_group_and_events_along_the_last_axis():
    groups = np.array([0, 0, 1, 2])
    same = groups[:, None] == groups[None, :]
    M = np.add.outer([0.0, 1, 2, 3], [10.0, 20, 30, 40]) + 2 * same
    I = np.stack([M, M + 5 * same, np.add.outer([4.0, 3, 2, 1], [0.0, 0, 0, 0])], axis=2)
    np.testing.assert_allclose(held_out.ingroup_interaction(I, same), np.stack([2 * same, 7 * same, 0 * same], 2),
                               atol=1e-12)


def test_the_length_term_removes_persona_tokens_times_experiencer_tokens_and_leaves_the_bonus():
    tokens = np.array([2.0, 1, 1, 3, 4])
    bonus = np.array([3.0, 0, -1, 0, 2])
    M = np.add.outer(np.arange(5.0), 10 * np.arange(5.0)) + 1.5 * np.outer(tokens, tokens) + np.diag(bonus)
    same = np.eye(5, dtype=bool)
    assert not np.allclose(np.diag(held_out.ingroup_interaction(M, same)), bonus)  # the product is not additive
    covariate = held_out.length_term(dict(zip(NAMES, zip(tokens, tokens))), NAMES)
    np.testing.assert_allclose(np.diag(held_out.ingroup_interaction(M, same, covariate)), bonus, atol=1e-9)
    equal = held_out.length_term(dict.fromkeys(NAMES, (2, 2)), NAMES)  # additive: left out, the same as none
    np.testing.assert_allclose(held_out.ingroup_interaction(M, same, equal), held_out.ingroup_interaction(M, same))


def test_two_groups_leave_the_interaction_undefined():
    with pytest.raises(ValueError, match="three or more groups"):
        held_out.ingroup_interaction(np.zeros((2, 2)), np.eye(2, dtype=bool))


def test_transfer_is_a_ratio_of_paired_means_refused_where_the_denominators_interval_is_not_above_0():
    assert held_out.transfer(np.array([1.0, 1.0]), np.array([4.0, 4.0])) == {
        "transfer": 0.25, "transfer_low": 0.25, "transfer_high": 0.25, "transfer_note": ""}
    rng = np.random.default_rng(0)
    notes = set()
    for _ in range(80):
        held, real = rng.normal(0.5, 1, 6), rng.normal(0.3, 1, 6)
        result = held_out.transfer(held, real)
        low, high = t_interval(real, 0.95)
        assert np.isnan(result["transfer"]) == (low <= 0)
        if low <= 0:
            notes.add(result["transfer_note"])
            assert result["transfer_note"] == (held_out.TRANSFER_REFUSED if high >= 0 else held_out.TRANSFER_RAISED)
            assert np.isnan(result["transfer_low"]) and np.isnan(result["transfer_high"])
        else:
            assert result["transfer"] == pytest.approx(held.mean() / real.mean())
            assert result["transfer_low"] <= result["transfer"] <= result["transfer_high"]
    assert notes == {held_out.TRANSFER_REFUSED, held_out.TRANSFER_RAISED}  # both reasons drawn
    assert held_out.transfer(np.array([1.0]), np.array([2.0]))["transfer_note"] == (
        "fewer than two events kept in every condition")


def _rows(matrices: dict[str, np.ndarray], events: int = 4) -> pd.DataFrame:
    """Steering rows of religion whose named cells hold `matrices[condition]` [5, 5, events] ("a person" 50)."""
    cells = cells_of(RELIGION)
    base = projection_rows(np.zeros((len(cells), events, 1)), cells, np.ones(1), {}, [f"e{i}" for i in range(events)])
    frames = []
    for condition, I in matrices.items():
        full = np.full((6, 6, events), 50.0)
        full[1:, 1:] = I
        held = int(condition.rsplit(" ", 1)[1]) if "held out" in condition else -1
        frames.append(base.assign(intensity=full.ravel(), expected_intensity=full.ravel(), condition=condition,
                                  layer=-1 if condition == "unsteered" else 1, project=condition != "unsteered",
                                  held_out=held))
    return pd.concat(frames, ignore_index=True)


def _world(held_out: Callable[[np.ndarray, int], np.ndarray], events: int = 4) -> dict[str, np.ndarray]:
    """An additive matrix with a 2-point in-group bonus unsteered, the real projection removing the bonus, and the
    projection fit without identity j doing `held_out(unsteered, j)`, the same in every event."""
    unsteered = np.add.outer(np.arange(5.0), 10 * np.arange(5.0)) + 2 * np.eye(5)
    every = lambda M: np.repeat(M[:, :, None], events, axis=2)  # noqa: E731
    return {"unsteered": every(unsteered), "L1 project": every(unsteered - 2 * np.eye(5)),
            **{f"L1 project held out {j}": every(held_out(unsteered, j)) for j in range(5)}}


def _shift_row(M: np.ndarray, j: int) -> np.ndarray:
    """M with identity j's row (its ratings as perceiver) 3 points lower: a main effect moved, no bonus."""
    out = M.copy()
    out[j] -= 3
    return out


def test_a_projection_that_only_shifts_an_identitys_row_transfers_nothing():
    rows = _rows(_world(_shift_row))
    table = held_out_control(steering.measured(rows)).query("measure == 'intensity'")
    assert table["identity"].tolist() == list(RELIGION.identities) + ["pooled"]
    np.testing.assert_allclose(table["interaction_unsteered"], 2)
    np.testing.assert_allclose(table["closed_held_out"], 0, atol=1e-9)
    np.testing.assert_allclose(table["closed_real"], 2)
    pooled = table.iloc[-1]
    assert pooled["transfer"] == pytest.approx(0, abs=1e-9) and pooled["n_events"] == 4
    assert pooled["transfer_low"] == pytest.approx(0, abs=1e-9) == pooled["transfer_high"]
    # before: j's in-group cell against its row and column, gap 2 -> 0.5 (the cell -3, the out-group cells -1.5)
    assert harness.old_transfer(rows) == pytest.approx(0.75)


def test_a_shared_feature_transfers_fully_and_a_real_closing_of_0_is_refused():
    shared = held_out_control(steering.measured(_rows(_world(lambda M, j: M - 2 * np.eye(5))))).iloc[5]
    assert shared["identity"] == "pooled" and shared["transfer"] == pytest.approx(1)
    world = _world(_shift_row)
    world["L1 project"] = world["unsteered"] + np.eye(5)[:, :, None] * np.array([1.0, -1, 1, -1])  # closes 0
    pooled = held_out_control(steering.measured(_rows(world))).iloc[5]
    assert pooled["closed_real"] == pytest.approx(0, abs=1e-9)
    assert pooled["closed_real_low"] < 0 < pooled["closed_real_high"]
    assert np.isnan(pooled["transfer"]) and pooled["transfer_note"] == held_out.TRANSFER_REFUSED


TOKENS = np.array([2, 1, 1, 3, 4])  # persona and experiencer tokens of Christian, Muslim, Jew, Buddhist, Hindu


def _length_world(events: int = 6) -> pd.DataFrame:
    """Rows of a rating that reads persona tokens × experiencer tokens (2 points a token pair), no in-group feature:
    every projection (the real one and each fit without an identity) removes that term, each condition with its own
    seeded event noise (sd 0.3)."""
    rng = np.random.default_rng(0)
    additive = np.add.outer(np.arange(5.0), 10 * np.arange(5.0))[:, :, None]
    lengths = 2 * np.outer(TOKENS, TOKENS)[:, :, None]
    noisy = lambda M: M + rng.normal(0, 0.3, (5, 5, events))  # noqa: E731
    return _rows({"unsteered": noisy(additive + lengths), "L1 project": noisy(additive),
                  **{f"L1 project held out {j}": noisy(additive) for j in range(5)}}, events)


def test_a_rating_that_reads_token_lengths_passed_without_the_length_term_and_is_refused_with_it():
    rows = _length_world()
    unmatched = held_out_control(steering.measured(rows)).query("measure == 'intensity'")
    before = unmatched.iloc[-1]
    assert before["transfer"] == pytest.approx(1, abs=0.05) and before["closed_real_low"] > 0  # passed: "shared"
    assert before["length_control"] == held_out.LENGTHS_NOT_GIVEN
    tokens = {name: (int(n), int(n)) for name, n in zip(NAMES, TOKENS)}
    now = held_out_control(steering.measured(rows), tokens).query("measure == 'intensity'")
    pooled = now.iloc[-1]
    assert (now["length_control"] == held_out.LENGTHS_FIT).all()
    np.testing.assert_allclose(now["interaction_unsteered"], 0, atol=0.5)  # the lengths explain the gap
    assert pooled["closed_real_low"] < 0 < pooled["closed_real_high"]
    assert np.isnan(pooled["transfer"]) and pooled["transfer_note"] == held_out.TRANSFER_REFUSED
    same = held_out_control(steering.measured(rows), dict.fromkeys(NAMES, (2, 2))).query("measure == 'intensity'")
    assert (same["length_control"] == held_out.LENGTHS_ADDITIVE).all()  # equal lengths: nothing to fit
    np.testing.assert_allclose(same[["closed_held_out", "closed_real"]], unmatched[["closed_held_out", "closed_real"]])


@pytest.mark.slow
def test_the_length_confound_world_fails_the_control_and_passed_without_the_length_term():
    world = harness.held_out_world("length confound", 12, 60)
    assert world["held_out_passes"] <= 0.05  # 0.017 over 120 worlds in docs/BENCHMARKS.md
    assert world["held_out_passes_no_lengths"] >= 0.9  # as scored from issue 48: it passed in all


@pytest.mark.slow
def test_the_harness_worlds_separate_and_transfers_interval_covers():
    shared = harness.held_out_world("shared feature", 6, 60)
    per_identity = harness.held_out_world("per-identity features", 6, 100)
    none = harness.held_out_world("no feature", 12, 100)
    assert shared["held_out_passes"] >= 0.9 and shared["transfer_refused"] == 0
    assert per_identity["held_out_passes"] <= 0.05  # 0.00 in the 200-world table
    assert per_identity["held_out_passes_before"] >= 0.3  # as scored before: 0.40-0.62 in the issue
    assert none["held_out_passes"] <= 0.08 and none["transfer_refused"] >= 0.85  # 0.05 refused by chance
    for result in (shared, per_identity):  # 0.95 claimed; ±0.03 Monte Carlo at 60-100 worlds
        assert result["covers_transfer"] >= 0.9
