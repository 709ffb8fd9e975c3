"""Tables 2, 3, 6 and 7 of seed 000, a numeric-answer table and the matrices, for one or more runs: a row per run,
category and setting, one quantity per column, each printed column defined for the report's "How to read"."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from behavioral.analysis import Table
from behavioral.report.formats import is_missing
from behavioral.analysis.multiplicity import holm
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.settings import setting_label
from behavioral.analysis.cell_gap import EXACT_LIMIT, p_gap_size
from behavioral.suites.intergroup.strata import covers, emotions_text

MATRICES_DIR = "matrices"


def _float(value: float | None) -> float:
    """`value` at full precision for the CSV (rounding is the Markdown's); None becomes NaN."""
    return float("nan") if value is None else float(value)


def _pct(value: float | None) -> float:
    return _float(None if value is None else 100 * value)


def _row_table2(a: SettingAnalysis) -> dict:
    perm = a.permutation
    values = {} if perm is None else {"delta": perm.delta, "ci_low": perm.ci_low, "ci_high": perm.ci_high}
    return {
        "n_events": int(a.keep_delta.sum()),
        "gap_points": _float(a.gap_points),
        "delta": _float(values.get("delta")),
        "ci_low": _float(values.get("ci_low")),
        "ci_high": _float(values.get("ci_high")),
        "p_value": _float(None if perm is None else perm.p_value),
        "p_min": _float(None if perm is None else perm.p_min),
        "p_at_floor": perm is not None and perm.at_floor,
        "n_permutations": 0 if perm is None else len(perm.null),
        "p_exact": _float(None if perm is None else perm.p_exact),
        "n_outcomes": None if perm is None else perm.n_outcomes,
        "noise_share": _float(a.noise_share),
        **_events_interval(a),
        **_gap_test(a),
        "n_clusters": a.n_clusters,
        "emotions": emotions_text(a.emotions, a.corpus_emotions),
        "covers_corpus": covers(a.emotions, a.corpus_emotions),
        "note": a.delta_reason or "",
    }


def _gap_test(a: SettingAnalysis) -> dict:
    """The tests of the gap in points: the t-test over events, and the randomisation test within these events with
    its floor."""
    test = a.gap_test
    return {"p_gap": _float(a.gap_p),
            "p_gap_size": math.nan if is_missing(a.gap_p) else p_gap_size(a.n_units),
            "p_gap_these_events": math.nan if test is None else _float(test.p_value),
            "p_gap_these_events_min": math.nan if test is None else test.p_min}


def _holm(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 2 of one run with Holm-adjusted p over its tests (every category and setting): of the permutation p
    (exact where enumerated, else sampled) and of the t-test of the gap over events, and the family's size."""
    permutation = frame["p_exact"].fillna(frame["p_value"])
    return frame.assign(p_holm=holm(permutation), p_gap_holm=holm(frame["p_gap"]),
                        holm_family=int(permutation.notna().sum()))


def _events_interval(a: SettingAnalysis) -> dict:
    """gap_points' 95% t-interval over the events (δ gets none: see the Table 2 caption)."""
    low, high = a.gap_interval or (math.nan, math.nan)
    return {"gap_points_low": _float(low), "gap_points_high": _float(high)}


def _row_table3(a: SettingAnalysis) -> dict:
    summary = a.summary or {}
    return {"mean": _float(summary.get("mean")), "std": _float(summary.get("std")), "note": a.matrix_reason or ""}


def _row_table6(a: SettingAnalysis) -> dict:
    return {
        "excluded_events_pct": _pct(a.excluded_rate),
        "refused_prompts_pct": _pct(a.refusal_rate),
        "excluded_events_delta_pct": _pct(a.excluded_rate_delta),
        "n_events": len(a.keep),
        "n_events_kept": int(a.keep.sum()),
        "n_events_kept_delta": int(a.keep_delta.sum()),
        "n_prompts": a.n_prompts,
        "n_missing": a.n_missing,
    }


def _row_table7(a: SettingAnalysis) -> dict:
    summary = a.summary or {}
    return {
        "z_min": _float(summary.get("z_min")),
        "z_max": _float(summary.get("z_max")),
        "note": a.matrix_reason or "",
    }


def _row_numeric(a: SettingAnalysis) -> dict:
    return {
        "parsable_pct": _pct(a.parsable_rate),
        "truncated_pct": _pct(a.truncated_rate),
        "numeric_mass_mean_pct": _pct(a.numeric_mass_mean),
        "numeric_mass_above_half_pct": _pct(a.numeric_mass_share),
        "answer_mass_mean_pct": _pct(a.answer_mass_mean),
        "n_prompts": a.n_prompts,
    }


@dataclass(frozen=True)
class Layout:
    """How one of the suite's tables is declared: its title, its tidy row of one category and setting, the columns
    it prints (column -> header) with their formats, what each printed column holds, and the columns printed only
    where some row has a value (`optional`)."""

    title: str
    row: Callable[[SettingAnalysis], dict]
    columns: Mapping[str, str]
    formats: Mapping[str, str]
    definitions: Mapping[str, str]
    optional: tuple[str, ...] = ()

    def printed(self, frame: pd.DataFrame) -> tuple[dict[str, str], dict[str, str]]:
        """The columns `frame` prints and their definitions: every declared one but the optional ones it has no
        value of."""
        empty = {self.columns[c] for c in self.optional if c not in frame or frame[c].isna().all()}
        return ({c: h for c, h in self.columns.items() if h not in empty},
                {h: text for h, text in self.definitions.items() if h not in empty})


KEYS = {"run": "run", "category": "category", "setting": "setting", "measure": "measure"}
KEY_FORMATS = dict.fromkeys(KEYS, "text")
TABLES: dict[str, Layout] = {
    "table2_delta": Layout(
        "Table 2: the empathy gap δ and the gap in rating points per category and setting",
        _row_table2,
        KEYS | {"n_events": "events", "n_clusters": "clusters", "delta": "δ", "ci_low": "null low",
                "ci_high": "null high", "p_value": "p (these events)", "p_at_floor": "p at floor",
                "p_exact": "p exact (these events)", "p_holm": "p Holm (these events)", "noise_share": "noise share",
                "gap_points": "gap (points)", "gap_points_low": "gap low", "gap_points_high": "gap high",
                "p_gap": "p gap", "p_gap_size": "p gap size", "p_gap_these_events": "p gap (these events)",
                "p_gap_holm": "p gap Holm", "holm_family": "Holm family", "emotions": "emotions", "note": "note"},
        KEY_FORMATS | {"n_events": "count", "n_clusters": "count", "p_value": "p", "p_exact": "p", "p_holm": "p",
                       "noise_share": "percent", "p_gap": "p", "p_gap_size": "p", "p_gap_these_events": "p",
                       "p_gap_holm": "p", "holm_family": "count", "emotions": "text", "note": "text"},
        {"events": "the events δ and the gap average over (those kept in every cell).",
         "clusters": "where the corpus declares clusters of events (a `cluster` column: a shared narrative template, "
                     "writer or source), the clusters those events fall in: the gap's interval and p gap are over "
                     "them (cluster-robust), since events of one cluster are not independent samples; blank where "
                     "none is declared.",
         "emotions": "the emotions those events hold with their counts, of the corpus's: where some is missing, the "
                     "interval speaks of events of these emotions, not of the corpus.",
         "δ": "the empathy gap: mean in-group minus mean out-group cell of the z-scored matrix M (the paper's δ). It "
              "gets no interval over events: with few events its resampled values centre below its many-event value "
              "(docs/BENCHMARKS.md, calibration).",
         "null low, null high": "the 95% interval of δ under the permutation null (rows matched to columns at "
                                "random), not an interval of δ.",
         "p (these events)": "the one-sided p of the sampled permutations (the paper's test): a test within these "
                             "events (it permutes which identity is matched with which), not of other events.",
         "p at floor": "true where δ is at or above every value drawn: no smaller p is possible with these "
                       "permutations.",
         "p exact (these events)": f"the toolkit's exact p, enumerated over all n! matchings where each identity is "
                                   f"its own group and n! ≤ {EXACT_LIMIT:,} (5 religions: 120, so a multiple of "
                                   "1/120).",
         "p Holm (these events)": "Holm-adjusted over the run's tests of this measure (every category and setting "
                                  "of the run: Holm family tests): of the exact p where enumerated, else of the "
                                  "sampled p; conditional on these events, as p is.",
         "noise share": "the estimated share of σ(M⁰)² that is event-sampling noise, which shrinks δ: compare δ only "
                        "between runs with the same events.",
         "gap (points)": "δ's gap before z-scoring in rating points: the mean over events of each event's in-group "
                         "minus out-group gap.",
         "gap low, gap high": "its 95% t-interval over the events (which events were sampled; the permutation null "
                              "conditions that away).",
         "p gap": "one-sided p of Student's t over the per-event gaps, or the clusters' (gap > 0): the test over "
                  "events the interval inverts. It holds its level only where their mean is near normal; read it "
                  "with p gap size.",
         "p gap size": "the largest share of synthetic null runs with this many events (or clusters) in which p gap "
                       "fell below 0.05, over the calibration's worlds, skewed and floored ones included "
                       "(docs/BENCHMARKS.md): p gap below 0.05 means what a test of that size says, not of 0.05.",
         "p gap (these events)": "one-sided p of the randomisation test of the matching within these events (one "
                                 "random matching per event builds the null mean gap; its floor, 1/(draws + 1), is "
                                 "p_gap_these_events_min in the CSV); it says nothing of other events.",
         "p gap Holm": "p gap Holm-adjusted over the run's tests of this measure (Holm family tests); it holds the "
                       "family-wise error only as well as each p gap holds its size.",
         "Holm family": "the tests Holm adjusts over: every category and setting of this run and measure.",
         "note": "why a value is missing, where one is."},
        optional=("n_clusters",),
    ),
    "table3_mean_std": Layout(
        "Table 3: mean μ and standard deviation σ of M⁰", _row_table3,
        KEYS | {"mean": "μ", "std": "σ", "note": "note"}, KEY_FORMATS | {"note": "text"},
        {"μ, σ": "the mean and standard deviation of the raw rating matrix M⁰ (perceiver × experiencer)."}),
    "table6_refusal": Layout(
        "Table 6: events excluded (refused or unparsable in at least one cell)", _row_table6,
        KEYS | {"excluded_events_pct": "excluded (%)", "excluded_events_delta_pct": "excluded from δ (%)",
                "refused_prompts_pct": "prompts refused (%)", "n_events": "events", "n_events_kept": "kept",
                "n_events_kept_delta": "kept for δ", "n_prompts": "prompts", "n_missing": "missing"},
        KEY_FORMATS | dict.fromkeys(("n_events", "n_events_kept", "n_events_kept_delta", "n_prompts", "n_missing"),
                                    "count"),
        {"excluded (%)": "the paper's refusal rate: events refused or unparsable in at least one cell, \"a person\" "
                         "included.",
         "excluded from δ (%)": "the same over the cells δ reads.",
         "prompts refused (%)": "the share of prompts whose reply refused.",
         "missing": "prompts planned but not in the run."}),
    "table7_min_max": Layout(
        "Table 7: minimum and maximum of M", _row_table7,
        KEYS | {"z_min": "min", "z_max": "max", "note": "note"}, KEY_FORMATS | {"note": "text"},
        {"min, max": "the smallest and largest cell of the z-scored matrix M."}),
    "numeric_rate": Layout(
        "Numeric answers: parsable replies and the probability mass on numbers", _row_numeric,
        KEYS | {"parsable_pct": "parsable (%)", "truncated_pct": "cut at the token limit (%)",
                "numeric_mass_mean_pct": "numeric mass (%)", "numeric_mass_above_half_pct": "mass > 0.5 (%)",
                "answer_mass_mean_pct": "answer mass (%)", "n_prompts": "prompts"},
        KEY_FORMATS | {"n_prompts": "count"},
        {"parsable (%)": "generated replies that hold a rating.",
         "cut at the token limit (%)": "generated replies that reached max_new_tokens.",
         "numeric mass (%)": "the mean probability that the first answer token starts a number (score mode): a low "
                             "value means the scores read a distribution the model rarely produces.",
         "mass > 0.5 (%)": "the share of prompts whose numeric mass is above one half.",
         "answer mass (%)": "the mean probability of a whole answer in range (score mode: a number that ends there "
                            "and lies on the scale); a first token can start a number while the answers it leads "
                            "to leave the scale or do not end."}),
}


def tidy_table(name: str, analyses: Sequence[SettingAnalysis], run: str | None = None) -> pd.DataFrame:
    """One row per category and setting with the measure and the numeric columns of table `name` (led by `run` where
    given); Table 2 gains its Holm columns over the run's tests."""
    lead = {} if run is None else {"run": run}
    frame = pd.DataFrame([{**lead, "category": a.category.name, "setting": a.setting, "measure": a.measure_name,
                           **TABLES[name].row(a)} for a in analyses])
    return _holm(frame) if name == "table2_delta" and len(frame) else frame


def tables(per_run: Mapping[str, Sequence[SettingAnalysis]]) -> list[Table]:
    """Tables 2, 3, 6, 7 and the numeric-answer table over every run (`per_run`: run name -> its analyses), a row
    per run, category and setting."""
    written = []
    for name, layout in TABLES.items():
        frame = pd.concat([tidy_table(name, analyses, run) for run, analyses in per_run.items()], ignore_index=True)
        columns, definitions = layout.printed(frame)
        written.append(Table(name, layout.title, frame, layout.formats, columns=columns, definitions=definitions))
    return written


def matrices(per_run: Mapping[str, Sequence[SettingAnalysis]]) -> list[Table]:
    """A tidy table per category and setting: run, perceiver, experiencer, M⁰, M, δ's matrix (NaN for "a person")
    and the t-test mask `shown`."""
    frames: dict[tuple[str, str], list[pd.DataFrame]] = {}
    for run, analyses in per_run.items():
        for a in analyses:
            frames.setdefault((a.category.name, a.setting), []).append(_matrix_frame(run, a))
    return [Table(f"{MATRICES_DIR}/{category}_{setting}", f"Matrices of {category}, {setting_label(setting)}",
                  pd.concat(parts, ignore_index=True)) for (category, setting), parts in frames.items()]


def _matrix_frame(run: str, a: SettingAnalysis) -> pd.DataFrame:
    n = len(a.identities)
    nan = np.full((n, n), np.nan)
    delta = np.full((n, n), np.nan)
    if a.M_delta is not None:
        delta[1:, 1:] = a.M_delta
    return pd.DataFrame({
        "run": run, "perceiver": np.repeat(a.identities, n), "experiencer": np.tile(a.identities, n),
        "M0": (nan if a.M0 is None else a.M0).ravel(), "M": (nan if a.M is None else a.M).ravel(),
        "M_delta": delta.ravel(),
        "shown": pd.array([pd.NA] * n * n if a.shown is None else a.shown.ravel(), dtype="boolean"),
    })
