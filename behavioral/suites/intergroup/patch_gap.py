"""δ after patching, one row per (mode, layer, position group), with what a reviewer asks of each number: the gap in
rating points with its t-interval over events beside the z-scaled δ, 95% percentile intervals over resamples of
the events for δ and the gap closed (the suite's ``stats.event_bootstrap``), the permutation p (exact over every
matching where the suite's test enumerates them) with its floor, and a family-wise p over the layers of a mode."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from behavioral.analysis.multiplicity import max_statistic
from behavioral.suites.intergroup.analysis import intensity_tensor
from behavioral.suites.intergroup.groups import Category, get_category
from behavioral.suites.intergroup.stats import EXACT_LIMIT, empathy_gap, event_bootstrap, gap_interval, \
    n_matchings, permutation_test, zscore

N_PERMUTATIONS = 2000  # sampled permutations where the matchings are not enumerated (seed 0, shared by the layers)
BOOTSTRAP = 1000  # resamples of the events, by default
SEED = 0  # of the event resamples
INTERVALS = ("delta_unpatched", "delta_patched", "delta_removed", "gap_raw_unpatched", "gap_raw_patched")
GAP_COLUMNS = ("mode", "layer", "positions", "n_events",
               *(f"{name}{end}" for name in INTERVALS[:2] for end in ("", "_low", "_high")), "delta_change",
               *(f"{name}{end}" for name in INTERVALS[2:] for end in ("", "_low", "_high")),
               "p_unpatched", "p_patched", "p_patched_fwe", "p_min", "p_test", "null_ci_low", "null_ci_high",
               "mean_expected", "mean_delta_expected", "n_prompts", "n_bootstrap", "interval_note")
ONE_EVENT = "one event: resampling it gives the same value every time, so no interval over events"


def category_of(category: str | Category) -> Category:
    """A category given by name or as itself."""
    return get_category(category) if isinstance(category, str) else category


def cell_matrix(frame: pd.DataFrame, category: Category, column: str) -> np.ndarray:
    """M0[p, x]: mean of `column` over events, perceivers and experiencers without "a person" (Table 1 order)."""
    names = list(category.identities)
    M0 = frame.pivot_table(index="perceiver", columns="experiencer", values=column, aggfunc="mean")
    return M0.reindex(index=names, columns=names).to_numpy(dtype=float)


def event_tensor(frame: pd.DataFrame, category: Category, column: str) -> np.ndarray:
    """I[p, x, e]: `column` per perceiver, experiencer and event, "a person" left out (events in order of
    appearance; NaN where absent), the suite's `intensity_tensor` as its event bootstrap reads it."""
    events = tuple(dict.fromkeys(frame["event_id"]))
    return intensity_tensor(frame, category, events, column)[0][1:, 1:]


@dataclass(frozen=True)
class GapTest:
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


def gap_test(M0: np.ndarray, same: np.ndarray) -> GapTest:
    """δ (z-scored), its permutation test and the raw in-group minus out-group difference of M0 in intensity points;
    NaN where undefined (all cells equal, a cell missing)."""
    raw = float(M0[same].mean() - M0[~same].mean()) if np.isfinite(M0).all() else math.nan
    try:
        M = zscore(M0)
    except ValueError:
        return GapTest(math.nan, raw, math.nan, math.nan, math.nan, None)
    test = permutation_test(M, same, N_PERMUTATIONS, seed=0)
    if test.exact is None:
        return GapTest(empathy_gap(M, same), raw, test.p_value, test.ci_low, test.ci_high, test.null)
    # The exact null lists the n! matchings in itertools.permutations order, the identity (δ itself) first. Without
    # it, max_statistic's (1 + count) / (B + 1) is the exact count over all n! / n!.
    return GapTest(empathy_gap(M, same), raw, test.p_exact, test.ci_low, test.ci_high, test.exact.null[1:])


def family_wise(observed: list[float], nulls: list[np.ndarray | None]) -> np.ndarray:
    """Max-statistic family-wise p of each layer's δ over the layers of one mode, every layer tested against the same
    matchings (exact: all of them; sampled: the same seeded permutations); NaN where δ is undefined."""
    width = max((len(n) for n in nulls if n is not None), default=0)
    if not width:
        return np.full(len(observed), np.nan)
    rows = [n if n is not None else np.full(width, np.nan) for n in nulls]
    return max_statistic(observed, np.vstack(rows))


def event_intervals(clean: np.ndarray, patched: np.ndarray, same: np.ndarray, n_resamples: int,
                    seed: int = SEED) -> dict:
    """Intervals over the events of INTERVALS: the raw gaps' t-intervals over their per-event gaps
    (`stats.gap_interval`; a percentile bootstrap of them covered 0.81 at 4 events, docs/BENCHMARKS.md); δ's and
    the gap closed's percentile intervals over resamples of the events (each through the suite's whole pipeline,
    `stats.event_bootstrap`, the same draws for the clean and the patched tensor, so each draw's gap closed pairs its
    own two δ). NaN with the reason in `interval_note` where there is one event, or where δ was undefined on a draw
    of one tensor and not the other."""
    out = {f"{name}{end}": math.nan for name in INTERVALS for end in ("_low", "_high")}
    if clean.shape[2] < 2:
        return out | {"n_bootstrap": 0, "interval_note": ONE_EVENT}
    b0 = event_bootstrap(clean, same, n_resamples, seed)
    b1 = event_bootstrap(patched, same, n_resamples, seed)
    values = {"delta_unpatched": b0.delta, "delta_patched": b1.delta}
    note = ""
    if b0.n_valid == b1.n_valid == n_resamples:
        with np.errstate(divide="ignore", invalid="ignore"):
            values["delta_removed"] = 1 - b1.delta / b0.delta
    else:
        note = (f"δ was undefined (all cells equal) on {n_resamples - b0.n_valid} unpatched and "
                f"{n_resamples - b1.n_valid} patched resamples, so the gap closed has no paired interval")
    for name, draws in values.items():
        out[f"{name}_low"], out[f"{name}_high"] = b0.interval(draws)
    for name, tensor in (("gap_raw_unpatched", clean), ("gap_raw_patched", patched)):
        out[f"{name}_low"], out[f"{name}_high"] = gap_interval(tensor, same)
    return out | {"n_bootstrap": min(b0.n_valid, b1.n_valid), "interval_note": note}


def gap_table(frame: pd.DataFrame, category: str | Category, n_bootstrap: int = BOOTSTRAP,
              seed: int = SEED) -> pd.DataFrame:
    """δ per (mode, layer, position group) from the protocol's per-prompt rows (`patched_gap_prompts`): M0[p, x] =
    mean expected intensity over events, z-scored without "a person" (behavioral.suites.intergroup.stats), δ_patched
    from the patched matrix beside δ_unpatched from the clean one.

    delta_removed = 1 - δ_patched / δ_unpatched, the gap closed (1: gone, 2: reversed); gap_raw_*: mean in-group minus
    mean out-group cell of M0 in intensity points (not z-scored, so not moved by a change of σ(M0)); *_low/_high: 95%
    intervals over the events (`event_intervals`: t over the per-event gaps for gap_raw_*, percentile over
    `n_bootstrap` seeded resamples for δ and the gap closed); p_unpatched
    / p_patched: one-sided permutation p of each δ, exact over all n! matchings where every identity is its own group
    and n! is small enough (p_test says which; stats.EXACT_LIMIT), else sampled (N_PERMUTATIONS, seed 0); p_patched_fwe:
    max-statistic family-wise p over the layers of the same mode and position group (the same matchings for every
    layer); p_min: the floor of both; null_ci_low/high: the unpatched null's 95% interval."""
    category = category_of(category)
    same = category.in_group()
    exact = enumerated(same)
    p_test = f"exact over {exact} matchings" if exact else f"{N_PERMUTATIONS} permutations"
    rows, tests = [], []
    for (mode, layer, positions), part in frame.groupby(["mode", "layer", "positions"], sort=False):
        t0 = gap_test(cell_matrix(part, category, "expected_clean"), same)
        t1 = gap_test(cell_matrix(part, category, "expected"), same)
        intervals = event_intervals(event_tensor(part, category, "expected_clean"),
                                    event_tensor(part, category, "expected"), same, n_bootstrap, seed)
        tests.append(t1)
        rows.append({"mode": mode, "layer": layer, "positions": positions, "n_events": part["event_id"].nunique(),
                     "delta_unpatched": t0.delta, "delta_patched": t1.delta, "delta_change": t1.delta - t0.delta,
                     "delta_removed": 1 - t1.delta / t0.delta if t0.delta else math.nan,
                     "gap_raw_unpatched": t0.raw, "gap_raw_patched": t1.raw, "p_unpatched": t0.p, "p_patched": t1.p,
                     "p_min": p_floor(same), "p_test": p_test,
                     "null_ci_low": t0.null_low, "null_ci_high": t0.null_high,
                     "mean_expected": part["expected"].mean(), "mean_delta_expected": part["delta_expected"].mean(),
                     "n_prompts": len(part)} | intervals)
    table = pd.DataFrame(rows, columns=list(GAP_COLUMNS))
    for _, index in table.groupby(["mode", "positions"], sort=False).groups.items():
        family = [tests[i] for i in index]
        table.loc[index, "p_patched_fwe"] = family_wise([t.delta for t in family], [t.null for t in family])
    return table
