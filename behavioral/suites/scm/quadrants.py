"""Stereotype quadrants (Fig. 1-3): a group's warmth and competence scores, high where strictly above the mean over
groups of the same source, named as the stereotype content model does; agreement of a model with humans, on the
(group, trait) cells both rate."""

from __future__ import annotations

import pandas as pd

from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.order import in_order
from behavioral.suites.scm.traits import COMPETENCE, DIMENSIONS, TRAITS, WARMTH

ALL_TRAITS = "all traits"  # the cells of a source's own quadrants: every trait it rated
NAMES = {(True, True): "admiration", (False, False): "contempt", (False, True): "envy", (True, False): "pity"}
_GROUP = {g.name: g for members in GROUPS.values() for g in members}


def _rated(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of `df` that hold a rating."""
    return df.dropna(subset=["rating"])


def dimension_gap(df: pd.DataFrame) -> str | None:
    """What keeps `df` from having quadrants ("no competence rating (traits warm, fair)"), or None where both
    dimensions have a rated trait."""
    rated = set(_rated(df).trait)
    traits = [t for t in TRAITS if t in rated]
    missing = [d for d in DIMENSIONS if d not in {TRAITS[t] for t in traits}]
    if not missing:
        return None
    return f"no {' or '.join(missing)} rating ({'traits ' + ', '.join(traits) if traits else 'no trait rated'})"


def _high(score: pd.Series) -> pd.Series:
    """Whether each score is strictly above the mean of the known scores; missing where the score is."""
    return (score > score.mean()).astype("boolean").mask(score.isna())


def scores(df: pd.DataFrame) -> pd.DataFrame:
    """Per rated group (in order of appearance): warmth and competence, each the mean of the group's cell means over
    the dimension's traits (ratings, or expected values of a score-mode frame); NaN where it has no rating of one."""
    cells = _rated(df).groupby(["group", "trait"], sort=False).rating.mean().reset_index()
    cells["dimension"] = cells.trait.map(TRAITS)
    means = cells.pivot_table(index="group", columns="dimension", values="rating", aggfunc="mean", sort=False)
    means = means.reindex(columns=[WARMTH, COMPETENCE])
    return pd.DataFrame({"group": means.index.to_numpy(), "warmth": means[WARMTH].to_numpy(dtype=float),
                         "competence": means[COMPETENCE].to_numpy(dtype=float)})


def quadrants(df: pd.DataFrame) -> pd.DataFrame:
    """Per group (the suite's order): warmth and competence (scores), high_warmth, high_competence, quadrant,
    gender, privileged. A group without a rating on one dimension has no quadrant (missing, never low); a frame
    without a rating on one dimension is a ValueError."""
    gap = dimension_gap(df)
    if gap is not None:
        raise ValueError(f"quadrants need warmth and competence ratings; {gap}")
    out = scores(df)
    out["high_warmth"] = _high(out.warmth)
    out["high_competence"] = _high(out.competence)
    known = out.high_warmth.notna() & out.high_competence.notna()
    out["quadrant"] = [NAMES[bool(w), bool(c)] if k else None
                       for w, c, k in zip(out.high_warmth, out.high_competence, known)]
    out["gender"] = out.group.map(lambda g: _GROUP[g].gender)
    out["privileged"] = out.group.map(lambda g: _GROUP[g].privileged)
    return in_order(out, ("group",))


def shared_cells(human: pd.DataFrame, model: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of `human` and of `model` on the (group, trait) cells both hold a rating of."""
    keys = ["group", "trait"]
    both = _rated(human)[keys].drop_duplicates().merge(_rated(model)[keys].drop_duplicates())
    return human.merge(both, on=keys), model.merge(both, on=keys)


def describe_cells(df: pd.DataFrame) -> dict:
    """The rated cells of `df`: the number of groups and cells, and the traits of each dimension (Table 2's order)."""
    rated = _rated(df)[["group", "trait"]].drop_duplicates()
    traits = set(rated.trait)
    return {"groups": rated.group.nunique(), "cells": len(rated),
            **{d: [t for t in TRAITS if TRAITS[t] == d and t in traits] for d in DIMENSIONS}}


def agreement(human: pd.DataFrame, model: pd.DataFrame) -> pd.DataFrame:
    """Per group both quadrant frames give a quadrant: the human and model quadrants and whether they agree."""
    merged = human[["group", "gender", "privileged", "quadrant"]].merge(
        model[["group", "quadrant"]], on="group", suffixes=("_human", "_model"))
    merged = merged.dropna(subset=["quadrant_human", "quadrant_model"]).reset_index(drop=True)
    merged["agrees"] = merged.quadrant_human == merged.quadrant_model
    return merged


def agreement_rates(agreements: pd.DataFrame) -> pd.DataFrame:
    """Agreement rate by gender and by privilege (Fig. 3), averaged over the runs of a frame of agreement() rows
    with a `run` column: by, level, rate."""
    rows = []
    for by in ("gender", "privileged"):
        per_run = agreements.groupby(["run", by]).agrees.mean()
        for level, rate in per_run.groupby(level=1).mean().items():
            name = ("privileged" if level else "disadvantaged") if by == "privileged" else level
            rows.append({"by": "privilege" if by == "privileged" else by, "level": name, "rate": float(rate)})
    return pd.DataFrame(rows, columns=["by", "level", "rate"])
