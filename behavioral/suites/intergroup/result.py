"""The statistics of one category and setting of a seed-000 run, as the analysis hands them to tables, figures and
the report."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from behavioral.analysis import cell_gap
from behavioral.suites.intergroup.corpus import EMOTIONS
from behavioral.suites.intergroup.groups import Category


@dataclass(frozen=True, eq=False)
class SettingAnalysis:
    """Everything measured for one category and one setting; matrices are None where undefined (see the reasons).

    Two exclusion sets, as in the authors' notebook: `keep` (an event refused in any cell, "a person" included, is
    dropped) feeds M⁰, M, the t-test mask and Tables 3/6/7; `keep_delta` ignores refusals in the "a person" row and
    column and feeds `M_delta`, the n×n matrix without "a person" z-scored on its own, from which δ, its permutation
    test and the t-SNE of Figure 4 are computed.
    """

    category: Category
    setting: str
    measure: str
    event_ids: tuple[str, ...]
    keep: np.ndarray
    keep_delta: np.ndarray
    M0: np.ndarray | None
    M: np.ndarray | None
    M_delta: np.ndarray | None
    shown: np.ndarray | None
    permutation: cell_gap.PermutationResult | None
    summary: dict[str, float] | None
    n_prompts: int
    n_missing: int
    refusal_rate: float
    parsable_rate: float | None
    truncated_rate: float | None
    numeric_mass_mean: float | None
    numeric_mass_share: float | None
    answer_mass_mean: float | None = None  # mean probability of a whole answer in range (score mode)
    round_cells: int | None = None
    measure_name: str = "generated intensity"  # what `measure` holds, as titles name it (see analysis.measure_name)
    matrix_reason: str | None = None
    mask_reason: str | None = None
    delta_reason: str | None = None
    # δ's gap before z-scoring: mean in-group minus mean out-group cell of δ's matrix, in rating points (δ moves when
    # the matrix's spread moves; this does not)
    gap_points: float | None = None
    gap_interval: tuple[float, float] | None = None  # gap_points' 95% t-interval over events
    gap_p: float | None = None  # one-sided p of the t-test over events of gap_points > 0 (cell_gap.gap_t_test)
    gap_test: cell_gap.GapTest | None = None  # the randomisation test of gap_points > 0 within these events
    noise_share: float | None = None  # the share of σ(M⁰)² of δ's matrix that is event-sampling noise
    emotions: dict[str, int] = field(default_factory=dict)  # the emotions of δ's kept events, with their counts
    corpus_emotions: tuple[str, ...] = EMOTIONS  # the emotions of the corpus the events were sampled from
    n_clusters: int | None = None  # the clusters of δ's kept events the gap's interval is over; None: no clusters

    @property
    def n_units(self) -> int:
        """What the gap's interval and test are over: its clusters where the events have any, else its events."""
        return int(self.keep_delta.sum()) if self.n_clusters is None else self.n_clusters

    @property
    def identities(self) -> tuple[str, ...]:
        """Row and column labels of M⁰ and M: "a person" first, then Table 1 order."""
        return self.category.with_unspecified

    @property
    def excluded_rate(self) -> float:
        """Fraction of events dropped because some cell refused them ("a person" included): the paper's Table 6."""
        return float(1 - self.keep.mean()) if self.keep.size else float("nan")

    @property
    def excluded_rate_delta(self) -> float:
        """Fraction of events dropped from δ's matrix (refusals in the "a person" row and column ignored)."""
        return float(1 - self.keep_delta.mean()) if self.keep_delta.size else float("nan")

    @property
    def notes(self) -> tuple[str, ...]:
        """Why some statistic of this category and setting is n/a, one line each."""
        parts = (("M⁰/M", self.matrix_reason), ("significance mask", self.mask_reason), ("δ", self.delta_reason))
        return tuple(f"{what} n/a: {why}" for what, why in parts if why is not None)
