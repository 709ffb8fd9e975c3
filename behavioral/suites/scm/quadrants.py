"""Stereotype quadrants (Fig. 1-3): a group's warmth and competence scores, high where strictly above the mean over
groups of the same source, named as the stereotype content model does; agreement of a model with humans."""

from __future__ import annotations

import pandas as pd

from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.traits import COMPETENCE, TRAITS, WARMTH

NAMES = {(True, True): "admiration", (False, False): "contempt", (False, True): "envy", (True, False): "pity"}
_GROUP = {g.name: g for members in GROUPS.values() for g in members}


def quadrants(df: pd.DataFrame) -> pd.DataFrame:
    """Per group (first appearance order): warmth and competence (the mean of the group's cell means over the
    dimension's traits; ratings, or expected values of a score-mode frame), high_warmth, high_competence,
    quadrant, gender, privileged."""
    cells = df.dropna(subset=["rating"]).groupby(["group", "trait"], sort=False).rating.mean().reset_index()
    cells["dimension"] = cells.trait.map(TRAITS)
    scores = cells.pivot_table(index="group", columns="dimension", values="rating", aggfunc="mean", sort=False)
    scores = scores.reindex(columns=[WARMTH, COMPETENCE])
    out = pd.DataFrame({"group": scores.index, "warmth": scores[WARMTH].to_numpy(),
                        "competence": scores[COMPETENCE].to_numpy()})
    out["high_warmth"] = out.warmth > out.warmth.mean()
    out["high_competence"] = out.competence > out.competence.mean()
    out["quadrant"] = [NAMES[w, c] for w, c in zip(out.high_warmth, out.high_competence)]
    out["gender"] = out.group.map(lambda g: _GROUP[g].gender)
    out["privileged"] = out.group.map(lambda g: _GROUP[g].privileged)
    return out.reset_index(drop=True)


def agreement(human: pd.DataFrame, model: pd.DataFrame) -> pd.DataFrame:
    """Per group both quadrant frames hold: the human and model quadrants and whether they agree."""
    merged = human[["group", "gender", "privileged", "quadrant"]].merge(
        model[["group", "quadrant"]], on="group", suffixes=("_human", "_model"))
    merged["agrees"] = merged.quadrant_human == merged.quadrant_model
    return merged


def agreement_rates(agreements: pd.DataFrame) -> pd.DataFrame:
    """Agreement rate by gender and by privilege (Fig. 3), averaged over the models of a frame of agreement() rows
    with a `model` column: by, level, rate."""
    rows = []
    for by in ("gender", "privileged"):
        per_model = agreements.groupby(["model", by]).agrees.mean()
        for level, rate in per_model.groupby(level=1).mean().items():
            name = ("privileged" if level else "disadvantaged") if by == "privileged" else level
            rows.append({"by": "privilege" if by == "privileged" else by, "level": name, "rate": float(rate)})
    return pd.DataFrame(rows, columns=["by", "level", "rate"])
