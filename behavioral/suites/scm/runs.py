"""How the analysis reads an scm run: its stored rows as one tidy frame (view), and from it the ratings of the
measure the run is read by (samples or score), long, as the metrics take them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from behavioral.suites.scm.answers import parse_reply
from behavioral.suites.scm.fidelity import P_COLUMNS
from behavioral.suites.scm.order import in_order

MEASURES = ("samples", "score")
_OWN = {"generate": "samples", "score": "score"}  # the measure of a run that holds only one


def view(rows: pd.DataFrame, config: dict) -> pd.DataFrame:
    """One row per stored row, in the suite's order: group, trait, template, sample; from a generated reply
    (generate, both) `status` (A-E, `unparsed` or `ambiguous`) and `rating` (1-5, NaN unless parsed); from the
    answer-set scores (score, both) p1..p5 (renormalised over A-E; p5 is A), `expected_rating` (their expected value
    on 1..5) and `answer_mass` (the raw mass A-E hold). Missing where the run did not make that kind."""
    frame = pd.DataFrame({"group": rows.group, "trait": rows.trait, "template": rows.template,
                          "sample": rows["sample"]})
    replied = rows.response.notna()
    frame["status"] = [(a if isinstance(a, str) else parse_reply(r)) if has else None
                       for a, r, has in zip(rows.answer, rows.response, replied)]
    frame["rating"] = rows.value.astype(float).where(replied)
    scored = rows.valid_mass.notna().to_numpy()
    probs = np.full((len(rows), len(P_COLUMNS)), np.nan)
    if scored.any():
        probs[scored] = np.array(rows.probs.to_numpy()[scored].tolist(), dtype=float)[:, ::-1]  # A..E are 5..1
    for k, column in enumerate(P_COLUMNS):
        frame[column] = probs[:, k]
    frame["expected_rating"] = rows.expected.astype(float)
    frame["answer_mass"] = rows.valid_mass.astype(float)
    return in_order(frame, ("group", "trait", "template", "sample"))


def measure_of(mode: str, measure: str | None, run_dir: str | Path) -> str:
    """What a run of `mode` is read by: its own measure, or `measure` (default samples) for a `both` run; a measure
    the run does not hold is a ValueError naming it."""
    own = _OWN.get(mode)
    if own is not None and measure not in (None, own):
        raise ValueError(f"{run_dir}: a --mode {mode} run has no {measure} measure; expected --measure {own} or none")
    return own or measure or "samples"


def ratings(frame: pd.DataFrame, measure: str) -> pd.DataFrame:
    """A view's ratings by `measure`, long: group, trait, rater, rating, template. Samples: one row per reply, rater
    `{template}/{sample}`, rating 1-5 or NaN, and `status`. Score: one row per template, rater the template, rating
    the expected rating, with p1..p5 and `answer_mass`."""
    if measure == "samples":
        out = frame.assign(rater=frame.template + "/" + frame["sample"].astype(str))
        return out[["group", "trait", "rater", "rating", "template", "status"]].reset_index(drop=True)
    out = frame[frame["sample"] == 0]
    out = out.assign(rater=out.template, rating=out.expected_rating)
    return out[["group", "trait", "rater", "rating", "template", *P_COLUMNS, "answer_mass"]].reset_index(drop=True)
