"""Intervals over sampled units (events) of a difference measured on each: Student's t of a mean (and its one-sided
test), and how much of a gap an intervention closed, paired by unit, in points (t) and as a share of the gap before
(Fieller's interval for a ratio of means). Coverage of both is simulated in docs/BENCHMARKS.md (inference
calibration; `CLOSED_COVERAGE` says what the patch reports print of it)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps

UNBOUNDED = ("the gap before is not distinguishable from 0 at this level, so the share closed has no bounded "
             "interval (read the points closed)")
# What the 95% intervals of `closed` covered on synthetic patching runs of 4, 6 and 12 events (4,000 a cell; per-event
# effects normal, t₃ or skewed, of sd 1 or 3 times the per-event gap's own noise; continuous and 0-5 integer ratings):
# tests/benchmarks/inference_calibration.py --closing-events 4,6,12, 2026-11-28 (docs/BENCHMARKS.md, issue 48).
CLOSED_COVERAGE = (
    "on synthetic runs of 4-12 events the t-interval of the points closed covered 0.94-0.96, and 0.90-0.95 where "
    "event effects were skewed and three times the per-event noise; Fieller's set covered 0.94-0.96 counting the runs "
    "where it is unbounded, but the bounded intervals printed (runs whose gap before came out large) covered "
    "0.93-0.95 at 4-6 events and 0.95-0.96 at 12 with event effects as large as the per-event noise, 0.82-0.94 and "
    "0.89-0.95 with effects three times larger")


def t_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """Student's t interval of the mean of per-unit values; NaN with fewer than two."""
    if len(values) < 2:
        return float("nan"), float("nan")
    half = _sps.t.ppf((1 + level) / 2, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def t_p_greater(values: np.ndarray) -> float:
    """One-sided p of Student's t-test that the mean of per-unit values exceeds 0 (H0: mean ≤ 0, n − 1 degrees of
    freedom): below (1 − level) / 2 exactly where `t_interval`'s lower end lies above 0; NaN with fewer than two."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"):  # equal values: t is ±inf (p 0 or 1), or NaN at mean 0
        t = values.mean() / (values.std(ddof=1) / np.sqrt(len(values)))
    return float(_sps.t.sf(t, len(values) - 1))


@dataclass(frozen=True)
class GapClosed:
    """How much of the gap in rating points an intervention closed, paired by unit (event) over the units kept in
    both: in points (mean per-unit before − after, t-interval) and as a share of the gap before (ratio of the two
    means, Fieller's interval; NaN where the gap before is not distinguishable from 0 at the level, which leaves
    the ratio unbounded: `note` says so)."""

    points: float
    points_low: float
    points_high: float
    share: float
    share_low: float
    share_high: float
    n_events: int
    note: str


def closed(before: np.ndarray, after: np.ndarray, level: float = 0.95) -> GapClosed:
    """The gap closed from the per-unit gaps `before` to the per-unit gaps `after` (same units, same order)."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    change = before - after
    n = len(change)
    if not n:
        return GapClosed(*[math.nan] * 6, 0, "no event kept in both runs")
    points, share = float(change.mean()), float(change.mean() / before.mean()) if before.mean() else math.nan
    share_low, share_high, note = fieller(change, before, level) if n >= 2 else (math.nan, math.nan, "")
    return GapClosed(points, *t_interval(change, level), share, share_low, share_high, n, note)


def fieller(x: np.ndarray, y: np.ndarray, level: float) -> tuple[float, float, str]:
    """Fieller's interval for mean(x) / mean(y) of paired values: the ratios R with (x̄ − R ȳ)² ≤ t² var(x̄ − R ȳ);
    NaN with `UNBOUNDED` where ȳ is within t standard errors of 0."""
    n = len(x)
    t2 = _sps.t.ppf((1 + level) / 2, n - 1) ** 2
    cov = np.cov(x, y, ddof=1) / n
    mx, my = x.mean(), y.mean()
    a, b, c = my ** 2 - t2 * cov[1, 1], mx * my - t2 * cov[0, 1], mx ** 2 - t2 * cov[0, 0]
    if a <= 0:
        return math.nan, math.nan, UNBOUNDED
    half = math.sqrt(max(b * b - a * c, 0.0))
    return (b - half) / a, (b + half) / a, ""
