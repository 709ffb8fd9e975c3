"""A finished scm run as a long frame of model ratings: one row per sample (generate) or per template (score)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from behavioral.run_reader import read_run
from behavioral.store import read_manifest
from behavioral.suites.scm.answers import parse_reply
from behavioral.suites.scm.fidelity import P_COLUMNS
from behavioral.suites.scm.order import in_order

MEASURES = ("samples", "score")


def run_facts(run: str | Path) -> dict:
    """The facts of a run the analysis needs: suite, model, mode, group set."""
    config = read_manifest(run)["config"]
    if config["suite"] != "scm":
        raise ValueError(f"{run}: a run of suite {config['suite']!r}; expected an scm run")
    return {"model": config["model"], "mode": config["mode"], "group_set": (config.get("options") or {}).get(
        "groups", "seed")}


def measure_of(mode: str, measure: str | None, run: str | Path) -> str:
    """What a run of `mode` is read by: its own mode, or `measure` (default samples) for a `both` run."""
    if measure is not None and measure not in MEASURES:
        raise ValueError(f"unknown --measure {measure!r}; expected one of {', '.join(MEASURES)}")
    own = {"generate": "samples", "score": "score"}.get(mode)
    if own is not None and measure not in (None, own):
        raise ValueError(f"{run}: a --mode {mode} run has no {measure} measure; expected --measure {own} or none")
    return own or measure or "samples"


def load_model(run: str | Path, measure: str | None = None, allow_partial: bool = False) -> pd.DataFrame:
    """Model ratings of `run`, long: group, trait, rater, rating, template, in the suite's order (whatever order the
    run's parts hold their rows in). Samples: rater `{template}/{sample}`,
    rating 1-5 or NaN where the reply was `unparsed` or `ambiguous` (column `status`). Score: rater the template,
    rating the expected value, p1..p5 (renormalised over A-E) and `answer_mass` (the raw mass A-E hold). A partial
    run is refused unless `allow_partial`; `attrs["completeness"]` says how much of its plan it holds."""
    facts = run_facts(run)
    measure = measure_of(facts["mode"], measure, run)
    _, rows, done = read_run(run, "scm", allow_partial)
    frame = pd.DataFrame({"group": rows.group, "trait": rows.trait, "template": rows.template})
    if measure == "samples":
        frame["rater"] = rows.template + "/" + rows["sample"].astype(str)
        frame["rating"] = rows.value.astype(float)
        frame["status"] = [a if isinstance(a, str) else parse_reply(r) for a, r in zip(rows.answer, rows.response)]
    else:
        frame = frame[rows["sample"].to_numpy() == 0].copy()
        scored = rows[rows["sample"] == 0]
        probs = np.array(scored.probs.tolist(), dtype=float)[:, ::-1]  # A..E are 5..1
        frame["rater"] = scored.template
        frame["rating"] = scored.expected.astype(float)
        for k, column in enumerate(P_COLUMNS):
            frame[column] = probs[:, k]
        frame["answer_mass"] = scored.valid_mass.astype(float)
    frame = frame[["group", "trait", "rater", "rating", *[c for c in frame.columns
                                                          if c not in ("group", "trait", "rater", "rating")]]]
    frame = in_order(frame, ("group", "trait", "template", "rater"))
    frame.attrs = facts | {"measure": measure, "run": str(Path(run).resolve()), "completeness": done.describe()}
    return frame
