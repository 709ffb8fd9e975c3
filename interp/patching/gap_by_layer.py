"""The gap of a perceiver × target cell matrix after patching one slot (intergroup: the persona), one row per (mode,
layer, position group), with what a reviewer asks of each number: the
gap in rating points with its t-interval over events, the gap closed paired by event (in points with its
t-interval, as a share of the unpatched gap with Fieller's interval), δ z-scored beside them with its event count and
the share of σ(M⁰)² that is event noise (no interval over events: δ shrinks with few events), the permutation p
(exact over every matching where the suite's test enumerates them) with its floor, and a family-wise p over the
layers of a mode."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from behavioral.analysis.cell_gap import EXACT_LIMIT, empathy_gap, event_noise_share, gap_closed, \
    gap_interval, n_matchings, permutation_test, zscore
from behavioral.analysis.multiplicity import max_statistic

N_PERMUTATIONS = 2000  # sampled permutations where the matchings are not enumerated (seed 0, shared by the layers)
INTERVALS = ("gap_raw_unpatched", "gap_raw_patched", "gap_closed_points", "gap_closed")
GAP_COLUMNS = ("mode", "layer", "positions", "n_events", "delta_unpatched", "delta_patched", "delta_change",
               "delta_removed", "noise_share", *(f"{name}{end}" for name in INTERVALS for end in ("", "_low", "_high")),
               "p_unpatched", "p_patched", "p_patched_fwe", "p_min", "p_test", "null_ci_low", "null_ci_high",
               "mean_expected", "mean_delta_expected", "n_prompts", "interval_note")
ONE_EVENT = "one event: no interval over events"


def cell_matrix(frame: pd.DataFrame, names: Sequence[str], column: str, slots: Sequence[str]) -> np.ndarray:
    """M0[p, x]: mean of `column` over events per identity of `names` in the first slot (p) and the second (x)."""
    M0 = frame.pivot_table(index=slots[0], columns=slots[1], values=column, aggfunc="mean")
    return M0.reindex(index=list(names), columns=list(names)).to_numpy(dtype=float)


def event_tensor(frame: pd.DataFrame, names: Sequence[str], column: str, slots: Sequence[str]) -> np.ndarray:
    """I[p, x, e]: `column` per identity of `names` in each of the two `slots` and per event (events in order of
    appearance; NaN where absent; rows naming no identity of `names`, intergroup's "a person", left out)."""
    events = list(dict.fromkeys(frame["event_id"]))
    p, x = (pd.Categorical(frame[slot], categories=list(names)).codes for slot in slots)
    e = pd.Categorical(frame["event_id"], categories=events).codes
    named = (p >= 0) & (x >= 0)
    I = np.full((len(names), len(names), len(events)), np.nan)
    I[p[named], x[named], e[named]] = frame[column].to_numpy(dtype=float)[named]
    return I


@dataclass(frozen=True)
class PatchedGapTest:
    """δ of one matrix, its raw gap in rating points, its one-sided permutation p (exact where enumerated) and null
    interval, and the null the family-wise correction shares across layers (the identity matching left out)."""

    delta: float
    raw: float
    p: float
    null_low: float
    null_high: float
    null: np.ndarray | None


def enumerated(same: np.ndarray) -> int | None:
    """The matchings δ's test enumerates for this in-group pattern (n!), None where it samples permutations."""
    count = n_matchings(same)
    return count if count is not None and count <= EXACT_LIMIT else None


def p_floor(same: np.ndarray) -> float:
    """The smallest p δ's test (and its family-wise p) can give: 1/n! exact (5 religions: 1/120), else
    1/(N_PERMUTATIONS + 1)."""
    return 1 / (enumerated(same) or N_PERMUTATIONS + 1)


def patched_gap_test(M0: np.ndarray, same: np.ndarray) -> PatchedGapTest:
    """δ (z-scored), its permutation test and the raw in-group minus out-group difference of M0 in intensity points;
    NaN where undefined (all cells equal, a cell missing)."""
    raw = float(M0[same].mean() - M0[~same].mean()) if np.isfinite(M0).all() else math.nan
    try:
        M = zscore(M0)
    except ValueError:
        return PatchedGapTest(math.nan, raw, math.nan, math.nan, math.nan, None)
    test = permutation_test(M, same, N_PERMUTATIONS, seed=0)
    if test.exact is None:
        return PatchedGapTest(empathy_gap(M, same), raw, test.p_value, test.ci_low, test.ci_high, test.null)
    # The exact null lists the n! matchings in itertools.permutations order, the identity (δ itself) first. Without
    # it, max_statistic's (1 + count) / (B + 1) is the exact count over all n! / n!.
    return PatchedGapTest(empathy_gap(M, same), raw, test.p_exact, test.ci_low, test.ci_high, test.exact.null[1:])


def family_wise(observed: list[float], nulls: list[np.ndarray | None]) -> np.ndarray:
    """Max-statistic family-wise p of each layer's δ over the layers of one mode, every layer tested against the same
    matchings (exact: all of them; sampled: the same seeded permutations); NaN where δ is undefined."""
    width = max((len(n) for n in nulls if n is not None), default=0)
    if not width:
        return np.full(len(observed), np.nan)
    rows = [n if n is not None else np.full(width, np.nan) for n in nulls]
    return max_statistic(observed, np.vstack(rows))


def event_intervals(clean: np.ndarray, patched: np.ndarray, same: np.ndarray) -> dict:
    """INTERVALS over the events, each a 95% interval: the raw gaps' t-intervals over their per-event gaps
    (`cell_gap.gap_interval`), the gap closed paired by event (`cell_gap.gap_closed`: t in points, Fieller as a
    share).
    NaN with the reason in `interval_note` where there is one event or the share is unbounded."""
    closed = gap_closed(clean, patched, same)
    out = {"gap_closed_points": closed.points, "gap_closed": closed.share,
           "gap_closed_points_low": closed.points_low, "gap_closed_points_high": closed.points_high,
           "gap_closed_low": closed.share_low, "gap_closed_high": closed.share_high, "interval_note": closed.note}
    if clean.shape[2] < 2:
        return out | {f"{name}{end}": math.nan for name in INTERVALS for end in ("_low", "_high")} | {
            "interval_note": ONE_EVENT}
    for name, tensor in (("gap_raw_unpatched", clean), ("gap_raw_patched", patched)):
        out[f"{name}_low"], out[f"{name}_high"] = gap_interval(tensor, same)
    return out


def gap_by_layer(frame: pd.DataFrame, names: Sequence[str], same: np.ndarray, slots: Sequence[str]) -> pd.DataFrame:
    """The gap per (mode, layer, position group) from a protocol's per-prompt rows (intergroup's
    `patched_gap_prompts`: columns mode, layer, positions, event_id, the two `slots` and the sweep's metrics): M0[p,
    x] = mean expected intensity over events of the identities `names` (`same`: their in-group cells), from the
    clean and the patched prompts.

    gap_raw_*: mean in-group minus mean out-group cell of M0 in intensity points; gap_closed_points: the unpatched
    minus the patched gap, paired by event; gap_closed: its share of the unpatched gap (1: gone, 2: reversed);
    *_low/_high: 95% intervals over the events (`event_intervals`). δ_unpatched / δ_patched: the z-scored gap
    (behavioral.analysis.cell_gap) with delta_removed = 1 − δ_patched / δ_unpatched, a ratio that also moves
    with σ(M0) and has no interval; noise_share: the share of the unpatched σ(M0)² that is event noise. p_unpatched /
    p_patched: one-sided permutation p of each δ, exact over all n! matchings where every identity is its own group
    and n! is small enough (p_test says which; cell_gap.EXACT_LIMIT), else sampled (N_PERMUTATIONS, seed 0);
    p_patched_fwe: max-statistic family-wise p over the layers of the same mode and position group (the same
    matchings for every layer); p_min: the floor of both; null_ci_low/high: the unpatched null's 95% interval."""
    exact = enumerated(same)
    p_test = f"exact over {exact} matchings" if exact else f"{N_PERMUTATIONS} permutations"
    rows, tests = [], []
    for (mode, layer, positions), part in frame.groupby(["mode", "layer", "positions"], sort=False):
        t0, t1 = (patched_gap_test(cell_matrix(part, names, c, slots), same) for c in ("expected_clean", "expected"))
        clean, patched = (event_tensor(part, names, c, slots) for c in ("expected_clean", "expected"))
        tests.append(t1)
        rows.append({"mode": mode, "layer": layer, "positions": positions, "n_events": part["event_id"].nunique(),
                     "delta_unpatched": t0.delta, "delta_patched": t1.delta, "delta_change": t1.delta - t0.delta,
                     "delta_removed": 1 - t1.delta / t0.delta if t0.delta else math.nan,
                     "noise_share": event_noise_share(clean),
                     "gap_raw_unpatched": t0.raw, "gap_raw_patched": t1.raw, "p_unpatched": t0.p, "p_patched": t1.p,
                     "p_min": p_floor(same), "p_test": p_test,
                     "null_ci_low": t0.null_low, "null_ci_high": t0.null_high,
                     "mean_expected": part["expected"].mean(), "mean_delta_expected": part["delta_expected"].mean(),
                     "n_prompts": len(part)} | event_intervals(clean, patched, same))
    table = pd.DataFrame(rows, columns=list(GAP_COLUMNS))
    for _, index in table.groupby(["mode", "positions"], sort=False).groups.items():
        family = [tests[i] for i in index]
        table.loc[index, "p_patched_fwe"] = family_wise([t.delta for t in family], [t.null for t in family])
    return table
