"""Tables 2, 3, 6 and 7 of seed 000, a numeric-answer table and the matrices, for one or more runs: tidy CSV (a row
per run, category and setting) and the paper's wide Markdown layout (a row per run and category, settings as
columns)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from behavioral.analysis import Table
from behavioral.analysis.multiplicity import holm
from behavioral.analysis.formats import MISSING, cell, is_missing
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.settings import SETTING_NAMES, setting_label
from behavioral.suites.intergroup.stats import EXACT_LIMIT

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
        "note": a.delta_reason or "",
    }


def _gap_test(a: SettingAnalysis) -> dict:
    """The tests of the gap in points: the t-test over events, and the randomisation test within these events with
    its floor."""
    test = a.gap_test
    return {"p_gap": _float(a.gap_p),
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
        "n_prompts": a.n_prompts,
    }


def _cell_table2(r: pd.Series) -> str:
    if is_missing(r["delta"]):
        return MISSING
    floor = " (floor)" if r["p_at_floor"] else ""
    exact = "" if is_missing(r["p_exact"]) else f", exact {cell(r['p_exact'], digits=4)}"
    noise = "" if is_missing(r["noise_share"]) else f", {cell(100 * r['noise_share'], digits=0)}% noise"
    interval = "" if is_missing(r["gap_points_low"]) else \
        f" [{cell(r['gap_points_low'])}, {cell(r['gap_points_high'])}]"
    over = "" if is_missing(r["p_gap"]) else f", over events p={cell(r['p_gap'], 'p')}"
    these = "" if is_missing(r["p_gap_these_events"]) else \
        f", these events p={cell(r['p_gap_these_events'], 'p')}" + \
        (" (floor)" if r["p_gap_these_events"] == r["p_gap_these_events_min"] else "")
    gap = "" if is_missing(r["p_gap_these_events"]) else \
        f"; gap {cell(r['gap_points'], digits=2)} points{interval}{over}{these}"
    return (f"{cell(r['delta'], digits=2)} ({r['n_events']} events{noise}) [{cell(r['ci_low'])}, "
            f"{cell(r['ci_high'])}], p={cell(r['p_value'], digits=4)}{floor}{exact}{gap}")


def _cell_table3(r: pd.Series) -> str:
    return MISSING if is_missing(r["mean"]) else f"{cell(r['mean'], digits=2)} ± {cell(r['std'], digits=2)}"


def _cell_table6(r: pd.Series) -> str:
    return MISSING if is_missing(r["excluded_events_pct"]) else f"{cell(r['excluded_events_pct'], digits=2)}%"


def _cell_table7(r: pd.Series) -> str:
    return MISSING if is_missing(r["z_min"]) else f"({cell(r['z_min'], digits=2)}, {cell(r['z_max'], digits=2)})"


def _cell_numeric(r: pd.Series) -> str:
    parts = [f"{label} {cell(r[col], digits=2)}%"
             for label, col in (("parsable", "parsable_pct"), ("cut at the token limit", "truncated_pct"),
                                ("mass", "numeric_mass_mean_pct"), ("mass>0.5", "numeric_mass_above_half_pct"))
             if not is_missing(r[col])]
    return "; ".join(parts) or MISSING


# name: (title, tidy row of one category and setting, wide Markdown cell of a tidy row)
TABLES: dict[str, tuple[str, Callable[[SettingAnalysis], dict], Callable[[pd.Series], str]]] = {
    "table2_delta": (
        "Table 2: empathy gap δ (the events it averages over; the estimated share of σ(M⁰)² that is event-sampling "
        "noise, which shrinks δ: compare δ only between runs with the same events) [95% interval of the permutation "
        "null], one-sided p of the sampled permutations (the paper's test); (floor): δ is at or above every value "
        "drawn, so no smaller p is possible with these permutations; exact: the toolkit's exact p, enumerated over "
        "all n_outcomes = n! matchings of rows to columns where each identity is its own group and "
        f"n! ≤ {EXACT_LIMIT:,} (5 religions: 120, so a multiple of 1/120); "
        "gap: δ's gap before z-scoring in rating points (mean in-group minus mean out-group cell, the mean over "
        "events of each event's gap), its 95% t-interval over the events (gap_points_*: the uncertainty from which "
        "events were sampled, which the permutation null conditions away; a percentile bootstrap ran short with "
        "few events), "
        "the one-sided p of the test over events of gap > 0 (over events, p_gap: Student's t over the per-event "
        "gaps, the test the interval inverts, so p < 0.025 exactly where the interval lies above 0; it assumes the "
        "mean gap near normal: on synthetic runs at 4-24 events its size was at most 0.055 where per-event gaps were "
        "normal or heavy-tailed, 0.06-0.07 where they were skewed toward low in-group ratings, and 0.17 at 4-6 "
        "events, 0.10 at 12 and 0.08 at 24 where 5% of answers fall far lower (its interval covering 0.88-0.95 there), "
        "docs/BENCHMARKS.md) and the one-sided p of the randomisation test of the matching within these events "
        "(these events, p_gap_these_events: one random matching per event builds the null mean gap; floor "
        "p_gap_these_events_min = 1/(draws + 1); it says nothing of other events). δ gets no interval over events: "
        "with few events its resampled values centre below δ's many-event value (docs/BENCHMARKS.md, calibration). "
        "p_holm and p_gap_holm: Holm-adjusted over the run's holm_family tests (every category and setting of the "
        "run with this measure), p_holm of the exact p where enumerated, else of the sampled p, p_gap_holm of the "
        "test over events",
        _row_table2,
        _cell_table2,
    ),
    "table3_mean_std": ("Table 3: mean μ ± standard deviation σ of M⁰", _row_table3, _cell_table3),
    "table6_refusal": (
        "Table 6: refusal rate, the share of events excluded (refused or unparsable in at least one cell, \"a person\" "
        "included); the CSV also holds the share of prompts refused",
        _row_table6,
        _cell_table6,
    ),
    "table7_min_max": ("Table 7: (min, max) of M", _row_table7, _cell_table7),
    "numeric_rate": (
        "Numeric answers: parsable responses; responses cut at the token limit; numeric mass (mean probability that "
        "the first answer token starts a number) and the share of prompts above 0.5",
        _row_numeric,
        _cell_numeric,
    ),
}


def tidy_table(name: str, analyses: Sequence[SettingAnalysis], run: str | None = None) -> pd.DataFrame:
    """One row per category and setting with the measure and the numeric columns of table `name` (led by `run` where
    given); Table 2 gains its Holm columns over the run's tests."""
    lead = {} if run is None else {"run": run}
    frame = pd.DataFrame([{**lead, "category": a.category.name, "setting": a.setting, "measure": a.measure_name,
                           **TABLES[name][1](a)} for a in analyses])
    return _holm(frame) if name == "table2_delta" and len(frame) else frame


def wide_layout(name: str, frame: pd.DataFrame, titles: Mapping[str, str]) -> pd.DataFrame:
    """The paper's layout of a tidy table: a row per run and category (`titles`: category -> its title), settings as
    columns, each cell as the paper prints it."""
    settings = [s for s in SETTING_NAMES if s in set(frame["setting"])]
    cells = {(r["run"], r["category"], r["setting"]): TABLES[name][2](r) for _, r in frame.iterrows()}
    runs = list(dict.fromkeys(frame["run"]))
    measures = frame.groupby("run", sort=False)["measure"].agg(lambda m: "/".join(dict.fromkeys(m)))
    rows = [{**({"Run": run} if len(runs) > 1 else {}), "Category": title, "Measure": measures[run],
             **{setting_label(s): cells.get((run, cat, s), MISSING) for s in settings}}
            for run in runs for cat, title in titles.items()]
    return pd.DataFrame(rows)


def tables(per_run: Mapping[str, Sequence[SettingAnalysis]]) -> list[Table]:
    """Tables 2, 3, 6, 7 and the numeric-answer table over every run (`per_run`: run name -> its analyses)."""
    titles = {a.category.name: a.category.title for analyses in per_run.values() for a in analyses}
    written = []
    for name, (title, _, _) in TABLES.items():
        frame = pd.concat([tidy_table(name, analyses, run) for run, analyses in per_run.items()], ignore_index=True)
        written.append(Table(name, title, frame, display=wide_layout(name, frame, titles)))
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
