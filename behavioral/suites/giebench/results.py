"""A GIEBench run's rows as its analysis reads them (the suite's view): one row per mode, item and prompt, with the
selected letter, whether it is correct and the four letters' probabilities (`item_id` is the question's id)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from behavioral.suites.giebench.prompts import LETTERS

COLUMNS = ["mode", "item_id", "prompt_type", "category", "identity", "swap_to", "correct", "response",
           "answer_select", "is_correct", "argmax_letter", "letter_mass", *(f"p_{x}" for x in LETTERS)]


def argmax_letter(probs: np.ndarray) -> np.ndarray:
    """The most probable letter of each row of p_A..p_D (ties: the earliest); None where a row has no probabilities."""
    best = np.array(LETTERS, dtype=object)[np.nan_to_num(probs, nan=-1).argmax(axis=1)]
    return np.where(np.isnan(probs).all(axis=1), None, best)


def measure_name(mode: str, config: dict) -> str:
    """The answer a row of `mode` reads, as tables name it: the verdict of the greedy or sampled generated reply (of
    the authors' replies in an imported run), or the argmax of the scored distribution after `[[`."""
    if mode == "score":
        return "argmax of the scored distribution"
    if config.get("imported_from"):
        return "authors' generated verdict"
    return "sampled reply's verdict" if config.get("temperature") else "greedy generated verdict"


def view(rows: pd.DataFrame, config: dict) -> pd.DataFrame:
    """Stored rows (`config`: the run's manifest config) as COLUMNS: the one rule for `answer_select`. A generate row
    selects eval.py's letter (`answer`; None where no verdict), a score row `argmax_letter`, the most probable letter
    after `[[`; a `both` run gives a row of each mode per prompt. The stored `score_answer` (the greedy in-set label)
    is not used."""
    mode = config["mode"]
    probs = np.array([p if p is not None and len(p) else [np.nan] * len(LETTERS) for p in rows["probs"]],
                     dtype=float).reshape(len(rows), len(LETTERS))
    base = rows.assign(item_id=rows["question_id"], letter_mass=rows["valid_mass"], argmax_letter=argmax_letter(probs),
                       **{f"p_{x}": probs[:, k] for k, x in enumerate(LETTERS)})
    frames = []
    if mode in ("generate", "both"):
        frames.append(base.assign(mode="generate", answer_select=rows["answer"]))
    if mode in ("score", "both"):
        frames.append(base.assign(mode="score", answer_select=base["argmax_letter"]))
    out = pd.concat(frames, ignore_index=True)
    out["is_correct"] = (out["answer_select"] == out["correct"]).astype(bool)
    return out[COLUMNS]
