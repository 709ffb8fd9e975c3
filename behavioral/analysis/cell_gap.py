"""The in-group gap of a perceiver × target cell matrix (seed 000, section 3.4): z-scored matrices, the empathy
gap δ, its permutation tests and its paired tests over events."""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps

from behavioral.analysis.bootstrap import percentile_interval, resamples
from behavioral.analysis.paired import GapClosed, closed, t_interval, t_p_greater

EXACT_LIMIT = 100_000  # the most outcomes an exact test enumerates (8! = 40,320 matchings; 2^16 = 65,536 sign patterns)
# The gap test's draws come from their own stream of the seed (the seed itself draws the sampled matchings).
DRAW_STREAM = 1
DRAW_CHUNK = 1_000  # null draws built at a time: [chunk, events] indices (6,050 events: 48 MB)


@dataclass(frozen=True, eq=False)
class ExactPermutation:
    """The exact null of δ (its value under each of the n! matchings of rows to columns), its 95% interval and p."""

    null: np.ndarray
    ci_low: float
    ci_high: float
    p_value: float


@dataclass(frozen=True, eq=False)
class PermutationResult:
    """Observed δ, its permutation null, the null's 95% interval and a one-sided p-value for δ > 0.

    p_min is the p of a δ equal to the null's largest value. With few identities the null takes few distinct values
    (5 religions: the 120 ways to match rows to columns), its largest is drawn about once in 120, and p cannot fall
    below about 1/120 however large δ is or however many permutations are drawn.

    null, ci_low, ci_high and p_value are the authors' sampled test (the paper's column). Where every identity is its
    own group (same pairs each row with one column), the null has n_outcomes = n! equally likely outcomes, one per
    matching; where n! <= EXACT_LIMIT, `exact` enumerates them all (the toolkit's addition; None otherwise).
    """

    delta: float
    null: np.ndarray
    ci_low: float
    ci_high: float
    p_value: float
    n_outcomes: int | None = None
    exact: ExactPermutation | None = None

    @property
    def p_exact(self) -> float | None:
        """The exact one-sided p, #{matchings with δ' >= δ} / n!; None where not enumerated."""
        return None if self.exact is None else self.exact.p_value

    @property
    def p_min(self) -> float:
        """The p of a δ equal to the null's largest value (see the class docstring)."""
        return float((1 + np.count_nonzero(at_least(self.null, self.null.max()))) / (len(self.null) + 1))

    @property
    def at_floor(self) -> bool:
        """Whether δ is at or above every value the null took: no smaller p is possible with these permutations."""
        return bool(at_least(np.asarray(self.delta), self.null.max()))


def _as_float_matrix(M: np.ndarray, name: str) -> np.ndarray:
    M = np.asarray(M, dtype=float)
    if M.ndim != 2 or M.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-D matrix, got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name} contains NaN or infinite values; expected finite cell means")
    return M


def _check_same(M: np.ndarray, same: np.ndarray) -> np.ndarray:
    same = np.asarray(same)
    if same.dtype != bool:
        raise ValueError(f"same must be a boolean array, got dtype {same.dtype}")
    if same.shape != M.shape:
        raise ValueError(
            f"shape mismatch: M has shape {M.shape} but same has shape {same.shape}; expected equal shapes"
        )
    if same.all():
        raise ValueError("same is True everywhere: expected at least one out-group cell (False)")
    if not same.any():
        raise ValueError("same is False everywhere: expected at least one in-group cell (True)")
    return same


def _check_intensities(I: np.ndarray) -> np.ndarray:
    I = np.asarray(I, dtype=float)
    if I.ndim != 3 or I.shape[0] != I.shape[1]:
        raise ValueError(f"I must have shape [n, n, e] (perceiver, experiencer, event), got shape {I.shape}")
    return I


def zscore(M0: np.ndarray) -> np.ndarray:
    """(M0 - mean(M0)) / std(M0) over the whole matrix, with the population std (ddof=0)."""
    M0 = _as_float_matrix(M0, "M0")
    std = M0.std()
    if not std > 0:
        raise ValueError("all cells equal: z-scores undefined")
    return (M0 - M0.mean()) / std


def empathy_gap(M: np.ndarray, same: np.ndarray) -> float:
    """δ = mean of M over in-group cells (same True) minus mean over out-group cells.

    Pass M without the unspecified "a person" row and column, z-scored over that smaller matrix.
    """
    M = _as_float_matrix(M, "M")
    same = _check_same(M, same)
    return float(M[same].mean() - M[~same].mean())


def _permutation_indices(
    n_permutations: int, shape: tuple[int, int], seed: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Row and column permutations, int[n_permutations, rows] and int[n_permutations, cols], drawn independently."""
    rng = np.random.default_rng(seed)
    n_rows, n_cols = shape
    rows = rng.permuted(np.tile(np.arange(n_rows), (n_permutations, 1)), axis=1)
    cols = rng.permuted(np.tile(np.arange(n_cols), (n_permutations, 1)), axis=1)
    return rows, cols


def _permuted_gaps(M: np.ndarray, same: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """δ of M[rows[k]][:, cols[k]] for every k, with same held fixed."""
    permuted = M[rows[:, :, None], cols[:, None, :]]
    return permuted[:, same].mean(axis=1) - permuted[:, ~same].mean(axis=1)


def permutation_test(
    M: np.ndarray, same: np.ndarray, n_permutations: int = 10_000, seed: int | None = 0
) -> PermutationResult:
    """Structured permutation test of δ: rows and columns of M are permuted independently, never cells.

    p_value is one-sided for the hypothesis δ > 0: (1 + #{null >= δ}) / (n_permutations + 1),
    where null values equal to δ up to floating-point rounding count as >=. The exact test beside it: see
    `exact_permutation_test`.
    """
    M = _as_float_matrix(M, "M")
    same = _check_same(M, same)
    if isinstance(n_permutations, bool) or not isinstance(n_permutations, (int, np.integer)) or n_permutations < 1:
        raise ValueError(f"n_permutations must be a positive integer, got {n_permutations!r}")
    delta = float(M[same].mean() - M[~same].mean())
    rows, cols = _permutation_indices(int(n_permutations), M.shape, seed)
    null = _permuted_gaps(M, same, rows, cols)
    null.flags.writeable = False
    hits = at_least(null, delta)
    ci_low, ci_high = np.percentile(null, [2.5, 97.5])
    return PermutationResult(
        delta=delta,
        null=null,
        ci_low=float(ci_low),
        ci_high=float(ci_high),
        p_value=float((1 + np.count_nonzero(hits)) / (n_permutations + 1)),
        n_outcomes=n_matchings(same),
        exact=exact_permutation_test(M, same),
    )


def n_matchings(same: np.ndarray) -> int | None:
    """n!, the null's distinct equally likely outcomes, where same pairs each row with exactly one column; else None."""
    same = np.asarray(same, dtype=bool)
    one_to_one = same.ndim == 2 and same.shape[0] == same.shape[1]
    one_to_one = one_to_one and bool((same.sum(axis=0) == 1).all() and (same.sum(axis=1) == 1).all())
    return math.factorial(same.shape[0]) if one_to_one else None


def exact_permutation_test(M: np.ndarray, same: np.ndarray) -> ExactPermutation | None:
    """The permutation test enumerated over all n! matchings; None unless same is one-to-one and n! <= EXACT_LIMIT."""
    # Permuting rows by r and columns by c puts the in-group cells at a matching of rows to columns that is uniform
    # over all n! of them whatever r is, so the sampled test's null is uniform over the δ of each matching: the exact
    # p = #{matchings with δ' >= δ} / n! (ties up to floating-point rounding count, as in the sampled test), and the
    # interval holds the 2.5th and 97.5th percentiles of the n! values (linear interpolation, as for the sampled null).
    M = _as_float_matrix(M, "M")
    same = _check_same(M, same)
    count = n_matchings(same)
    if count is None or count > EXACT_LIMIT:
        return None
    n = M.shape[0]
    cols = np.fromiter(itertools.chain.from_iterable(itertools.permutations(range(n))), dtype=np.intp,
                       count=count * n).reshape(count, n)
    rows = np.broadcast_to(np.arange(n), cols.shape)
    null = _permuted_gaps(M, same, rows, cols)
    null.flags.writeable = False
    delta = float(M[same].mean() - M[~same].mean())
    ci_low, ci_high = np.percentile(null, [2.5, 97.5])
    return ExactPermutation(null=null, ci_low=float(ci_low), ci_high=float(ci_high),
                            p_value=float(np.count_nonzero(at_least(null, delta)) / count))


def at_least(null: np.ndarray, value: float) -> np.ndarray:
    """Null values >= value, those equal up to floating-point rounding included."""
    return (null >= value) | np.isclose(null, value, rtol=1e-12, atol=1e-12)


@dataclass(frozen=True, eq=False)
class EventBootstrap:
    """δ and its gap in rating points recomputed on resamples of the events (each resample through the whole
    pipeline), and their percentile intervals; `n_valid` counts the resamples where δ was defined."""

    delta: np.ndarray
    gap_points: np.ndarray
    level: float

    @property
    def n_valid(self) -> int:
        """Resamples that kept an event and did not make every cell equal."""
        return len(self.delta)

    def interval(self, values: np.ndarray) -> tuple[float, float]:
        """The percentile interval of `values` at the bootstrap's level (NaN without valid resamples)."""
        return percentile_interval(values, self.level)


def event_bootstrap(I: np.ndarray, same: np.ndarray, n_resamples: int = 1000, seed: int = 0,
                    decimals: int | None = None, level: float = 0.95) -> EventBootstrap:
    """δ and the gap recomputed on `n_resamples` draws of the events with replacement, the whole pipeline on each
    (exclusion of events refused in any cell, cell means, z-scoring, δ). No report prints its intervals: with few
    events they run short for the gap and cover nothing fixed for δ (docs/BENCHMARKS.md); the calibration harness
    keeps it to show that beside the intervals that replaced it. Pass δ's I (without "a person")."""
    I = _check_intensities(I)
    same = _check_same(I[:, :, 0], same)
    deltas, points = [], []
    for draw in resamples(I.shape[2], n_resamples, seed):
        J = I[:, :, draw]
        try:
            M0 = cell_means(J, exclusion_mask(J), decimals)
            deltas.append(empathy_gap(zscore(M0), same))
        except ValueError:  # no event kept, or all cells equal: δ undefined on this draw
            continue
        points.append(float(M0[same].mean() - M0[~same].mean()))
    return EventBootstrap(np.array(deltas), np.array(points), level)


@dataclass(frozen=True, eq=False)
class GapTest:
    """The per-event randomisation test of the gap in rating points, which conditions on the sampled events (the
    toolkit's addition): `gap` is the mean over kept events of the in-group minus out-group rating; `null` holds that
    mean where each event's matching of perceivers to identities is drawn at random, independently per event; p is
    one-sided for gap > 0 (H0: within each of these events, which identity a perceiver is matched with does not change
    the ratings). It says nothing of other events: where per-event gaps vary around a population mean of 0 it rejects
    far more often than its level (docs/BENCHMARKS.md); `gap_t_test` tests the gap over events."""

    gap: float
    null: np.ndarray
    p_value: float
    n_events: int

    @property
    def p_min(self) -> float:
        """The smallest p this test can give: 1/(draws + 1)."""
        return 1 / (len(self.null) + 1)


def _matching_gaps(I: np.ndarray, same: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """[K, E]: per event, δ's raw gap of I[:, :, e] with rows and columns permuted by rows[k], cols[k]."""
    i, j = np.nonzero(same)
    inside = I[rows[:, i], cols[:, j]].sum(axis=1)  # [K, E]: the in-group cells' sum under each permutation
    n_in, n_out = len(i), same.size - len(i)
    return inside / n_in - (I.sum(axis=(0, 1)) - inside) / n_out


def _matchings(same: np.ndarray, n_permutations: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column permutations, each equally likely under H0: all n! matchings where enumerable, else the
    identity and `n_permutations` independent row and column permutations (as in the authors' test)."""
    n = same.shape[0]
    count = n_matchings(same)
    if count is not None and count <= EXACT_LIMIT:
        cols = np.array(list(itertools.permutations(range(n))), dtype=np.intp)
        return np.broadcast_to(np.arange(n), cols.shape), cols
    rows, cols = _permutation_indices(n_permutations, same.shape, seed)
    return np.vstack([np.arange(n), rows]), np.vstack([np.arange(same.shape[1]), cols])


def event_gaps(I: np.ndarray, same: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """I's kept events [n, m, E], `same` checked against it, and each kept event's in-group minus out-group mean."""
    I = _check_intensities(I)
    same = _check_same(I[:, :, 0], same)
    kept = I[:, :, exclusion_mask(I)]
    return kept, same, kept[same].mean(axis=0) - kept[~same].mean(axis=0)


def gap_test(I: np.ndarray, same: np.ndarray, n_draws: int = 10_000, seed: int = 0) -> GapTest:
    """Randomisation test of the matching within these events of the mean in-group minus out-group gap in rating
    points, whose p is floored by `n_draws`, not by the n! matchings of the identities.

    Under H0 each event's ratings do not depend on the matching, so the observed matching's gap in an event is as
    likely as any matching's, independently across events: the null mean gap draws one matching per event. It
    needs no ranks and no tie-breaking (tied greedy answers give the same p under any seed) and tests the quantity
    Table 2 reports, not δ (which also moves with σ(M⁰)), for the sampled events only: a gap that other events would
    not repeat is a gap here (the test of the gap over events is `gap_t_test`). Pass δ's I (without "a person").
    """
    kept, same, per_event = event_gaps(I, same)
    if not kept.shape[2]:
        raise ValueError("no event kept: expected at least one event without refusals")
    gaps = _matching_gaps(kept, same, *_matchings(same, n_draws, seed))  # [K, E]
    events = kept.shape[2]
    observed = float(per_event.mean())
    rng = np.random.default_rng([seed, DRAW_STREAM])
    null = np.concatenate([gaps[rng.integers(0, len(gaps), (size, events)), np.arange(events)].mean(axis=1)
                           for size in np.diff(np.r_[0:n_draws:DRAW_CHUNK, n_draws])])
    null.flags.writeable = False
    p = (1 + np.count_nonzero(at_least(null, observed))) / (n_draws + 1)
    return GapTest(observed, null, float(p), events)


# The largest size at 0.05 of `gap_t_test` the calibration measured (rounded up), over every null world of
# tests/benchmarks/inference_calibration.py (normal, uniform, skewed, tied and off-diagonal answers; t3, skewed and
# left-skewed per-event gaps of skewness -2 and -4, floored answers, gaps by emotion, templated events over their
# clusters; 2,000-4,000 runs a cell, 2026-12-02, docs/BENCHMARKS.md), by the number of units (events or clusters)
# it is over. The left-skewed worlds set it at every count: most events a small positive gap, a rare one a large
# negative gap that few events miss.
P_GAP_SIZE: dict[int, float] = {2: 0.257, 3: 0.326, 4: 0.316, 6: 0.283, 8: 0.250, 12: 0.218, 24: 0.160, 48: 0.135,
                                100: 0.108, 500: 0.077}


def p_gap_size(units: int) -> float:
    """What `P_GAP_SIZE` says of p_gap over `units` events or clusters: the size measured at the largest count
    measured that is at most `units` (from 3 units on, the size falls as units are added); NaN below the fewest
    measured."""
    measured = [count for count in P_GAP_SIZE if count <= units]
    return P_GAP_SIZE[max(measured)] if measured else math.nan


def unit_gaps(I: np.ndarray, same: np.ndarray, clusters: np.ndarray | None = None) -> np.ndarray:
    """The values the gap's test and interval over events are Student's t of: each kept event's gap, or where
    `clusters` labels I's events (events that share a narrative template, a writer, a source), one value per
    cluster, ḡ + (C / N) Σ_(e in c) (g_e − ḡ) over its kept events (C clusters, N events, ḡ their mean gap). Their
    mean is the events' mean gap and the t-interval of C values with C − 1 degrees of freedom is the cluster-robust
    one (CR1 variance): events of one cluster count as one sample, and one event per cluster gives the events' own
    t-interval. Pass δ's I (without "a person")."""
    gaps = event_gaps(I, same)[2]
    if clusters is not None and np.shape(clusters) != (I.shape[2],):
        raise ValueError(f"clusters must label each of I's {I.shape[2]} events, got shape {np.shape(clusters)}")
    if clusters is None or not len(gaps):
        return gaps
    _, cluster = np.unique(np.asarray(clusters)[exclusion_mask(I)], return_inverse=True)
    deviations = np.bincount(cluster, gaps - gaps.mean())
    return gaps.mean() + len(deviations) / len(gaps) * deviations


def gap_t_test(I: np.ndarray, same: np.ndarray, clusters: np.ndarray | None = None) -> float:
    """One-sided p of the test over events that the gap in rating points exceeds 0 (H0: the mean gap over the events
    these were sampled from is ≤ 0): Student's t over `unit_gaps` (the per-event gaps, or the clusters' values,
    E − 1 or C − 1 degrees of freedom), the test `gap_interval` inverts (p < 0.025 exactly where its 95% interval
    lies above 0). It assumes their mean near normal: where gaps are skewed toward low in-group ratings or floored it
    rejects more often than its level; `P_GAP_SIZE` holds what the calibration measured. NaN with fewer than two
    units. Pass δ's I (without "a person")."""
    return t_p_greater(unit_gaps(I, same, clusters))


def gap_interval(I: np.ndarray, same: np.ndarray, level: float = 0.95,
                 clusters: np.ndarray | None = None) -> tuple[float, float]:
    """The interval over events of the gap in rating points: the gap is the mean over kept events of each event's
    in-group minus out-group mean, so Student's t over `unit_gaps` (mean ± t · sd / √n over the events, or the
    clusters' values where `clusters` is given). A percentile bootstrap of the same mean runs short with few events
    (it covered a planted gap 0.77-0.86 of the time at 4 events and 0.87-0.93 at 12, docs/BENCHMARKS.md); NaN with
    fewer than two units. Pass δ's I."""
    return t_interval(unit_gaps(I, same, clusters), level)


def _paired_gaps(before: np.ndarray, after: np.ndarray, same: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The per-event gaps of two runs on the same events (I before and after an intervention), over the events kept
    in both (each may be empty)."""
    both = exclusion_mask(before) & exclusion_mask(after)
    if not both.any():
        return np.zeros(0), np.zeros(0)
    return event_gaps(before[:, :, both], same)[2], event_gaps(after[:, :, both], same)[2]


def gap_change(before: np.ndarray, after: np.ndarray, same: np.ndarray,
               level: float = 0.95) -> tuple[float, float, float]:
    """The change of the gap in rating points from `before` to `after` (I of two runs on the same events, e.g. an
    unsteered and a steered rerun), paired by event over the events kept in both: the mean per-event difference of
    the gaps and its t-interval; NaN without a common kept event (interval: fewer than two)."""
    g0, g1 = _paired_gaps(before, after, same)
    if not len(g0):
        return math.nan, math.nan, math.nan
    return (float((g1 - g0).mean()), *t_interval(g1 - g0, level))


def gap_closed(before: np.ndarray, after: np.ndarray, same: np.ndarray, level: float = 0.95) -> GapClosed:
    """The gap closed from `before` to `after` (I of two runs on the same events; pass δ's I, without "a person"):
    see `GapClosed`. Fieller's interval for a ratio of means of paired normal values covers at its level where the
    per-event means are near normal (docs/BENCHMARKS.md: inference calibration); a bootstrap of the ratio of δ it
    replaces covered a planted share 0.83 of the time at 4 events."""
    return closed(*_paired_gaps(before, after, same), level)


def event_noise_share(I: np.ndarray) -> float:
    """The estimated share of the variance of the cell means M⁰ (over cells, ddof 1) that is event-sampling noise:
    σ²_ε/E over var(M⁰), σ²_ε the cell × event interaction variance of I's kept events (two-way residual), capped
    at 1. It is why δ = gap / σ(M⁰) shrinks with fewer events; NaN with fewer than two kept events."""
    I = _check_intensities(I)
    kept = I[:, :, exclusion_mask(I)]
    kept = kept.reshape(-1, kept.shape[2])  # [cells, E]
    cells, events = kept.shape
    if events < 2 or cells < 2:
        return float("nan")
    means = kept.mean(axis=1)
    residual = kept - means[:, None] - kept.mean(axis=0)[None, :] + kept.mean()
    noise = (residual ** 2).sum() / ((cells - 1) * (events - 1)) / events
    total = means.var(ddof=1)
    return float(min(1.0, noise / total)) if total > 0 else float("nan")


def exclusion_mask(I: np.ndarray) -> np.ndarray:
    """bool[e] of events kept: an event refused (NaN) in any cell is dropped from every cell."""
    I = _check_intensities(I)
    return ~np.isnan(I).any(axis=(0, 1))


def cell_means(I: np.ndarray, keep: np.ndarray, decimals: int | None = None) -> np.ndarray:
    """M0[p, x] = mean of I[p, x, e] over the kept events e, rounded to `decimals` if given.

    The authors' notebook rounds every cell with Python's round(mean, 2) before z-scoring; `decimals=2` does the same
    (per cell, with Python's correctly rounded round(), not numpy's scaled rounding).
    """
    I = _check_intensities(I)
    keep = np.asarray(keep)
    if keep.dtype != bool or keep.shape != (I.shape[2],):
        raise ValueError(f"keep must be bool[{I.shape[2]}] (one flag per event), got {keep.dtype}{list(keep.shape)}")
    if not keep.any():
        raise ValueError("no event kept: expected at least one event without refusals")
    kept = I[:, :, keep]
    if np.isnan(kept).any():
        raise ValueError("kept events contain NaN: expected keep from exclusion_mask(I)")
    M0 = kept.mean(axis=2)
    if decimals is None:
        return M0
    return np.array([[round(float(v), decimals) for v in row] for row in M0])


def significant_cells(I: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """bool[n, n] of cells shown: off-diagonal cells pass paired t-tests against both in-group cells.

    I[p, x, e] holds intensities with "a person" at index 0, already restricted to kept events.
    A cell (p, x) with p != x and p, x != 0 is shown when both paired t-tests across events,
    I[p, x] vs I[p, p] and I[p, x] vs I[x, x], give p < alpha / n**2 (Bonferroni, n counts "a person");
    a NaN p-value counts as not significant. The diagonal, row 0 and column 0 are always shown.
    """
    I = _check_intensities(I)
    n, _, e = I.shape
    if e < 2:
        raise ValueError(f"paired t-tests need at least 2 events, got {e}")
    if np.isnan(I).any():
        raise ValueError("I contains NaN: expected intensities restricted to kept events (see exclusion_mask)")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    diag = I[np.arange(n), np.arange(n)]
    perceiver_in = np.broadcast_to(diag[:, None, :], I.shape)
    experiencer_in = np.broadcast_to(diag[None, :, :], I.shape)
    # Identical vectors give 0/0 t-statistics; their NaN p-values are handled below.
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p_perceiver = _sps.ttest_rel(I, perceiver_in, axis=2).pvalue
        p_experiencer = _sps.ttest_rel(I, experiencer_in, axis=2).pvalue
    threshold = alpha / n**2
    shown = (p_perceiver < threshold) & (p_experiencer < threshold)
    shown[np.arange(n), np.arange(n)] = True
    shown[0, :] = True
    shown[:, 0] = True
    return shown


def matrix_summary(M0: np.ndarray) -> dict[str, float]:
    """μ and population σ of M0, and the min and max of its z-scores (seed 000, Tables 3 and 7)."""
    M = zscore(M0)
    M0 = np.asarray(M0, dtype=float)
    return {"mean": float(M0.mean()), "std": float(M0.std()), "z_min": float(M.min()), "z_max": float(M.max())}
