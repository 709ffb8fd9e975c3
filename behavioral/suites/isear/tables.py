"""The frames of isear's analysis from each run's and mode's Summary: GenderBench's metrics with CIs, marks and
p(e|g), tidy with `run`, `mode` and `measure` (the answer read) columns; across runs the headline metrics and each
emotion's max_diff with its CI and n, a row per run, mode and emotion; and metrics.json."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from behavioral.suites.isear.attempts import SOFT_MEASURE
from behavioral.suites.isear.metrics import Summary
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS

Results = Mapping[tuple[str, str], Summary]  # (run, mode) -> its summary, in report order
Measures = Mapping[tuple[str, str], str]  # (run, mode) -> the answer its attempts read
HEADLINE = ("max_diff", "soft_max_diff", "undetected_rate_items", "undetected_rate_attempts")


def metrics(results: Results, measures: Measures) -> pd.DataFrame:
    """run, mode, measure, metric, value, ci_low, ci_high, n_items: every GenderBench metric (and score mode's soft
    ones, which read the mean scored distribution)."""
    return pd.DataFrame([{"run": run, "mode": mode,
                          "measure": SOFT_MEASURE if name.startswith("soft_") else measures[(run, mode)],
                          "metric": name, "value": v, "ci_low": low, "ci_high": high, "n_items": s.n_items}
                         for (run, mode), s in results.items() for name, (v, low, high) in s.metrics.items()])


def marks(results: Results, measures: Measures) -> pd.DataFrame:
    """run, mode, measure, mark, max_diff with its CI, items and attempts."""
    rows = []
    for (run, mode), s in results.items():
        value, low, high = s.metrics["max_diff"]
        rows.append({"run": run, "mode": mode, "measure": measures[(run, mode)], "mark": s.mark, "max_diff": value,
                     "ci_low": low, "ci_high": high, "n_items": s.n_items, "n_attempts": s.n_attempts})
    return pd.DataFrame(rows)


def emotions(results: Results, measures: Measures) -> pd.DataFrame:
    """run, mode, measure, emotion, gender, count, p, ci_low, ci_high: p(e|g) over detected attempts."""
    return pd.concat([s.emotions().assign(run=run, mode=mode, measure=measures[(run, mode)])
                      for (run, mode), s in results.items()], ignore_index=True)[
        ["run", "mode", "measure", "emotion", "gender", "count", "p", "ci_low", "ci_high"]]


def emotions_wide(emotions: pd.DataFrame) -> pd.DataFrame:
    """run, mode, measure, emotion and p(e|g) of each gender as a column."""
    keys = ["run", "mode", "measure", "emotion"]
    wide = emotions.pivot(index=keys, columns="gender", values="p")[list(GENDERS)].reset_index()
    wide.columns.name = None
    order = emotions[keys].drop_duplicates()
    return order.merge(wide, on=keys, how="left")


def _by_mode(results: Results) -> list[tuple[str, str, Summary]]:
    """(run, mode, summary) grouped by mode (in order of first appearance), runs in their order."""
    modes = list(dict.fromkeys(mode for _, mode in results))
    return sorted(((run, mode, s) for (run, mode), s in results.items()), key=lambda x: modes.index(x[1]))


def comparison(results: Results, measures: Measures) -> pd.DataFrame:
    """Runs as rows, by mode: the measure, mark, each headline metric with its CI (soft_max_diff: score mode), and
    the items and attempts."""
    names = [n for n in HEADLINE if any(n in s.metrics for s in results.values())]
    rows = []
    for run, mode, s in _by_mode(results):
        row = {"run": run, "mode": mode, "measure": measures[(run, mode)], "mark": s.mark}
        for name in names:
            value, low, high = s.metrics.get(name, (None, None, None))
            row |= {name: value, f"{name}_ci_low": low, f"{name}_ci_high": high}
        rows.append(row | {"n_items": s.n_items, "n_attempts": s.n_attempts})
    return pd.DataFrame(rows)


def comparison_by_emotion(results: Results, measures: Measures) -> pd.DataFrame:
    """A row per run, mode and emotion (by mode): the measure, that emotion's max_diff with its CI, and the items."""
    return pd.DataFrame([{"run": run, "mode": mode, "measure": measures[(run, mode)], "emotion": e}
                         | dict(zip(("max_diff", "ci_low", "ci_high"), s.metrics[f"max_diff_{e}"]))
                         | {"n_items": s.n_items} for run, mode, s in _by_mode(results) for e in EMOTIONS])


def metrics_json(results: Results, measures: Measures) -> dict:
    """{run: {mode: {measure, metrics: {name: {value, ci_low, ci_high}}, mark, n_items, n_attempts}}}."""
    out: dict = {}
    for (run, mode), s in results.items():
        out.setdefault(run, {})[mode] = {
            "measure": measures[(run, mode)],
            "metrics": {k: {"value": v, "ci_low": low, "ci_high": high} for k, (v, low, high) in s.metrics.items()},
            "mark": s.mark, "n_items": s.n_items, "n_attempts": s.n_attempts}
    return out
