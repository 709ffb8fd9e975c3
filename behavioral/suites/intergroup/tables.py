"""Tables 2, 3, 6 and 7 of seed 000 and a numeric-answer table: tidy CSV and the paper's wide Markdown layout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from behavioral.outputs import Table, write_table
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.settings import SETTING_NAMES, setting_label


NA = "n/a"


def _round(value: float | None, digits: int) -> float:
    """`value` rounded as printed; None becomes NaN and -0.0 becomes 0.0."""
    return float("nan") if value is None else round(float(value), digits) + 0.0


def _pct(value: float | None) -> float:
    return _round(None if value is None else 100 * value, 2)


def _row_table2(a: SettingAnalysis) -> dict:
    perm = a.permutation
    values = {} if perm is None else {"delta": perm.delta, "ci_low": perm.ci_low, "ci_high": perm.ci_high}
    return {
        "delta": _round(values.get("delta"), 2),
        "ci_low": _round(values.get("ci_low"), 3),
        "ci_high": _round(values.get("ci_high"), 3),
        "p_value": _round(None if perm is None else perm.p_value, 4),
        "p_min": _round(None if perm is None else perm.p_min, 4),
        "p_at_floor": perm is not None and perm.at_floor,
        "n_permutations": 0 if perm is None else len(perm.null),
        "note": a.delta_reason or "",
    }


def _row_table3(a: SettingAnalysis) -> dict:
    summary = a.summary or {}
    return {"mean": _round(summary.get("mean"), 2), "std": _round(summary.get("std"), 2), "note": a.matrix_reason or ""}


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
        "z_min": _round(summary.get("z_min"), 2),
        "z_max": _round(summary.get("z_max"), 2),
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
    if np.isnan(r["delta"]):
        return NA
    floor = " (floor)" if r["p_at_floor"] else ""
    return f"{r['delta']:.2f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}], p={r['p_value']:.4f}{floor}"


def _cell_table3(r: pd.Series) -> str:
    return NA if np.isnan(r["mean"]) else f"{r['mean']:.2f} ± {r['std']:.2f}"


def _cell_table6(r: pd.Series) -> str:
    return NA if np.isnan(r["excluded_events_pct"]) else f"{r['excluded_events_pct']:.2f}%"


def _cell_table7(r: pd.Series) -> str:
    return NA if np.isnan(r["z_min"]) else f"({r['z_min']:.2f}, {r['z_max']:.2f})"


def _cell_numeric(r: pd.Series) -> str:
    parts = [
        f"{label} {r[col]:.2f}%"
        for label, col in (
            ("parsable", "parsable_pct"),
            ("cut at the token limit", "truncated_pct"),
            ("mass", "numeric_mass_mean_pct"),
            ("mass>0.5", "numeric_mass_above_half_pct"),
        )
        if not np.isnan(r[col])
    ]
    return "; ".join(parts) or NA


# name: (title, tidy row of one category and setting, wide Markdown cell of a tidy row)
TABLES: dict[str, tuple[str, Callable[[SettingAnalysis], dict], Callable[[pd.Series], str]]] = {
    "table2_delta": (
        "Table 2: empathy gap δ [95% interval of the permutation null], one-sided p; (floor): δ is at or above every "
        "value of its null, so no smaller p is possible with these permutations (with the 5 religions the null's "
        "largest value comes up about once in 120 draws: p stays near 1/120 however many are drawn)",
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
        "Numeric answers: parsable responses; responses cut at the token limit; numeric mass (mean probability that the first answer token starts a "
        "number) and the share of prompts above 0.5",
        _row_numeric,
        _cell_numeric,
    ),
}


def tidy_table(name: str, analyses: list[SettingAnalysis]) -> pd.DataFrame:
    """One row per category and setting with the numeric columns of table `name`."""
    return pd.DataFrame(
        [{"category": a.category.name, "setting": a.setting, **TABLES[name][1](a)} for a in analyses]
    )


def markdown_table(name: str, frame: pd.DataFrame, analyses: list[SettingAnalysis]) -> str:
    """The paper's wide layout of a tidy table: categories as rows, settings as columns."""
    titles = {a.category.name: a.category.title for a in analyses}
    settings = [s for s in SETTING_NAMES if s in set(frame["setting"])]
    cell = TABLES[name][2]
    cells = {(r["category"], r["setting"]): cell(r) for _, r in frame.iterrows()}
    lines = [
        "| Category | " + " | ".join(setting_label(s) for s in settings) + " |",
        "|---|" + "---|" * len(settings),
    ]
    for cat, title in titles.items():
        lines.append(f"| {title} | " + " | ".join(cells.get((cat, s), "—") for s in settings) + " |")
    return "\n".join(lines) + "\n"


def write_tables(analyses: list[SettingAnalysis], out_dir: Path) -> dict[str, Table]:
    """Write every table as `NAME.csv` (tidy) and `NAME.md` (wide) into `out_dir`."""
    written = {}
    for name, (title, _, _) in TABLES.items():
        frame = tidy_table(name, analyses)
        written[name] = write_table(out_dir, name, title, frame, markdown_table(name, frame, analyses))
    return written
