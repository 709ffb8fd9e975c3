"""What a steering study computes from its reruns, for any suite whose protocol gives them as blocks of labelled
cells (intergroup: persona × experiencer cells of one category, setting and measure): the measures per steering
with the gap's change paired by event, and the controls of a projection (wrong matchings of the identities, random
directions of the same disturbance) and of one-sided steering (dose-response). The held-out-identity control is
`interp.steering.held_out`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from behavioral.analysis import cell_gap
from behavioral.analysis.paired import t_interval
from interp.matchings import matched, overlap

UNSTEERED = "unsteered"  # the condition every change is taken from (interp.steering.sweep_conditions)
GAP = ("gap_points", "gap_low", "gap_high")  # the suite's measures begin with the gap in points and its interval


@dataclass(frozen=True)
class Block:
    """One block of a steering's reruns as the controls read it: its labels (the selection's fields and the
    measure), the identities of its cells in order with their group indices and in-group relation, the measure as
    I [n, n, events] per condition (the named cells only, over the events of every condition, sorted), the block's
    result rows and its rows outside the gap (``condition``, ``value`` and the columns that pair a prompt across
    conditions)."""

    labels: Mapping[str, str]
    names: tuple[str, ...]
    groups: np.ndarray
    same: np.ndarray
    tensors: Mapping[str, np.ndarray]
    rows: pd.DataFrame
    outside: pd.DataFrame
    event_ids: tuple[str, ...]


class Measures(Protocol):
    """The part of a suite's steering protocol the summary reads (intergroup: its steering module)."""

    CHANGED: tuple[str, ...]  # the suite's columns whose change from the unsteered rerun the summary adds

    def measures(self, block: Block, condition: str, n_permutations: int, seed: int) -> Mapping[str, object]:
        """The suite's own columns of one condition of a block: the gap in rating points with its interval over
        events (GAP) among them (intergroup: beside δ with its null, the rates and the events)."""


def m0(I: np.ndarray) -> np.ndarray | None:
    """M⁰ of I [n, n, events] over the events no cell refused; None where no event is kept."""
    try:
        return cell_gap.cell_means(I, cell_gap.exclusion_mask(I))
    except ValueError:
        return None


def raw_gap(I: np.ndarray, same: np.ndarray, within: np.ndarray | bool = True) -> float:
    """The raw gap of I [n, n, events]: mean in-group cell minus mean out-group cell of M⁰ (among the cells `within`,
    e.g. one identity's), in rating points; NaN where no event is kept."""
    M0 = m0(I)
    return math.nan if M0 is None else float(M0[same & within].mean() - M0[~same & within].mean())


def _steering(first: pd.Series) -> dict:
    """The steering of a condition as its first result row records it (interp.steering.run_conditions)."""
    return {"condition": first["condition"], "layer": int(first["layer"]), "coef": float(first["coef"]),
            "project": bool(first["project"]), "random": int(first["random"]), "matching": int(first["matching"]),
            "held_out": int(first.get("held_out", -1)), "one_sided": bool(first.get("one_sided", False))}


def summarize(blocks: Iterable[Block], protocol: Measures, n_permutations: int = 10_000,
              seed: int = 0) -> pd.DataFrame:
    """Per block and condition (blocks in the order given, conditions in the order the rows first name them): the
    steering, the block's labels, the suite's gap in points with its interval (GAP), the gap's change from the
    unsteered rerun in rating points with the t-interval of the per-event changes (`cell_gap.gap_change`, paired by
    event), σ of M⁰ (the scale a z-scored measure divides by, re-estimated per condition), then the suite's other
    measures (`protocol.measures`); ``{c}_change`` subtracts the unsteered condition's value of each column c of
    `protocol.CHANGED`."""
    out, keys = [], []
    for block in blocks:
        keys = list(block.labels)
        for condition, sub in block.rows.groupby("condition", sort=False):
            change = (cell_gap.gap_change(block.tensors[UNSTEERED], block.tensors[condition], block.same)
                      if UNSTEERED in block.tensors else (math.nan, math.nan, math.nan))
            M0 = m0(block.tensors[condition])
            own = dict(protocol.measures(block, condition, n_permutations, seed))
            out.append({**_steering(sub.iloc[0]), **block.labels, **{k: own.pop(k) for k in GAP},
                        "gap_points_change": change[0], "gap_change_low": change[1], "gap_change_high": change[2],
                        "sigma_M0": math.nan if M0 is None else float(M0.std()), **own})
    table = pd.DataFrame(out)
    changed = list(protocol.CHANGED)
    base = table.loc[table["condition"] == UNSTEERED, keys + changed]
    reference = table[keys].merge(base, on=keys, how="left")
    for column in changed:
        table[f"{column}_change"] = table[column].to_numpy(dtype=float) - reference[column].to_numpy(dtype=float)
    return table


def _grid(block: Block, matching: np.ndarray | None) -> np.ndarray:
    """[n, n] bool: the block's cells in-group under `matching` of its groups (None: the real one)."""
    n = len(block.groups)
    return matched(np.repeat(block.groups, n), np.tile(block.groups, n), matching).reshape(n, n)


def matching_control(blocks: Iterable[Block], matchings: np.ndarray) -> pd.DataFrame:
    """The permuted-matching control of the projections: per block and layer, for the real matching and each wrong
    one (`matchings` [m, groups], interp.matchings), the gap of cells in-group under that matching before and after
    projecting out that matching's own direction (``L{l} project`` and ``L{l} project matching {i}``), how far it
    moved toward 0 (``closed_points`` = sign(before) × (before − after), in rating points, past 0 counting;
    sign-aligned since a wrong matching's gap may have either sign) with the t-interval of the per-event values for
    the real one (paired by event, `cell_gap.gap_change`), and how close to 0 it came (``closed_share`` = 1 − |after|
    / |before|); the real matching's rank among all by the share each closes of its own gap and p =
    (1 + #{wrong share >= real share}) / (m + 1), floor 1 / (m + 1), exact where `matchings` holds every wrong
    matching. Ranked by points the real matching wins by construction (a wrong matching's own gap is a fraction of
    the real one); by share, a projection that closes "its" gap for any labelling of the cells ranks the real one
    among the rest. A wrong matching's direction is (fixed points − 1) / (n − 1) times the real one where a
    shared feature exists, so this control cannot tell a shared in-group feature from per-identity ones: the
    held-out-identity control (`interp.steering.held_out`) can."""
    out = []
    for block in blocks:
        tensors, rows = block.tensors, block.rows
        projected = rows[rows["project"].astype(bool) & rows["random"].eq(0)]
        for layer in sorted(projected["layer"].unique()):
            entries = [(None, f"L{layer} project")] + [(i, f"L{layer} project matching {i}")
                                                     for i in range(len(matchings))]
            records = []
            for index, condition in entries:
                if condition not in tensors:
                    continue
                matching = None if index is None else matchings[index]
                same = _grid(block, matching)
                before, after = raw_gap(tensors[UNSTEERED], same), raw_gap(tensors[condition], same)
                sign = -1.0 if before < 0 else 1.0
                low = high = math.nan
                if index is None:  # closed = -sign × change, so its interval's ends swap where sign is +
                    _, change_low, change_high = cell_gap.gap_change(tensors[UNSTEERED], tensors[condition], same)
                    low, high = sorted((-sign * change_low, -sign * change_high))
                records.append({
                    "layer": int(layer), **block.labels,
                    "matching": "real" if index is None else str(index),
                    "pairs": "identity" if index is None else " ".join(map(str, matching)),
                    "fixed_points": len(np.unique(block.groups)) if index is None else overlap(matching),
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
                exceed = int(cell_gap.at_least(wrong, removed).sum())
                frame["p_real"] = (1 + exceed) / (len(wrong) + 1)
                frame["p_floor"] = 1 / (len(wrong) + 1)
                frame["rank_real"] = 1 + int((wrong > removed).sum())
            out.append(frame)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def disturbance(block: Block, condition: str) -> float:
    """Mean |value − unsteered value| of one condition's prompts outside the gap (intergroup: "a person" as perceiver
    or experiencer), paired by the columns of `block.outside` that identify a prompt: how far a steering moved
    ratings the gap does not contain."""
    outside = block.outside
    pair = [c for c in outside.columns if c not in ("condition", "value")]
    both = outside[outside["condition"] == condition].merge(
        outside[outside["condition"] == UNSTEERED], on=pair, suffixes=("", "_unsteered"))
    return float((both["value"] - both["value_unsteered"]).abs().mean())


def random_control(blocks: Iterable[Block]) -> pd.DataFrame:
    """Random directions matched on how far they disturb the ratings, measured on the real gap: per block and layer,
    the real projection (``L{l} project``) and each random direction's (``L{l} project random k``) `disturbance`
    (mean |change| of the ratings of prompts outside the gap, from the unsteered rerun) and how far the real
    in-group gap moved toward 0 (``closed_points`` = −sign(unsteered gap) × its change, paired by event,
    `cell_gap.gap_change`); ``matched``: a random direction that disturbed those ratings at least as much as the
    real one; p_matched = (1 + #{matched with closed_points >= the real one's}) / (1 + #matched), floor p_floor
    (NaN without a matched direction: none disturbed the ratings as much, so the control cannot tell a specific
    effect from a disruption of that size). A projection that closes the gap only by disturbing the ratings is
    matched by random directions of the same disturbance."""
    out = []
    for block in blocks:
        rows, tensors, same = block.rows, block.tensors, block.same
        projected = rows[rows["project"].astype(bool) & rows["matching"].lt(0) & rows["held_out"].lt(0)]
        sign = -1.0 if raw_gap(tensors[UNSTEERED], same) < 0 else 1.0
        for layer, part in projected.groupby("layer", sort=False):
            real = part.loc[part["random"].eq(0), "condition"].unique()
            random = part.loc[part["random"].gt(0), "condition"].unique()
            if not len(real) or not len(random):
                continue
            frame = pd.DataFrame([{
                "condition": name, "layer": int(layer), **block.labels, "random": k,
                "disturbance": disturbance(block, name),
                "closed_points": -sign * cell_gap.gap_change(tensors[UNSTEERED], tensors[name], same)[0]}
                for k, name in enumerate([real[0], *random])])
            moved = frame["disturbance"].iloc[0]
            frame["matched"] = [None, *(frame["disturbance"].iloc[1:] >= moved)]
            matched_closed = frame.loc[frame["matched"].eq(True), "closed_points"].to_numpy(dtype=float)
            exceed = int(cell_gap.at_least(matched_closed, float(frame["closed_points"].iloc[0])).sum())
            frame["n_matched"] = len(matched_closed)
            frame["p_matched"] = (1 + exceed) / (1 + len(matched_closed)) if len(matched_closed) else math.nan
            frame["p_floor"] = 1 / (1 + len(matched_closed))
            out.append(frame)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def dose_response(blocks: Iterable[Block], sides: Sequence[str]) -> pd.DataFrame:
    """How the gap moves with the coefficient when one side alone is steered (the one-sided steerings of
    `interp.steering.one_sided`; `sides`: what the label's true and false cells are called): per block, layer and
    side, the coefficients by size, the mean change of the gap in rating points from the unsteered rerun at each,
    and the slope of that change on the coefficient (least squares through 0 fit per event over the events kept in
    every condition, with the t-interval of the per-event slopes); ``monotone``: with two or more coefficients,
    whether the mean change grows in size with |coef| and keeps its sign."""
    out = []
    for block in blocks:
        rows, tensors, same = block.rows, block.tensors, block.same
        lone = rows[rows["one_sided"].astype(bool)] if "one_sided" in rows else rows.iloc[:0]
        for (layer, positive), part in lone.groupby([lone["layer"], lone["coef"].gt(0)], sort=False):
            steerings = part.drop_duplicates("condition").sort_values("coef", key=np.abs)
            coefs = steerings["coef"].to_numpy(dtype=float)
            kept = cell_gap.exclusion_mask(tensors[UNSTEERED])
            for name in steerings["condition"]:
                kept &= cell_gap.exclusion_mask(tensors[name])
            if not kept.any():
                continue
            before = cell_gap.event_gaps(tensors[UNSTEERED][:, :, kept], same)[2]
            changes = np.stack([cell_gap.event_gaps(tensors[name][:, :, kept], same)[2] - before
                                for name in steerings["condition"]])  # [coefficients, events]
            slopes = coefs @ changes / (coefs @ coefs)
            means = changes.mean(axis=1)
            monotone = (len(coefs) > 1 and bool(np.all(np.sign(means) == np.sign(means[0])))
                        and bool(np.all(np.diff(np.abs(means)) > 0)))
            out.append({"layer": int(layer), **block.labels,
                        "side": f"{sides[1] if positive else sides[0]} only",
                        "coefs": " ".join(f"{c:+g}" for c in coefs),
                        "gap_change_by_coef": " ".join(f"{m:+.3g}" for m in means),
                        "slope": float(slopes.mean()), **dict(zip(("slope_low", "slope_high"),
                                                                  t_interval(slopes, 0.95))),
                        "n_coefs": len(coefs), "n_events": int(kept.sum()), "monotone": monotone})
    return pd.DataFrame(out)
