"""Seed 000's steering protocol (`empathy-gap interp steer` on an intergroup run): the in-group direction of one
category and setting (in-group cells minus out-group cells, "a person" in neither), the steered reruns of that slice,
and δ beside the refusal and numeric rates per steering, so a "fix" that breaks the task shows."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from activations.store import ActivationStore
from behavioral.analysis.runs import Run
from behavioral.analysis.figure_style import GREY, LABEL_SIZE, PALETTE, count_range, n_text, new_figure, styled
from behavioral.runner.run import RunConfig
from behavioral.suites.intergroup import activations
from behavioral.analysis.paired import fieller, t_interval
from behavioral.core.selection import field_values
from behavioral.suites.intergroup import stats
from behavioral.suites.intergroup.setting_analysis import analyze_setting, intensity_tensor
from behavioral.suites.intergroup.groups import UNSPECIFIED, Category, get_category
from behavioral.suites.intergroup.identities import cell_labels
from behavioral.suites.intergroup.items import dataset, results
from interp.identities import slot_tokens
from interp.matchings import involves, matched, overlap
from interp.steering import mean_difference, unit_rows

LABEL = "ingroup"  # the cell label (Suite.cell_labels) whose true cells minus false cells is the direction
KEY = ("unit_id", "event_id")  # a result row of a steered rerun
RESULT_COLUMNS = ("response", "intensity", "refused", "score_intensity", "expected_intensity", "numeric_mass")
BLOCK = ("category", "setting")
SIDES = ("in-group", "out-group")  # what the label's true and false cells are called in one-sided steerings


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


def events_of(run_rows: pd.DataFrame, selection: Mapping[str, str]) -> list[str]:
    """The event ids of the selected block of a run's rows, sorted."""
    return field_values(run_rows, "event_id", selection, "the run's rows")


def identity_tokens(run: Run, selection: Mapping[str, str],
                    trust_remote_code: bool = False) -> dict[str, tuple[int, int]]:
    """Each named identity of the selected category -> how many tokens its persona slot and its experiencer slot
    took as the run's model read them in the selected setting (`interp.identities.slot_tokens`; the tokenizer is
    loaded, no model): the length term of `held_out_control`."""
    names = list(get_category(selection["category"]).identities)
    persona, experiencer = (slot_tokens(run, kind, names, dict(selection), trust_remote_code)
                            for kind in ("persona", "experiencer"))
    return {name: (p, x) for name, p, x in zip(names, persona, experiencer)}


def _group_index(category: Category, names: pd.Series) -> np.ndarray:
    """The index of each identity's group among the category's groups (Table 1 order), -1 for "a person"."""
    groups = list(dict.fromkeys(category.group_of[name] for name in category.identities))
    position = {name: groups.index(category.group_of[name]) for name in category.identities}
    return names.map(lambda name: -1 if name == UNSPECIFIED else position[name]).to_numpy(dtype=np.int64)


def n_groups(selection: Mapping[str, str]) -> int:
    """How many groups the selected category's identities fall into (what a matching permutes)."""
    category = get_category(selection["category"])
    return len(set(category.group_of[name] for name in category.identities))


def matched_cells(cells: pd.DataFrame, selection: Mapping[str, str], matching: np.ndarray | None,
                  without: int | None = None) -> pd.Series:
    """Nullable bool per cell (perceiver, experiencer): in-group under `matching` of the category's groups (None: the
    real one, the suite's `ingroup` label), NA where "a person" is on either side or, with `without`, where that
    group is (a held-out identity)."""
    category = get_category(selection["category"])
    rows, cols = _group_index(category, cells["perceiver"]), _group_index(category, cells["experiencer"])
    named = (rows >= 0) & (cols >= 0)
    if without is not None:
        named &= ~involves(rows, cols, without)
    return pd.Series(matched(rows, cols, matching), index=cells.index, dtype="boolean").where(named, pd.NA)


def ingroup_direction(store: ActivationStore, category: str, setting: str, unit: bool = False) -> np.ndarray:
    """[hooks, d] float32: count-weighted mean final-token state of in-group cells minus that of out-group cells.

    Rows follow ``store.hooks``. With ``unit`` every row is scaled to norm 1 (a zero row stays zero).
    """
    means, cells = final(store, {"category": category, "setting": setting})
    label = cell_labels(cells)[LABEL]
    direction = mean_difference(means, cells["count"], label.eq(True).fillna(False), label.eq(False).fillna(False))
    return (unit_rows(direction) if unit else direction).astype(np.float32)


def slice_config(stored: RunConfig, selection: Mapping[str, str], limit_events: int | None,
                 exclude_events: Sequence[str] = ()) -> RunConfig:
    """The steered reruns' configuration: the run's, narrowed to the selected category and setting and, with
    `limit_events`, to a seeded sample of that many events (else the run's own), less `exclude_events` (the events a
    direction was fit on)."""
    options = stored.options
    limit = options.limit_events if limit_events is None else limit_events
    options = dataclasses.replace(options, categories=(selection["category"],), settings=(selection["setting"],),
                                  limit_events=limit, exclude_events=tuple(sorted(exclude_events)))
    return dataclasses.replace(stored, options=options)


def rerun_events(config: RunConfig) -> list[str]:
    """The event ids a rerun configuration draws (its sample less its excluded events), sorted; known before it
    runs, from the corpus alone."""
    return sorted(event.event_id for event in dataset(config).events)


def read_rows(run_dir) -> pd.DataFrame:
    """A rerun's result rows under seed 000's names (``results``)."""
    return results(run_dir)


def _measures(rows: pd.DataFrame) -> list[str]:
    """``intensity`` always (generated answer, or the greedy score answer in score mode); ``expected_intensity``
    where the run scored."""
    return ["intensity"] + (["expected_intensity"] if rows["expected_intensity"].notna().any() else [])


def _m0(I: np.ndarray) -> np.ndarray | None:
    """M⁰ of I [n, n, events] over the events no cell refused; None where no event is kept."""
    try:
        return stats.cell_means(I, stats.exclusion_mask(I))
    except ValueError:
        return None


def _gap(I: np.ndarray, same: np.ndarray, within: np.ndarray | bool = True) -> float:
    """The raw gap of I [n, n, events] (no "a person"): mean in-group cell minus mean out-group cell of M⁰ (among the
    cells `within`, e.g. one identity's), in rating points; NaN where no event is kept."""
    M0 = _m0(I)
    return math.nan if M0 is None else float(M0[same & within].mean() - M0[~same & within].mean())


def _tensors(rows: pd.DataFrame, category: Category, measure: str) -> dict[str, np.ndarray]:
    """I [n, n, events] without "a person" per condition, over the events of all conditions (sorted)."""
    event_ids = tuple(sorted(rows["event_id"].unique()))
    return {condition: intensity_tensor(sub, category, event_ids, measure)[0][1:, 1:]
            for condition, sub in rows.groupby("condition", sort=False)}


def _measured(rows: pd.DataFrame) -> Iterator[tuple[str, str, Category, str, pd.DataFrame, dict[str, np.ndarray]]]:
    """Per category × setting of `rows` and per measure of it (`_measures`): the category's name and itself, the
    setting, the measure, the block's rows and its tensors per condition (`_tensors`)."""
    for (category, setting), block in rows.groupby(["category", "setting"], sort=False):
        cat = get_category(category)
        for measure in _measures(block):
            yield category, setting, cat, measure, block, _tensors(block, cat, measure)


def summarize(rows: pd.DataFrame, n_permutations: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """Per condition × category × setting × measure: the raw gap in rating points (in-group minus out-group cells of
    M⁰) with its t-interval over the events (`stats.gap_interval`) and its change from the unsteered rerun with the
    t-interval of the per-event changes (`stats.gap_change`, paired by event); σ of M⁰ (the scale δ divides by,
    re-estimated per condition, so δ moves with it alone); δ with the share of σ(M⁰)² that is event noise (no
    interval over events: δ's resampled values centre below its many-event value, docs/BENCHMARKS.md), its
    permutation null interval (``ci_*``) and p; the refusal and numeric rates.
    ``*_change`` columns subtract the unsteered condition's value.

    Measures: ``intensity`` (the generated answer, or the greedy score answer in score mode) and, where the run
    scored, ``expected_intensity``. ``non_numeric_mass`` = 1 − mean probability that the first answer token starts
    a number (score modes); ``refusal_rate`` counts prompts without a value of the measure (those drop whole events);
    ``p_min`` is the smallest p the sampled permutation null allows (see ``PermutationResult``); ``p_exact`` the p
    over every matching of identities where the test enumerates them (religion), NaN otherwise.
    """
    out = []
    event_ids = tuple(sorted(rows["event_id"].unique()))
    order = list(dict.fromkeys(rows["condition"]))
    for category, setting, cat, measure, block, tensors in _measured(rows):
        same = cat.in_group()
        for condition, sub in block.groupby("condition", sort=False):
            first = sub.iloc[0]
            a = analyze_setting(sub, cat, setting, event_ids, measure, n_permutations, seed, allow_partial=True)
            perm = a.permutation
            gap_low, gap_high = a.gap_interval or (math.nan, math.nan)
            change = (stats.gap_change(tensors["unsteered"], tensors[condition], same)
                      if "unsteered" in tensors else (math.nan, math.nan, math.nan))
            out.append({
                "condition": condition, "layer": int(first["layer"]), "coef": float(first["coef"]),
                "project": bool(first["project"]), "random": int(first["random"]),
                "matching": int(first["matching"]), "held_out": int(first.get("held_out", -1)),
                "one_sided": bool(first.get("one_sided", False)),
                "category": category, "setting": setting, "measure": measure,
                "gap_points": math.nan if a.gap_points is None else a.gap_points,
                "gap_low": gap_low, "gap_high": gap_high, "gap_points_change": change[0],
                "gap_change_low": change[1], "gap_change_high": change[2],
                "sigma_M0": math.nan if (M0 := _m0(tensors[condition])) is None else float(M0.std()),
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
                "n_events": len(event_ids), "n_prompts": a.n_prompts, "note": "; ".join(a.notes),
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


def matching_control(rows: pd.DataFrame, matchings: np.ndarray) -> pd.DataFrame:
    """The permuted-matching control of the projections: per layer × category × setting × measure, for the real
    matching and each wrong one (`matchings` [m, groups], interp.matchings), the gap of cells in-group under that
    matching before and after projecting out that matching's own direction (``L{l} project`` and ``L{l} project
    matching {i}``), how far it moved toward 0 (``closed_points`` = sign(before) × (before − after), in rating points,
    past 0 counting; sign-aligned since a wrong matching's gap may have either sign) with the t-interval of the
    per-event values for the real one (paired by event, `stats.gap_change`), and how close to 0 it came
    (``closed_share`` = 1 − |after| / |before|); the real matching's rank among all by the share each closes of its
    own gap and p =
    (1 + #{wrong share >= real share}) / (m + 1), floor 1 / (m + 1), exact where `matchings` holds every wrong
    matching. Ranked by points the real matching wins by construction (a wrong matching's own gap is a fraction of
    the real one); by share, a projection that closes "its" gap for any labelling of the cells ranks the real one
    among the rest. A wrong matching's direction is (fixed points − 1) / (n − 1) times the real one where a
    shared feature exists, so this control cannot tell a shared in-group feature from per-identity ones:
    `held_out_control` can."""
    out = []
    projected = rows[rows["project"].astype(bool) & rows["random"].eq(0)]
    for category, setting, cat, measure, _, tensors in _measured(rows):
        names = pd.Series(cat.identities)
        cells = pd.DataFrame({"perceiver": np.repeat(names, len(names)), "experiencer": np.tile(names, len(names))})
        for layer in sorted(projected.loc[projected["category"] == category, "layer"].unique()):
            entries = [(None, f"L{layer} project")] + [(i, f"L{layer} project matching {i}")
                                                     for i in range(len(matchings))]
            records = []
            for index, condition in entries:
                if condition not in tensors:
                    continue
                matching = None if index is None else matchings[index]
                same = matched_cells(cells, {"category": category}, matching).to_numpy(dtype=bool).reshape(
                    len(names), len(names))
                before, after = _gap(tensors["unsteered"], same), _gap(tensors[condition], same)
                sign = -1.0 if before < 0 else 1.0
                low = high = math.nan
                if index is None:  # closed = -sign × change, so its interval's ends swap where sign is +
                    _, change_low, change_high = stats.gap_change(tensors["unsteered"], tensors[condition], same)
                    low, high = sorted((-sign * change_low, -sign * change_high))
                records.append({
                    "layer": int(layer), "category": category, "setting": setting, "measure": measure,
                    "matching": "real" if index is None else str(index),
                    "pairs": "identity" if index is None else " ".join(map(str, matching)),
                    "fixed_points": n_groups({"category": category}) if index is None else overlap(matching),
                    "gap_unsteered": before, "gap_projected": after, "closed_points": sign * (before - after),
                    "closed_low": low, "closed_high": high,
                    "closed_share": 1 - abs(after) / abs(before) if before else math.nan})
            if not records:
                continue
            frame = pd.DataFrame(records)
            real = frame["matching"] == "real"
            wrong = frame.loc[~real, "closed_share"].to_numpy(dtype=float)
            if real.any() and len(wrong):
                removed = float(frame.loc[real, "closed_share"].iloc[0])
                exceed = int(stats.at_least(wrong, removed).sum())
                frame["p_real"] = (1 + exceed) / (len(wrong) + 1)
                frame["p_floor"] = 1 / (len(wrong) + 1)
                frame["rank_real"] = 1 + int((wrong > removed).sum())
            out.append(frame)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


TRANSFER_REFUSED = ("the real direction's lowering of the held-out identities' in-group interactions is not "
                    "distinguishable from 0 (its 95% t-interval over events includes 0), so the ratio has no bounded "
                    "interval and is not printed")
TRANSFER_RAISED = ("the real direction raised the held-out identities' in-group interactions (its 95% t-interval "
                   "over events lies below 0): there is no lowering to transfer, so the ratio is not printed")


LENGTHS_FIT = "persona tokens × experiencer tokens fit beside the main effects"
LENGTHS_ADDITIVE = ("none needed: persona tokens × experiencer tokens are additive over these identities (e.g. every "
                    "one the same length), so the main effects remove them")
LENGTHS_NOT_GIVEN = "not controlled: no token counts given"


def length_term(tokens: Mapping[str, tuple[int, int]], names: Sequence[str]) -> np.ndarray:
    """[n, n] float: persona tokens of perceiver p × experiencer tokens of experiencer x, for `names` in order
    (`tokens`: identity -> its persona slot's and its experiencer slot's token counts, `identity_tokens`)."""
    persona, experiencer = np.array([tokens[name] for name in names], dtype=float).T
    return np.outer(persona, experiencer)


def _interaction_design(same: np.ndarray, covariate: np.ndarray | None) -> tuple[np.ndarray, bool]:
    """The design [n², 2n (+1)] of `ingroup_interaction` (perceiver and experiencer indicators, and `covariate`'s
    column where it is not in their span over the out-group cells), and whether that column is in it."""
    n = len(same)
    rows, cols = np.indices((n, n)).reshape(2, -1)
    design = np.hstack([np.eye(n)[rows], np.eye(n)[cols]])  # the constant is in the span of either block
    outside = ~np.asarray(same, dtype=bool).ravel()
    rank = np.linalg.matrix_rank(design[outside])
    if rank < np.linalg.matrix_rank(design):
        raise ValueError("the in-group interaction needs three or more groups: the main effects of an in-group cell "
                         "are not estimable from the out-group cells")
    if covariate is None:
        return design, False
    extended = np.hstack([design, np.asarray(covariate, dtype=float).reshape(-1, 1)])
    return (extended, True) if np.linalg.matrix_rank(extended[outside]) > rank else (design, False)


def ingroup_interaction(I: np.ndarray, same: np.ndarray, covariate: np.ndarray | None = None) -> np.ndarray:
    """I [n, n, ...] less its additive model a + b_p + c_x (perceiver p, experiencer x) fit by least squares on the
    out-group cells (`same` False) alone, per trailing index (e.g. per event): what an in-group cell holds beyond its
    rater's and its rated identity's main effects. With `covariate` [n, n] (`length_term`: persona tokens ×
    experiencer tokens) the model adds β × covariate, fit on the same cells, where it is not additive there (else
    the main effects remove it already): what an in-group cell holds beyond that too. A double-centring over all
    cells mixes the other in-group cells into each (where the others close and j's does not, j's seems to close by
    1/n); this mixes in none. A ValueError with fewer than three groups, where the main effects of an in-group cell
    are not estimable from the out-group cells."""
    n = len(same)
    design, _ = _interaction_design(same, covariate)
    outside = ~np.asarray(same, dtype=bool).ravel()
    flat = I.reshape(n * n, -1)
    return (flat - design @ np.linalg.lstsq(design[outside], flat[outside], rcond=None)[0]).reshape(I.shape)


def transfer(held: np.ndarray, real: np.ndarray) -> dict[str, float | str]:
    """mean(held) / mean(real) of paired per-event values (how far each direction lowered the in-group interaction)
    with Fieller's 95% interval; NaN with the reason in ``transfer_note`` where the denominator's t-interval
    includes 0 (`TRANSFER_REFUSED`) or lies below it (`TRANSFER_RAISED`: the sentence it supports is about a lowering,
    so one side of the interval decides and a world without one passes by chance in about 0.025 of runs, not 0.05)
    or fewer than two events are kept."""
    if len(held) < 2:
        return {"transfer": math.nan, "transfer_low": math.nan, "transfer_high": math.nan,
                "transfer_note": "fewer than two events kept in every condition"}
    low, high, unbounded = fieller(held, real, 0.95)
    note = TRANSFER_REFUSED if unbounded else TRANSFER_RAISED if real.mean() < 0 else ""
    if note:
        return {"transfer": math.nan, "transfer_low": math.nan, "transfer_high": math.nan, "transfer_note": note}
    return {"transfer": float(held.mean() / real.mean()), "transfer_low": low, "transfer_high": high,
            "transfer_note": ""}


def held_out_control(rows: pd.DataFrame, tokens: Mapping[str, tuple[int, int]] | None = None) -> pd.DataFrame:
    """The held-out-identity control of the projections: per layer × category × setting × measure and identity
    group j left out of a fit, j's in-group interaction (``interaction_*``: the mean over j's in-group cells of
    `ingroup_interaction`, in rating points, with `tokens` (identity -> persona and experiencer token counts,
    `identity_tokens`) less a persona tokens × experiencer tokens term fit on the out-group cells too, which
    ``length_control`` names; one identity per group: its own cell's) unsteered, after projecting out
    the direction fit without j's cells (``L{l} project held out {j}``) and after projecting out the real direction,
    fit with them (``L{l} project``), over the events kept in every condition of the layer, and how far each
    direction lowered it (``closed_held_out``, ``closed_real``: unsteered − projected). Per layer, ``identity``
    "pooled": the means over the held-out identities, the t-intervals over events of both closings, and ``transfer``
    = pooled closed_held_out / pooled closed_real with Fieller's interval over events (`transfer`: refused where the
    real closing's interval includes 0 or lies below it). A direction that carries a feature every in-group cell
    shares lowers a held-out identity's interaction as the real one does (transfer near 1); one fit from identity-specific features
    does not (near 0). j's in-group cell read against its own row and column instead carries j's main effects,
    which any projection the rating reads shifts: that passed without a shared feature; and without the length
    term a rating that reads persona length × experiencer length passed it too (docs/BENCHMARKS.md)."""
    out = []
    held = rows[rows["held_out"].ge(0)] if "held_out" in rows else rows.iloc[:0]
    for category, setting, cat, measure, _, tensors in _measured(rows[rows["category"].isin(held["category"])]):
        groups = _group_index(cat, pd.Series(cat.identities))
        first = {j: name for name, j in reversed(list(zip(cat.identities, groups)))}
        same = cat.in_group()
        covariate = None if tokens is None else length_term(tokens, cat.identities)
        lengths = (LENGTHS_NOT_GIVEN if covariate is None
                   else LENGTHS_FIT if _interaction_design(same, covariate)[1] else LENGTHS_ADDITIVE)
        mine = held[(held["category"] == category) & (held["setting"] == setting)]
        for layer, part in mine.groupby("layer"):
            left_out = sorted(int(j) for j in part["held_out"].unique())
            conditions = ["unsteered", f"L{layer} project", *(f"L{layer} project held out {j}" for j in left_out)]
            kept = np.logical_and.reduce([stats.exclusion_mask(tensors[c]) for c in conditions])
            labels = {"layer": int(layer), "category": category, "setting": setting, "measure": measure}
            table = (_held_out_rows(tensors, conditions, left_out, kept, same, groups, first, covariate)
                     if kept.any() else pd.DataFrame([{"identity": "pooled", **transfer(np.zeros(0), np.zeros(0))}]))
            out.append(pd.DataFrame([labels] * len(table)).join(table).assign(n_events=int(kept.sum()),
                                                                                length_control=lengths))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _held_out_rows(tensors: Mapping[str, np.ndarray], conditions: Sequence[str], left_out: Sequence[int],
                   kept: np.ndarray, same: np.ndarray, groups: np.ndarray, first: Mapping[int, str],
                   covariate: np.ndarray | None) -> pd.DataFrame:
    """`held_out_control`'s rows of one layer: per held-out group j (named `first[j]`) and pooled, over the `kept`
    events; `conditions`: unsteered, the real projection, then the held-out projections in `left_out` order;
    `covariate`: the length term of `ingroup_interaction` (None: none)."""
    own = {c: ingroup_interaction(tensors[c][:, :, kept], same, covariate) for c in conditions}
    records, held_closed, real_closed = [], [], []
    for j, condition in zip(left_out, conditions[2:]):
        before, real, after = (own[c][same & (groups[:, None] == j)].mean(axis=0)
                               for c in (conditions[0], conditions[1], condition))
        held_closed.append(before - after)
        real_closed.append(before - real)
        records.append({"identity": first[j], "interaction_unsteered": before.mean(),
                        "interaction_held_out": after.mean(), "interaction_real": real.mean(),
                        "closed_held_out": held_closed[-1].mean(), "closed_real": real_closed[-1].mean()})
    frame = pd.DataFrame(records)
    pooled_held, pooled_real = np.mean(held_closed, axis=0), np.mean(real_closed, axis=0)
    pooled = {"identity": "pooled", **frame.drop(columns="identity").mean(),
              **dict(zip(("closed_held_out_low", "closed_held_out_high"), t_interval(pooled_held, 0.95))),
              **dict(zip(("closed_real_low", "closed_real_high"), t_interval(pooled_real, 0.95))),
              **transfer(pooled_held, pooled_real)}
    return pd.concat([frame, pd.DataFrame([pooled])], ignore_index=True)


def _disturbance(rows: pd.DataFrame, condition: str, measure: str) -> float:
    """Mean |rating − unsteered rating| of one condition's prompts outside the gap ("a person" as perceiver or
    experiencer), matched by cell and event: how far a steering moved ratings the gap does not contain."""
    cell = ["perceiver", "experiencer", "event_id"]
    outside = rows[(rows["perceiver"] == UNSPECIFIED) | (rows["experiencer"] == UNSPECIFIED)]
    both = outside[outside["condition"] == condition].merge(
        outside[outside["condition"] == "unsteered"], on=cell, suffixes=("", "_unsteered"))
    return float((both[measure] - both[f"{measure}_unsteered"]).abs().mean())


def random_control(rows: pd.DataFrame) -> pd.DataFrame:
    """Random directions matched on how far they disturb the ratings, measured on the real gap: per layer × category
    × setting × measure, the real projection (``L{l} project``) and each random direction's (``L{l} project random
    k``) `disturbance` (mean |change| of the ratings of prompts outside the gap, "a person" on either side, from the
    unsteered rerun) and how far the real in-group gap moved toward 0 (``closed_points`` = −sign(unsteered gap) × its
    change, paired by event, `stats.gap_change`); ``matched``: a random direction that disturbed those ratings at
    least as much as the real one; p_matched = (1 + #{matched with closed_points >= the real one's}) / (1 +
    #matched), floor p_floor (NaN without a matched direction: none disturbed the ratings as much, so the control
    cannot tell a specific effect from a disruption of that size). A projection that closes the gap only by
    disturbing the ratings is matched by random directions of the same disturbance."""
    out = []
    projected = rows[rows["project"].astype(bool) & rows["matching"].lt(0) & rows["held_out"].lt(0)]
    for category, setting, cat, measure, block, tensors in _measured(rows):
        same = cat.in_group()
        mine = projected[(projected["category"] == category) & (projected["setting"] == setting)]
        sign = -1.0 if _gap(tensors["unsteered"], same) < 0 else 1.0
        for layer, part in mine.groupby("layer", sort=False):
            real = part.loc[part["random"].eq(0), "condition"].unique()
            random = part.loc[part["random"].gt(0), "condition"].unique()
            if not len(real) or not len(random):
                continue
            frame = pd.DataFrame([{
                "condition": name, "layer": int(layer), "category": category, "setting": setting,
                "measure": measure, "random": k, "disturbance": _disturbance(block, name, measure),
                "closed_points": -sign * stats.gap_change(tensors["unsteered"], tensors[name], same)[0]}
                for k, name in enumerate([real[0], *random])])
            moved = frame["disturbance"].iloc[0]
            frame["matched"] = [None, *(frame["disturbance"].iloc[1:] >= moved)]
            matched = frame.loc[frame["matched"].eq(True), "closed_points"].to_numpy(dtype=float)
            exceed = int(stats.at_least(matched, float(frame["closed_points"].iloc[0])).sum())
            frame["n_matched"] = len(matched)
            frame["p_matched"] = (1 + exceed) / (1 + len(matched)) if len(matched) else math.nan
            frame["p_floor"] = 1 / (1 + len(matched))
            out.append(frame)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def dose_response(rows: pd.DataFrame) -> pd.DataFrame:
    """How the gap moves with the coefficient when one side alone is steered (the one-sided steerings of
    `interp.steering.one_sided`): per layer × category × setting × measure × side, the coefficients by size, the mean
    change of the gap in rating points from the unsteered rerun at each, and the slope of that change on the
    coefficient (least squares through 0 fit per event over the events kept in every condition, with the
    t-interval of the per-event slopes); ``monotone``: with two or more coefficients, whether the mean change grows
    in size with |coef| and keeps its sign."""
    out = []
    lone = rows[rows["one_sided"].astype(bool)] if "one_sided" in rows else rows.iloc[:0]
    for category, setting, cat, measure, _, tensors in _measured(rows[rows["category"].isin(lone["category"])]):
        same = cat.in_group()
        mine = lone[(lone["category"] == category) & (lone["setting"] == setting)]
        for (layer, positive), part in mine.groupby([mine["layer"], mine["coef"].gt(0)], sort=False):
            steerings = part.drop_duplicates("condition").sort_values("coef", key=np.abs)
            coefs = steerings["coef"].to_numpy(dtype=float)
            kept = stats.exclusion_mask(tensors["unsteered"])
            for name in steerings["condition"]:
                kept &= stats.exclusion_mask(tensors[name])
            if not kept.any():
                continue
            before = stats.event_gaps(tensors["unsteered"][:, :, kept], same)[2]
            changes = np.stack([stats.event_gaps(tensors[name][:, :, kept], same)[2] - before
                                for name in steerings["condition"]])  # [coefficients, events]
            slopes = coefs @ changes / (coefs @ coefs)
            means = changes.mean(axis=1)
            monotone = (len(coefs) > 1 and bool(np.all(np.sign(means) == np.sign(means[0])))
                        and bool(np.all(np.diff(np.abs(means)) > 0)))
            out.append({"layer": int(layer), "category": category, "setting": setting, "measure": measure,
                        "side": f"{SIDES[1] if positive else SIDES[0]} only",
                        "coefs": " ".join(f"{c:+g}" for c in coefs),
                        "gap_change_by_coef": " ".join(f"{m:+.3g}" for m in means),
                        "slope": float(slopes.mean()), **dict(zip(("slope_low", "slope_high"),
                                                                  t_interval(slopes, 0.95))),
                        "n_coefs": len(coefs), "n_events": int(kept.sum()), "monotone": monotone})
    return pd.DataFrame(out)


@styled
def sweep_figure(summary: pd.DataFrame, category: str, setting: str) -> Figure:
    """δ vs coefficient per layer (projection at the right), beside the refusal rate, the non-numeric mass and the
    mean rating, two panels to a row, the title carrying the events; a layer without a
    coefficient-0 run takes the unsteered point there (see interp.steering.sweep_conditions), and an undefined δ is
    a triangle at the foot of its panel."""
    part = summary[(summary["category"] == category) & (summary["setting"] == setting)]
    measures = list(dict.fromkeys(part["measure"]))
    panels = [("delta", "δ (in-group − out-group, z)"), ("refusal_rate", "refusal rate"),
              ("non_numeric_mass", "non-numeric mass (1 − P(number))"), ("mean_rating", "mean rating M⁰")]
    fig = new_figure(2, 2.0 * 2 * len(measures) + 0.9)
    axes = fig.subplots(2 * len(measures), 2, squeeze=False).reshape(len(measures), len(panels))
    steered = part[part["layer"] >= 0]
    coefs = sorted(steered.loc[~steered["project"].astype(bool), "coef"].dropna().unique())
    span = (max(coefs) - min(coefs)) if len(coefs) > 1 else 1.0
    x_project = (max(coefs) if coefs else 0.0) + 0.35 * span
    colors = {layer: PALETTE[i % len(PALETTE)] for i, layer in enumerate(sorted(steered["layer"].unique()))}
    for i, measure in enumerate(measures):
        rows = part[part["measure"] == measure]
        base = rows[rows["layer"] < 0]
        for j, (column, title) in enumerate(panels):
            ax = axes[i, j]
            marked = drawn = shown = False
            if len(base) and np.isfinite(base[column].iloc[0]):
                ax.axhline(base[column].iloc[0], color="black", linestyle="--", linewidth=0.8, label="unsteered")
            if column == "delta" and len(base) and np.isfinite(base["ci_low"].iloc[0]):
                ax.axhspan(base["ci_low"].iloc[0], base["ci_high"].iloc[0], color="0.85", label="null 95% (unsteered)")
            for layer, sub in rows[rows["layer"] >= 0].groupby("layer"):
                random = sub["random"].astype(int) > 0
                wrong = sub["matching"].astype(int) >= 0 if "matching" in sub else random & False
                lone = sub["one_sided"].astype(bool) if "one_sided" in sub else random & False
                held = sub["held_out"].astype(int) >= 0 if "held_out" in sub else random & False  # own table
                added = sub[~sub["project"] & ~lone]
                if len(base) and not (added["coef"] == 0).any():
                    added = pd.concat([added, base.assign(coef=0.0)])  # coefficient 0 is the unsteered run
                added = added.sort_values("coef")
                ax.plot(added["coef"], added[column], marker="o", markersize=3, color=colors[layer],
                        label=f"layer {layer}")
                undefined = added.loc[~np.isfinite(added[column]), "coef"]
                if column == "delta" and len(undefined):  # e.g. every cell the same greedy answer
                    ax.scatter(undefined, [0.04] * len(undefined), marker="v", s=20, color=colors[layer],
                               transform=ax.get_xaxis_transform(), clip_on=False,
                               label=None if marked else "δ undefined (all cells equal)")
                    marked = True
                projected = sub[sub["project"] & ~random & ~wrong & ~held]
                if len(projected):
                    ax.scatter([x_project] * len(projected), projected[column], marker="x", s=30, color=colors[layer])
                matchings = sub[sub["project"] & wrong]
                if len(matchings):
                    ax.scatter([x_project] * len(matchings), matchings[column], marker=".", s=10, color=GREY,
                               label=None if shown else "projections of wrong matchings")
                    shown = True
                control = sub[sub["project"] & random]
                if len(control):
                    ax.scatter([x_project] * len(control), control[column], marker="o", s=30, facecolors="none",
                               edgecolors=colors[layer], label=None if drawn else "projection of a random direction")
                    drawn = True
            if (steered["project"]).any():
                ticks = list(coefs) + [x_project]
                ax.set_xticks(ticks, [f"{c:g}" for c in coefs] + ["proj."])
            if column == "delta" and not np.isfinite(rows["delta"]).any():
                note = next((n for n in rows["note"] if n), "undefined")
                ax.text(0.5, 0.5, "δ n/a:\n" + note[:120], ha="center", va="center", wrap=True,
                        transform=ax.transAxes)
            ax.set_xlabel("coefficient")
            ax.set_title(f"{title}, {measure}" if len(measures) > 1 else title)
            if j == 0 and (i == 0 or marked or drawn or shown):
                ax.legend(fontsize=LABEL_SIZE)
    fig.suptitle(f"Steering along the in-group direction: {category} {setting}\n"
                 f"{n_text(events=count_range(part['n_events']))}")
    return fig


def figures(summary: pd.DataFrame) -> list[tuple[str, str, Figure]]:
    """(name, title, figure) of `sweep_figure` for each category × setting of the summary."""
    blocks = summary[list(BLOCK)].drop_duplicates().itertuples(index=False)
    return [(f"steering_{c}_{s}", f"δ and the rates under steering, {c} {s}", sweep_figure(summary, c, s))
            for c, s in blocks]
