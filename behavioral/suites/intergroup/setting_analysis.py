"""From a run's rows to the statistics of seed 000: I[p, x, e], exclusion, M⁰, M, δ and its permutation test, per
category and setting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from behavioral.rundir.manifest import RunDirError
from behavioral.core.options import SEED, check_bounds, option
from behavioral.analysis import cell_gap
from behavioral.suites.intergroup import strata
from behavioral.suites.intergroup.corpus import EMOTIONS
from behavioral.suites.intergroup.groups import CATEGORIES, Category, get_category
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting
from behavioral.suites.intergroup.result import SettingAnalysis

EXCLUSION = (
    "M0, M, the t-test mask and Tables 3/6/7: an event refused in any cell of the category and setting, \"a person\" "
    "included, is dropped from every cell; δ, its permutation test and the t-SNE: refusals in the \"a person\" "
    "row and column are ignored, on the matrix without \"a person\" z-scored on its own (the authors' notebook)"
)


MEASURES = ("intensity", "expected_intensity")  # what a cell averages
# The measure a run is analysed by where none is asked for, by its mode: a score run generates no reply, and its
# greedy answer is one number for most prompts of a cell (all cells equal, z-scores undefined), so its expected
# intensity (the demo's); a run that generates, the parsed reply's intensity (the paper's).
MODE_MEASURES = {"generate": "intensity", "score": "expected_intensity", "both": "intensity"}


@dataclass(frozen=True)
class AnalyzeOptions:
    """How seed 000's statistics are computed: the measure, the permutation test, the notebook's rounding."""

    measure: str | None = option(None, "the rating each cell averages: the parsed reply's intensity (the paper's) "
                                       "or the expected intensity of the answer distribution; none: by the run's "
                                       "mode, expected_intensity for a score run, intensity otherwise",
                                 choices=MEASURES)
    permutations: int = option(10_000, "permutations of the identity matching in δ's test, and null draws of the "
                                       "gap's randomisation test within these events", metavar="N", minimum=1)
    round_cells: int | None = option(None, "round M⁰ cells to DECIMALS before z-scoring, as the authors' notebook "
                                           "does with 2; none: no rounding", metavar="DECIMALS")
    seed: int = option(0, "seed of the permutations and of the event resamples", name="--permutation-seed",
                       **SEED)

    def __post_init__(self):
        if self.measure is not None and self.measure not in MEASURES:
            raise ValueError(f"unknown measure {self.measure!r}; expected one of {', '.join(MEASURES)}")
        if self.round_cells is not None and not 0 <= self.round_cells <= 15:
            raise ValueError(f"--round-cells must be a number of decimals in 0..15, got {self.round_cells}")
        check_bounds(self)


class IncompleteResultsError(RunDirError):
    """A category and setting whose results lack some of the prompts the run should have written."""


def intensity_tensor(
    rows: pd.DataFrame, category: Category, event_ids: tuple[str, ...], measure: str = "intensity"
) -> tuple[np.ndarray, int]:
    """I[p, x, e] of one category and setting (NaN where refused or missing) and the number of missing prompts."""
    names = category.with_unspecified
    n, e = len(names), len(event_ids)
    p = pd.Categorical(rows["perceiver"], categories=names).codes
    x = pd.Categorical(rows["experiencer"], categories=names).codes
    ev = pd.Categorical(rows["event_id"], categories=event_ids).codes
    unknown = (p < 0) | (x < 0) | (ev < 0)
    if unknown.any():
        bad = rows.loc[unknown, ["perceiver", "experiencer", "event_id"]].iloc[0].to_dict()
        raise RunDirError(
            f"{category.name}: {int(unknown.sum())} rows name an unknown identity or event, e.g. {bad}"
        )
    flat = (p.astype(np.int64) * n + x) * e + ev
    I = np.full(n * n * e, np.nan)
    I[flat] = rows[measure].to_numpy(dtype=float)
    return I.reshape(n, n, e), n * n * e - len(np.unique(flat))


def _rates(rows: pd.DataFrame, measure: str) -> dict[str, float | None]:
    """Refusal rate and numeric-answer rates of the present rows; a rate is None where the run did not measure it.

    A prompt counts as refused when it has no value of `measure`, exactly what the exclusion drops; the parsable and
    truncated rates describe the generated responses alone.
    """
    generated = rows["response"].notna()
    parsable = rows["intensity"].notna() & ~rows["refused"].astype(bool)
    truncated = rows["truncated"][generated].dropna()
    mass = rows["numeric_mass"].dropna()
    whole = rows["answer_mass"].dropna() if "answer_mass" in rows else mass.iloc[:0]
    return {
        "refusal_rate": float(rows[measure].isna().mean()),
        "parsable_rate": float(parsable[generated].mean()) if generated.any() else None,
        "truncated_rate": float(truncated.astype(bool).mean()) if len(truncated) else None,
        "numeric_mass_mean": float(mass.mean()) if len(mass) else None,
        "numeric_mass_share": float((mass > 0.5).mean()) if len(mass) else None,
        "answer_mass_mean": float(whole.mean()) if len(whole) else None,
    }


def measure_of(config: dict, measure: str | None) -> str:
    """The measure a run (its manifest's config) is analysed by: `measure`, else its mode's (MODE_MEASURES)."""
    return measure or MODE_MEASURES.get(config.get("mode"), "intensity")


def measure_name(rows: pd.DataFrame, measure: str) -> str:
    """What a measure column of result rows holds: the generated intensity (the paper's), the greedy score answer
    (``intensity`` of a score-mode run, which generates no reply) or the expected intensity."""
    if measure == "expected_intensity":
        return "expected intensity"
    replies, scores = rows.get("response"), rows.get("score_intensity")
    scored_only = replies is not None and scores is not None and replies.isna().all() and scores.notna().any()
    return "greedy score answer" if scored_only else "generated intensity"


def analyze_setting(
    rows: pd.DataFrame,
    category: Category,
    setting: str,
    event_ids: tuple[str, ...],
    measure: str = "intensity",
    n_permutations: int = 10_000,
    seed: int = 0,
    allow_partial: bool = False,
    round_cells: int | None = None,
    clusters: Mapping[str, str] | None = None,
    corpus: Sequence[str] = EMOTIONS,
) -> SettingAnalysis:
    """All statistics of one category and setting from its result rows (missing prompts count as refused if allowed).

    `round_cells=2` rounds every cell mean before z-scoring, as the authors' notebook does; the gap in points gets
    its t-interval over events (`cell_gap.gap_interval`) and the t-test over events that inverts it
    (`cell_gap.gap_t_test`), over the events' `clusters` (event id -> cluster) where they have any; the randomisation
    test within these events draws `n_permutations` null means (and as many matchings where it cannot enumerate
    them). The emotions the kept events hold are counted against the `corpus`'s.
    """
    I, n_missing = intensity_tensor(rows, category, event_ids, measure)
    if n_missing and not allow_partial:
        raise IncompleteResultsError(
            f"category {category.name!r}, setting {setting!r}: {n_missing} of {I.size} prompts missing "
            f"({I.size - n_missing} present); finish the run or pass --allow-partial"
        )
    keep, keep_delta = cell_gap.exclusion_mask(I), cell_gap.exclusion_mask(I[1:, 1:])
    labels = strata.cluster_labels(event_ids, clusters or {})
    M0 = M = M_delta = shown = permutation = summary = None
    gap_points = gap_interval = gap_p = gap_test = noise_share = None
    matrix_reason = mask_reason = delta_reason = None
    try:
        M0 = cell_gap.cell_means(I, keep, round_cells)
        summary = cell_gap.matrix_summary(M0)
        M = cell_gap.zscore(M0)
    except ValueError as exc:
        matrix_reason = str(exc)
        if M0 is not None:
            summary = {"mean": float(M0.mean()), "std": float(M0.std()), "z_min": float("nan"), "z_max": float("nan")}
    if M0 is None:
        mask_reason = matrix_reason
    else:
        try:
            shown = cell_gap.significant_cells(I[:, :, keep])
        except ValueError as exc:
            mask_reason = str(exc)
    try:
        M0_delta = cell_gap.cell_means(I[1:, 1:], keep_delta, round_cells)
        same = category.in_group()
        gap_points = float(M0_delta[same].mean() - M0_delta[~same].mean())
        M_delta = cell_gap.zscore(M0_delta)
        permutation = cell_gap.permutation_test(M_delta, same, n_permutations, seed)
        gap_test = cell_gap.gap_test(I[1:, 1:], same, n_permutations, seed)
        noise_share = cell_gap.event_noise_share(I[1:, 1:])
        gap_interval = cell_gap.gap_interval(I[1:, 1:], same, clusters=labels)
        gap_p = cell_gap.gap_t_test(I[1:, 1:], same, labels)
    except ValueError as exc:
        delta_reason = f"{exc} (matrix without \"a person\")"
    return SettingAnalysis(
        category=category,
        setting=setting,
        measure=measure,
        event_ids=event_ids,
        keep=keep,
        keep_delta=keep_delta,
        M0=M0,
        M=M,
        M_delta=M_delta,
        shown=shown,
        permutation=permutation,
        summary=summary,
        n_prompts=len(rows),
        n_missing=n_missing,
        **_rates(rows, measure),
        round_cells=round_cells,
        measure_name=measure_name(rows, measure),
        matrix_reason=matrix_reason,
        mask_reason=mask_reason,
        delta_reason=delta_reason,
        gap_points=gap_points,
        gap_interval=gap_interval,
        gap_p=gap_p,
        gap_test=gap_test,
        noise_share=noise_share,
        emotions=strata.drawn(event_ids, keep_delta, strata.event_emotions(rows)) if "emotion" in rows else {},
        corpus_emotions=tuple(corpus),
        n_clusters=None if labels is None else len(set(labels[keep_delta])),
    )


def _planned(config: dict, results: pd.DataFrame) -> tuple[list[Category], list[str]]:
    """Categories (Table 1 order) and settings (Table 2 order) named by the run's config or present in the results."""
    options = config.get("options") or {}
    cats = set(options.get("categories", [])) | set(results["category"].unique())
    sets = set(options.get("settings", [])) | set(results["setting"].unique())
    for name in cats:
        get_category(name)
    for name in sets:
        get_setting(name)
    return [c for n, c in CATEGORIES.items() if n in cats], [s for s in SETTING_NAMES if s in sets]


def analyses_of(run_dir: str | Path, config: dict, results: pd.DataFrame, options: AnalyzeOptions,
                allow_partial: bool) -> list[SettingAnalysis]:
    """The analyses of a run's rows (`view`ed), as `load_analyses` describes."""
    categories, settings = _planned(config, results)
    event_ids = tuple(sorted(results["event_id"].unique()))
    if not categories or not settings:
        raise RunDirError(f"{run_dir}: no categories or settings in the manifest or the results")
    groups = dict(tuple(results.groupby(["category", "setting"], sort=False)))
    clusters, corpus = strata.recorded_clusters(config), strata.corpus_emotions(config)
    return [analyze_setting(groups.get((category.name, setting), results.iloc[:0]), category, setting, event_ids,
                            measure_of(config, options.measure), options.permutations, options.seed, allow_partial,
                            options.round_cells, clusters, corpus)
            for category in categories for setting in settings]
