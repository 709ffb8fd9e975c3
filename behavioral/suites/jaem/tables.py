"""The analysis tables as tidy frames, a `run` column naming each run: Table 1 (run × template), answer rates,
per-attribute effects with their omnibus tests and the largest effect per metric, comparisons between templates and
between runs, and the comparison across runs (CE accuracy, attribute effects side by side). CE accuracy carries its
Wilson interval over the CE samples and their number (our addition)."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations

import pandas as pd

from behavioral.analysis.multiplicity import holm
from behavioral.analysis.proportion import item_share
from behavioral.suites.jaem.dimensions import ATTRIBUTES
from behavioral.suites.jaem.effects import METRICS, attribute_effects, compare
from behavioral.suites.jaem.templates import LABELS

GROUPINGS: tuple[tuple[str, ...], ...] = (*((a,) for a in ATTRIBUTES), ("sexuality", "pronoun"))
PAIR_COLUMNS = ["a", "b", "metric", "mean_a", "mean_b", "test", "p", "p_holm"]
SIGNIFICANT = 0.05


def available(metrics: pd.DataFrame) -> list[str]:
    """The metrics that hold at least one value."""
    return [m for m in METRICS if m in metrics and metrics[m].notna().any()]


def stack(frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One table per run (run name -> frame) as one, under a leading `run` column."""
    frame = pd.concat([f.assign(run=name) for name, f in frames.items()], ignore_index=True)
    return frame[["run", *(c for c in frame.columns if c != "run")]]


CE_ACCURACY = ("ce_correct", "ce_correct_low", "ce_correct_high", "ce_samples")
GEN_METRICS = tuple(m for m in METRICS if m not in CE_ACCURACY)  # the metrics of generated replies


def ce_correct(samples: pd.DataFrame) -> dict[str, float]:
    """CE accuracy with its 95% Wilson interval over the CE samples (each one independent item) and their number."""
    ce = samples[samples["ce_correct"].notna()]
    return dict(zip(CE_ACCURACY, (*item_share(ce["ce_correct"], ce["sample_id"]), len(ce))))


def table1(samples: pd.DataFrame) -> pd.DataFrame:
    """Per template: samples, MC accuracy with its Wilson interval over the CE samples and their number, mean V/A/D
    distances and IP/EX/ER labels (NaN unavailable)."""
    rows = [{"template": template, "count": len(group), **ce_correct(group),
             **{m: group[m].mean() for m in GEN_METRICS}} for template, group in samples.groupby("template", sort=True)]
    return pd.DataFrame(rows, columns=["template", "count", *CE_ACCURACY, *GEN_METRICS])


def answer_rates(samples: pd.DataFrame) -> pd.DataFrame:
    """One row: samples, where CE answers came from, the share of CE replies without a letter, the share of empty
    gen replies, and the gen samples whose VAD distance is NaN (NaN where no VAD was computed)."""
    ce = samples[samples["ce_source"].notna()]
    gen = samples[samples["reply"].notna()]
    vad = len(gen) and gen["vad_v"].notna().any()
    return pd.DataFrame([{
        "samples": len(samples), "ce_from": ", ".join(sorted(ce["ce_source"].unique())) or None,
        "ce_unparsed": ce["ce_letter"].isna().mean() if len(ce) else float("nan"),
        "gen_empty": (gen["reply"] == "").mean() if len(gen) else float("nan"),
        "vad_unmatched": int(gen["vad_v"].isna().sum()) if vad else float("nan"), "gen_samples": len(gen)}])


def effects(samples: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per value, per attribute) tables of every available metric: z, p and p_holm per value; the omnibus test
    per attribute with p_holm over the attributes of that metric."""
    values, omnibus = [], []
    for metric in available(samples):
        block = []
        for by in GROUPINGS:
            result = attribute_effects(samples, metric, by)
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


def largest_effects(per_value: pd.DataFrame, per_attr: pd.DataFrame) -> pd.DataFrame:
    """Per run and metric: how many values and attributes have p_holm below 0.05, and the value of largest |z|."""
    rows = []
    for (run, metric), group in per_value.groupby(["run", "metric"], sort=False):
        omnibus = per_attr[(per_attr["run"] == run) & (per_attr["metric"] == metric)]
        top = group.loc[group["z"].abs().idxmax()] if group["z"].notna().any() else None
        rows.append({"run": run, "metric": metric, "values_significant": int((group["p_holm"] < SIGNIFICANT).sum()),
                     "attributes_significant": int((omnibus["p_holm"] < SIGNIFICANT).sum()),
                     **({} if top is None else {"attribute": top["attribute"], "value": top["value"],
                                                "n": top["n"], "z": top["z"], "p_holm": top["p_holm"]})})
    return pd.DataFrame(rows, columns=["run", "metric", "values_significant", "attributes_significant", "attribute",
                                       "value", "n", "z", "p_holm"])


def _pair(x: pd.DataFrame, y: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """One test per metric between two sets of samples, Holm over the metrics."""
    rows = []
    for metric in METRICS:
        test, p = compare(x[metric], y[metric], metric)
        rows.append({"a": a, "b": b, "metric": metric, "mean_a": x[metric].mean(), "mean_b": y[metric].mean(),
                     "test": test, "p": p})
    frame = pd.DataFrame(rows)
    frame["p_holm"] = holm(frame["p"])
    return frame[PAIR_COLUMNS]


def template_pairs(samples: pd.DataFrame) -> pd.DataFrame:
    """Each pair of templates of a run, compared metric by metric."""
    templates = sorted(samples["template"].unique())
    frames = [_pair(samples[samples["template"] == a], samples[samples["template"] == b], a, b)
              for a, b in combinations(templates, 2)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=PAIR_COLUMNS)


def run_pairs(runs: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Each pair of runs (every template pooled), compared metric by metric."""
    frames = [_pair(runs[a], runs[b], a, b) for a, b in combinations(runs, 2)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=PAIR_COLUMNS)


def ce_accuracy(samples: pd.DataFrame) -> pd.DataFrame:
    """One row: CE samples, the accuracy of choosing the Empathetic answer with its Wilson interval over them, the
    mean probability of the gold letter (scored runs) and the share of answers per label, every template pooled."""
    ce = samples[samples["ce_correct"].notna()]
    shares = ce["ce_label"].value_counts(normalize=True) if len(ce) else pd.Series(dtype=float)
    accuracy = ce_correct(ce)
    return pd.DataFrame([{"ce_samples": accuracy.pop("ce_samples"), **accuracy, "p_gold": ce["p_gold"].mean(),
                          **{f"chose_{label.lower()}": float(shares.get(label, 0.0)) if len(ce) else float("nan")
                             for label in (*LABELS, "none")}}])


def side_by_side(frame: pd.DataFrame, keys: list[str], column: str, runs: list[str]) -> pd.DataFrame:
    """`column` of a tidy per-run frame with a column per run (in `runs` order), a row per `keys` (first-seen
    order)."""
    wide = frame[keys].drop_duplicates()
    for run in runs:
        part = frame.loc[frame["run"] == run, [*keys, column]].rename(columns={column: run})
        wide = wide.merge(part, on=keys, how="left")
    return wide.reset_index(drop=True)
