"""Seed 000's steering protocol (`empathy-gap interp steer` on an intergroup run): the in-group direction of one
category and setting (in-group cells minus out-group cells, "a person" in neither), the steered reruns of that slice,
and δ beside the refusal and numeric rates per steering, so a "fix" that breaks the task shows."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from activations.store import ActivationStore
from behavioral.run import RunConfig
from behavioral.suites.intergroup import activations
from behavioral.suites.intergroup.analysis import analyze_setting
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.suite import SUITE, results
from interp.steering import mean_difference, unit_rows

LABEL = "ingroup"  # the cell label (Suite.cell_labels) whose true cells minus false cells is the direction
KEY = ("unit_id", "event_id")  # a result row of a steered rerun
RESULT_COLUMNS = ("response", "intensity", "refused", "score_intensity", "expected_intensity", "numeric_mass")
BLOCK = ("category", "setting")


def block(config: Mapping, where: Mapping) -> dict[str, str]:
    """The one category and setting a steering or patching study reads: `where`'s (each one value), by default the
    run's first (`config`: its manifest config); another field, or several values, is a ValueError naming --where."""
    extra = sorted(set(where) - set(BLOCK))
    if extra:
        raise ValueError(f"--where {extra[0]}: an intergroup steering or patching study selects a category and a "
                         "setting only (category=..., setting=...)")
    options = config.get("options") or {}
    chosen = {}
    for field, known in zip(BLOCK, (options.get("categories", ()), options.get("settings", ()))):
        value = where.get(field, known[0] if known else None)
        if value is None or not isinstance(value, str):
            raise ValueError(f"--where {field}: expected one value (one {field} at a time), got {value!r}")
        chosen[field] = value
    return chosen


def final(store: ActivationStore, selection: Mapping[str, str]) -> tuple[np.ndarray, pd.DataFrame]:
    """The selected category's and setting's final-token cell means in Table 1 order, the order the direction is
    pooled in (seed 000's view of the store)."""
    return activations.final(store, selection["category"], selection["setting"])


def ingroup_direction(store: ActivationStore, category: str, setting: str, unit: bool = False) -> np.ndarray:
    """[hooks, d] float32: count-weighted mean final-token state of in-group cells minus that of out-group cells.

    Rows follow ``store.hooks``. With ``unit`` every row is scaled to norm 1 (a zero row stays zero).
    """
    means, cells = final(store, {"category": category, "setting": setting})
    label = SUITE.cell_labels(cells)[LABEL]
    direction = mean_difference(means, cells["count"], label.eq(True).fillna(False), label.eq(False).fillna(False))
    return (unit_rows(direction) if unit else direction).astype(np.float32)


def slice_config(stored: RunConfig, selection: Mapping[str, str], limit_events: int | None) -> RunConfig:
    """The steered reruns' configuration: the run's, narrowed to the selected category and setting and, with
    `limit_events`, to a seeded sample of that many events (else the run's own)."""
    options = stored.options
    limit = options.limit_events if limit_events is None else limit_events
    options = dataclasses.replace(options, categories=(selection["category"],), settings=(selection["setting"],),
                                  limit_events=limit)
    return dataclasses.replace(stored, options=options)


def read_rows(run_dir) -> pd.DataFrame:
    """A rerun's result rows under seed 000's names (``results``)."""
    return results(run_dir)


def _measures(rows: pd.DataFrame) -> list[str]:
    """``intensity`` always (generated answer, or the greedy score answer in score mode); ``expected_intensity``
    where the run scored."""
    return ["intensity"] + (["expected_intensity"] if rows["expected_intensity"].notna().any() else [])


def summarize(rows: pd.DataFrame, n_permutations: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """δ with its permutation interval and p, and the refusal / numeric rates, per condition × category × setting
    × measure; ``*_change`` columns subtract the unsteered condition's value.

    Measures: ``intensity`` (the generated answer, or the greedy score answer in score mode) and, where the run
    scored, ``expected_intensity``. ``non_numeric_mass`` = 1 − mean probability that the first answer token starts
    a number (score modes); ``refusal_rate`` counts prompts without a value of the measure (those drop whole events);
    ``p_min`` is the smallest p the sampled permutation null allows (see ``PermutationResult``); ``p_exact`` the p
    over every matching of identities where the test enumerates them (religion), NaN otherwise.
    """
    out = []
    event_ids = tuple(sorted(rows["event_id"].unique()))
    order = list(dict.fromkeys(rows["condition"]))
    for (condition, category, setting), sub in rows.groupby(["condition", "category", "setting"], sort=False):
        first = sub.iloc[0]
        for measure in _measures(sub):
            a = analyze_setting(sub, get_category(category), setting, event_ids, measure, n_permutations, seed,
                                allow_partial=True)
            perm = a.permutation
            out.append({
                "condition": condition, "layer": int(first["layer"]), "coef": float(first["coef"]),
                "project": bool(first["project"]), "random": bool(first["random"]), "category": category,
                "setting": setting, "measure": measure,
                "delta": perm.delta if perm else math.nan, "ci_low": perm.ci_low if perm else math.nan,
                "ci_high": perm.ci_high if perm else math.nan, "p_value": perm.p_value if perm else math.nan,
                "p_min": perm.p_min if perm else math.nan,
                "p_exact": perm.p_exact if perm and perm.p_exact is not None else math.nan,
                "mean_rating": a.summary["mean"] if a.summary else math.nan,
                "refusal_rate": a.refusal_rate, "excluded_rate": a.excluded_rate,
                "parsable_rate": math.nan if a.parsable_rate is None else a.parsable_rate,
                "numeric_mass_mean": math.nan if a.numeric_mass_mean is None else a.numeric_mass_mean,
                "numeric_mass_share": math.nan if a.numeric_mass_share is None else a.numeric_mass_share,
                "non_numeric_mass": math.nan if a.numeric_mass_mean is None else 1 - a.numeric_mass_mean,
                "n_prompts": a.n_prompts, "note": "; ".join(a.notes),
            })
    table = pd.DataFrame(out)
    table["_order"] = table["condition"].map({c: i for i, c in enumerate(order)})
    table["_measure"] = table["measure"].map({"intensity": 0, "expected_intensity": 1})
    table = table.sort_values(["category", "setting", "_measure", "_order"], kind="stable")
    table = table.drop(columns=["_order", "_measure"])
    keys = ["category", "setting", "measure"]
    changed = ("delta", "mean_rating", "refusal_rate", "parsable_rate", "non_numeric_mass")
    base = table.loc[table["condition"] == "unsteered", keys + list(changed)]
    reference = table[keys].merge(base, on=keys, how="left")
    for column in changed:
        table[f"{column}_change"] = table[column].to_numpy() - reference[column].to_numpy(dtype=float)
    return table.reset_index(drop=True)


def sweep_figure(summary: pd.DataFrame, category: str, setting: str) -> Figure:
    """δ vs coefficient per layer (projection at the right), beside the refusal rate and the non-numeric mass; a
    layer without a coefficient-0 run takes the unsteered point there (see interp.steering.sweep_conditions), and an
    undefined δ is a triangle at the foot of its panel."""
    part = summary[(summary["category"] == category) & (summary["setting"] == setting)]
    measures = list(dict.fromkeys(part["measure"]))
    panels = [("delta", "δ (in-group − out-group, z)"), ("refusal_rate", "refusal rate"),
              ("non_numeric_mass", "non-numeric mass (1 − P(number))"), ("mean_rating", "mean rating M⁰")]
    fig = Figure(figsize=(4.2 * len(panels), 3.2 * len(measures)), layout="constrained")
    axes = fig.subplots(len(measures), len(panels), squeeze=False)
    steered = part[part["layer"] >= 0]
    coefs = sorted(steered.loc[~steered["project"], "coef"].dropna().unique())
    span = (max(coefs) - min(coefs)) if len(coefs) > 1 else 1.0
    x_project = (max(coefs) if coefs else 0.0) + 0.35 * span
    colors = {layer: f"C{i}" for i, layer in enumerate(sorted(steered["layer"].unique()))}
    for i, measure in enumerate(measures):
        rows = part[part["measure"] == measure]
        base = rows[rows["layer"] < 0]
        for j, (column, title) in enumerate(panels):
            ax = axes[i, j]
            marked = drawn = False
            if len(base) and np.isfinite(base[column].iloc[0]):
                ax.axhline(base[column].iloc[0], color="black", linestyle="--", linewidth=1, label="unsteered")
            if column == "delta" and len(base) and np.isfinite(base["ci_low"].iloc[0]):
                ax.axhspan(base["ci_low"].iloc[0], base["ci_high"].iloc[0], color="0.85", label="null 95% (unsteered)")
            for layer, sub in rows[rows["layer"] >= 0].groupby("layer"):
                added = sub[~sub["project"]]
                if len(base) and not (added["coef"] == 0).any():
                    added = pd.concat([added, base.assign(coef=0.0)])  # coefficient 0 is the unsteered run
                added = added.sort_values("coef")
                ax.plot(added["coef"], added[column], marker="o", color=colors[layer], label=f"layer {layer}")
                undefined = added.loc[~np.isfinite(added[column]), "coef"]
                if column == "delta" and len(undefined):  # e.g. every cell the same greedy answer
                    ax.scatter(undefined, [0.04] * len(undefined), marker="v", s=40, color=colors[layer],
                               transform=ax.get_xaxis_transform(), clip_on=False,
                               label=None if marked else "δ undefined (all cells equal)")
                    marked = True
                projected = sub[sub["project"] & ~sub["random"]]
                if len(projected):
                    ax.scatter([x_project] * len(projected), projected[column], marker="x", s=60, color=colors[layer])
                control = sub[sub["project"] & sub["random"]]
                if len(control):
                    ax.scatter([x_project] * len(control), control[column], marker="o", s=60, facecolors="none",
                               edgecolors=colors[layer], label=None if drawn else "projection of a random direction")
                    drawn = True
            if (steered["project"]).any():
                ticks = list(coefs) + [x_project]
                ax.set_xticks(ticks, [f"{c:g}" for c in coefs] + ["proj."])
            if column == "delta" and not np.isfinite(rows["delta"]).any():
                note = next((n for n in rows["note"] if n), "undefined")
                ax.text(0.5, 0.5, "δ n/a:\n" + note[:120], ha="center", va="center", wrap=True, fontsize=7,
                        transform=ax.transAxes)
            ax.set_xlabel("coefficient")
            ax.set_title(f"{title}\n{measure}" if j == 0 else title, fontsize=9)
            if j == 0 and (i == 0 or marked or drawn):
                ax.legend(fontsize=7)
    fig.suptitle(f"Steering along the in-group direction: {category} {setting}")
    return fig


def figures(summary: pd.DataFrame) -> list[tuple[str, str, Figure]]:
    """(name, title, figure) of `sweep_figure` for each category × setting of the summary."""
    blocks = summary[list(BLOCK)].drop_duplicates().itertuples(index=False)
    return [(f"steering_{c}_{s}", f"δ and the rates under steering, {c} {s}", sweep_figure(summary, c, s))
            for c, s in blocks]
