"""A GIEBench run's rows under the suite's names: one row per run, mode, item and prompt, with the selected letter,
whether it is correct and the four letters' probabilities (`item_id` is the question's id)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from behavioral.run_reader import read_run
from behavioral.store import read_manifest
from behavioral.suites.giebench.prompts import LETTERS

COLUMNS = ["run", "mode", "item_id", "prompt_type", "category", "identity", "swap_to", "correct", "response",
           "answer_select", "is_correct", "letter_mass", *(f"p_{x}" for x in LETTERS)]


def run_name(run_dir: str | Path) -> str:
    """A run's name in tables: the imported model's name, else the run directory's name."""
    config = read_manifest(run_dir)["config"]
    return config["model"] if config.get("imported_from") else Path(run_dir).resolve().name


def results(run_dir: str | Path, name: str | None = None, allow_partial: bool = True) -> pd.DataFrame:
    """The rows of a run directory (COLUMNS): generate rows select eval.py's letter (None where no verdict), score
    rows the most probable letter after `[[` (ties: the earliest); a `both` run gives rows of each mode. Its
    `attrs["completeness"]` says how much of the run's plan they are; a partial run is refused unless
    `allow_partial`."""
    manifest, rows, done = read_run(run_dir, "giebench", allow_partial)
    mode = manifest["config"]["mode"]
    probs = np.array([p if p is not None and len(p) else [np.nan] * len(LETTERS) for p in rows["probs"]],
                     dtype=float).reshape(len(rows), len(LETTERS))
    base = rows.assign(run=name or run_name(run_dir), item_id=rows["question_id"], letter_mass=rows["valid_mass"],
                       **{f"p_{x}": probs[:, k] for k, x in enumerate(LETTERS)})
    frames = []
    if mode in ("generate", "both"):
        frames.append(base.assign(mode="generate", answer_select=rows["answer"]))
    if mode in ("score", "both"):
        best = np.array(LETTERS, dtype=object)[np.nan_to_num(probs, nan=-1).argmax(axis=1)] if len(rows) else []
        frames.append(base.assign(mode="score", answer_select=best))
    out = pd.concat(frames, ignore_index=True)
    out["is_correct"] = (out["answer_select"] == out["correct"]).astype(bool)
    out = out[COLUMNS]
    out.attrs["completeness"] = done
    return out
