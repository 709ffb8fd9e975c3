"""Seed 000's steering protocol (`empathy-gap interp steer` on an intergroup run): what of a steering study is the
suite's own. The direction's cells are one category's and setting's persona × experiencer cells ("a person" in
neither), labelled in-group; the steered reruns are that slice of the run; each condition's measures are δ beside
the refusal and numeric rates, so a "fix" that breaks the task shows. The summary, the controls and the figure are
the method's (`interp.steering.controls`, `interp.steering.held_out`, `interp.steering.figure`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from activations.store import ActivationStore
from behavioral.analysis.runs import Run
from behavioral.runner.run import RunConfig
from behavioral.suites.intergroup import activations
from behavioral.suites.intergroup.setting_analysis import analyze_setting, intensity_tensor
from behavioral.suites.intergroup.groups import UNSPECIFIED, get_category
from behavioral.suites.intergroup.items import dataset, results
from interp.identities import slot_tokens
from interp.matchings import matched_cells
from interp.steering import mean_difference, unit_rows
from interp.steering.controls import Block

LABEL = "ingroup"  # the cell label (Suite.cell_labels) whose true cells minus false cells is the direction
SIDES = ("in-group", "out-group")  # what the label's true and false cells are called in one-sided steerings
SLOTS = ("perceiver", "experiencer")  # the columns of a cell's (or a result row's) two identities
KEY = ("unit_id", "event_id")  # a result row of a steered rerun
RESULT_COLUMNS = ("response", "intensity", "refused", "score_intensity", "expected_intensity", "numeric_mass")
BLOCK = ("category", "setting")
PANELS = (("delta", "δ (in-group − out-group, z)"), ("refusal_rate", "refusal rate"),
          ("non_numeric_mass", "non-numeric mass (1 − P(number))"), ("mean_rating", "mean rating M⁰"))
CHANGED = ("delta", "mean_rating", "refusal_rate", "parsable_rate", "non_numeric_mass")


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


def final(store: ActivationStore, selection: Mapping[str, str],
          events: Sequence[str] | None = None) -> tuple[np.ndarray, pd.DataFrame]:
    """The selected category's and setting's final-token cell means in Table 1 order, the order the direction is
    pooled in (seed 000's view of the store): over every captured prompt, or over the single-prompt states of
    `events` only (a direction fit on a training split)."""
    if events is None:
        return activations.final(store, selection["category"], selection["setting"])
    return activations.final_over_events(store, selection["category"], selection["setting"], events)


def identity_tokens(run: Run, selection: Mapping[str, str],
                    trust_remote_code: bool = False) -> dict[str, tuple[int, int]]:
    """Each named identity of the selected category -> how many tokens its persona slot and its experiencer slot
    took as the run's model read them in the selected setting (`interp.identities.slot_tokens`; the tokenizer is
    loaded, no model): the length term of `interp.steering.held_out`."""
    names = list(identities(selection))
    persona, experiencer = (slot_tokens(run, kind, names, dict(selection), trust_remote_code)
                            for kind in ("persona", "experiencer"))
    return {name: (p, x) for name, p, x in zip(names, persona, experiencer)}


def identities(selection: Mapping[str, str]) -> dict[str, int]:
    """Each named identity of the selected category (Table 1 order) -> the index of its group among the category's
    groups (what a matching permutes; "a person" is in none)."""
    category = get_category(selection["category"])
    groups = list(dict.fromkeys(category.group_of[name] for name in category.identities))
    return {name: groups.index(category.group_of[name]) for name in category.identities}


def ingroup_direction(store: ActivationStore, category: str, setting: str, unit: bool = False) -> np.ndarray:
    """[hooks, d] float32: count-weighted mean final-token state of in-group cells minus that of out-group cells.

    Rows follow ``store.hooks``. With ``unit`` every row is scaled to norm 1 (a zero row stays zero).
    """
    selection = {"category": category, "setting": setting}
    means, cells = final(store, selection)
    label = matched_cells(cells, SLOTS, identities(selection))
    direction = mean_difference(means, cells["count"], label.eq(True).fillna(False), label.eq(False).fillna(False))
    return (unit_rows(direction) if unit else direction).astype(np.float32)


def slice_config(stored: RunConfig, selection: Mapping[str, str], limit_events: int | None,
                 exclude_events: Sequence[str] = ()) -> RunConfig:
    """The run's configuration narrowed to the selected category and setting and, with `limit_events`, to a seeded
    sample of that many events (else the run's own), less `exclude_events` (the events a direction was fit on)."""
    options = stored.options
    limit = options.limit_events if limit_events is None else limit_events
    options = dataclasses.replace(options, categories=(selection["category"],), settings=(selection["setting"],),
                                  limit_events=limit, exclude_events=tuple(sorted(exclude_events)))
    return dataclasses.replace(stored, options=options)


def rerun(stored: RunConfig, selection: Mapping[str, str], limit_events: int | None,
          exclude_events: Sequence[str] = ()) -> tuple[RunConfig, list[str]]:
    """The steered reruns' configuration (`slice_config`) and the event ids it draws (its sample less its excluded
    events), sorted: known before it runs, from the corpus alone."""
    config = slice_config(stored, selection, limit_events, exclude_events)
    return config, sorted(event.event_id for event in dataset(config).events)


def read_rows(run_dir) -> pd.DataFrame:
    """A rerun's result rows under seed 000's names (``results``)."""
    return results(run_dir)


def _measures(rows: pd.DataFrame) -> list[str]:
    """``intensity`` always (generated answer, or the greedy score answer in score mode); ``expected_intensity``
    where the run scored."""
    return ["intensity"] + (["expected_intensity"] if rows["expected_intensity"].notna().any() else [])


def measured(rows: pd.DataFrame) -> Iterator[Block]:
    """The blocks of a steering's rerun rows as the method's summary and controls read them: per category ×
    setting (sorted) and measure (`_measures`), I [n, n, events] without "a person" per condition over the block's
    events, the category's in-group relation and groups, and the prompts with "a person" on either side (outside
    the gap), paired by cell and event."""
    for (category, setting), part in rows.groupby(list(BLOCK)):
        cat = get_category(category)
        event_ids = tuple(sorted(part["event_id"].unique()))
        groups = identities({"category": category})
        outside = part[(part["perceiver"] == UNSPECIFIED) | (part["experiencer"] == UNSPECIFIED)]
        for measure in _measures(part):
            yield Block(
                labels={"category": category, "setting": setting, "measure": measure},
                names=tuple(cat.identities), groups=np.array([groups[n] for n in cat.identities], dtype=np.int64),
                same=cat.in_group(), rows=part, event_ids=event_ids,
                tensors={condition: intensity_tensor(sub, cat, event_ids, measure)[0][1:, 1:]
                         for condition, sub in part.groupby("condition", sort=False)},
                outside=outside[["condition", "perceiver", "experiencer", "event_id", measure]].rename(
                    columns={measure: "value"}))


def measures(block: Block, condition: str, n_permutations: int = 10_000, seed: int = 0) -> dict:
    """Seed 000's measures of one condition of a block: the raw gap in rating points (in-group minus out-group
    cells of M⁰) with its t-interval over the events (`cell_gap.gap_interval`); δ with the share of σ(M⁰)² that
    is event noise (no interval over events: δ's resampled values centre below its many-event value,
    docs/BENCHMARKS.md), its permutation null interval (``ci_*``) and p; the mean rating, the refusal and numeric
    rates and the events. ``non_numeric_mass`` = 1 − mean probability that the first answer token starts a number
    (score modes); ``refusal_rate`` counts prompts without a value of the measure (those drop whole events);
    ``p_min`` is the smallest p the sampled permutation null allows (see ``PermutationResult``); ``p_exact`` the p
    over every matching of identities where the test enumerates them (religion), NaN otherwise."""
    sub = block.rows[block.rows["condition"] == condition]
    a = analyze_setting(sub, get_category(block.labels["category"]), block.labels["setting"], block.event_ids,
                        block.labels["measure"], n_permutations, seed, allow_partial=True)
    perm = a.permutation
    gap_low, gap_high = a.gap_interval or (math.nan, math.nan)
    return {
        "gap_points": math.nan if a.gap_points is None else a.gap_points, "gap_low": gap_low, "gap_high": gap_high,
        "delta": perm.delta if perm else math.nan,
        "noise_share": math.nan if a.noise_share is None else a.noise_share,
        "ci_low": perm.ci_low if perm else math.nan,
        "ci_high": perm.ci_high if perm else math.nan, "p_value": perm.p_value if perm else math.nan,
        "p_min": perm.p_min if perm else math.nan,
        "p_exact": perm.p_exact if perm and perm.p_exact is not None else math.nan,
        "mean_rating": a.summary["mean"] if a.summary else math.nan,
        "refusal_rate": a.refusal_rate, "excluded_rate": a.excluded_rate,
        "parsable_rate": math.nan if a.parsable_rate is None else a.parsable_rate,
        "numeric_mass_mean": math.nan if a.numeric_mass_mean is None else a.numeric_mass_mean,
        "numeric_mass_share": math.nan if a.numeric_mass_share is None else a.numeric_mass_share,
        "non_numeric_mass": math.nan if a.numeric_mass_mean is None else 1 - a.numeric_mass_mean,
        "n_events": len(block.event_ids), "n_prompts": a.n_prompts, "note": "; ".join(a.notes)}
