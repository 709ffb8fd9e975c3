"""The analysis tables: Table 1 (model × template), per-attribute effects with their omnibus tests, and the
comparisons between templates and between runs."""

from __future__ import annotations

from itertools import combinations

import pandas as pd

from behavioral.suites.jaem.dimensions import ATTRIBUTES
from behavioral.suites.jaem.effects import METRICS, attribute_effects, compare, holm

GROUPINGS: tuple[tuple[str, ...], ...] = (*((a,) for a in ATTRIBUTES), ("sexuality", "pronoun"))


def available(metrics: pd.DataFrame) -> list[str]:
    """The metrics that hold at least one value."""
    return [m for m in METRICS if m in metrics and metrics[m].notna().any()]


def table1(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per model and template: samples, MC accuracy, mean V/A/D distances and IP/EX/ER labels (NaN unavailable)."""
    rows = []
    for model, metrics in runs.items():
        for template, group in metrics.groupby("template", sort=True):
            rows.append({"model": model, "template": template, "count": len(group),
                         **{m: group[m].mean() for m in METRICS}})
    return pd.DataFrame(rows, columns=["model", "template", "count", *METRICS])


def effects(metrics: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per value, per attribute) tables of every available metric: z, p and p_holm per value; the omnibus test
    per attribute with p_holm over the attributes of that metric."""
    values, omnibus = [], []
    for metric in available(metrics):
        block = []
        for by in GROUPINGS:
            result = attribute_effects(metrics, metric, by)
            attribute = " × ".join(by)
            values.append(result.assign(metric=metric, attribute=attribute))
            block.append({"metric": metric, "attribute": attribute, "test": result.attrs["omnibus_test"],
                          "p": result.attrs["omnibus_p"]})
        block = pd.DataFrame(block)
        block["p_holm"] = holm(block["p"])
        omnibus.append(block)
    columns = ["metric", "attribute", "value", "n", "mean", "z", "p", "p_holm"]
    per_value = pd.concat(values, ignore_index=True)[columns] if values else pd.DataFrame(columns=columns)
    per_attr = pd.concat(omnibus, ignore_index=True) if omnibus else \
        pd.DataFrame(columns=["metric", "attribute", "test", "p", "p_holm"])
    return per_value, per_attr


def comparisons(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Pairs of templates within each run and pairs of runs (all templates pooled): one test per metric, Holm over
    the metrics of each pair."""
    rows = []

    def add(kind: str, scope: str, a: str, b: str, x: pd.DataFrame, y: pd.DataFrame) -> None:
        block = []
        for metric in METRICS:
            test, p = compare(x[metric], y[metric], metric)
            block.append({"kind": kind, "scope": scope, "a": a, "b": b, "metric": metric,
                          "mean_a": x[metric].mean(), "mean_b": y[metric].mean(), "test": test, "p": p})
        for row, adjusted in zip(block, holm([r["p"] for r in block])):
            rows.append(row | {"p_holm": adjusted})

    for model, metrics in runs.items():
        templates = sorted(metrics["template"].unique())
        for a, b in combinations(templates, 2):
            add("templates", model, a, b, metrics[metrics["template"] == a], metrics[metrics["template"] == b])
    for a, b in combinations(runs, 2):
        add("runs", "all templates", a, b, runs[a], runs[b])
    return pd.DataFrame(rows, columns=["kind", "scope", "a", "b", "metric", "mean_a", "mean_b", "test", "p",
                                       "p_holm"])
