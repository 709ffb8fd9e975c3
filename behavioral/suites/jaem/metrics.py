"""A run's rows as the analysis reads them (`view`: the one place where the CE answer is chosen), and one row per
sample with its metrics: whether the CE answer was the Empathetic one, the VAD distances and the ERA labels of the
generated reply."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from behavioral.suites.jaem.dimensions import ATTRIBUTES
from behavioral.suites.jaem.era import EraScorer
from behavioral.suites.jaem.lexicon import VadLexicon
from behavioral.suites.jaem.samples import LETTERS

SAMPLE_COLUMNS = ("template", "sample_id", *ATTRIBUTES)
CE_COLUMNS = ("ce_letter", "argmax_letter", "ce_label", "ce_correct", "p_gold", "ce_source")
GEN_COLUMNS = ("reply", "vad_v", "vad_a", "vad_d", "era_ip", "era_ex", "era_er")
ANSWER_RULE = ("the CE answer is the letter parsed from the generated reply where the run generated one (generate "
               "and both modes; a reply with no letter counts as wrong), else (score mode) `argmax_letter`, the "
               "argmax of the scored distribution over A-E (not the stored greedy label); `p_gold` is the scored "
               "probability of the gold letter")


def measure_names(samples: pd.DataFrame, config: dict) -> dict[str, str | None]:
    """What a run's metrics read, as tables name them: `ce_measure`, the CE answer (the letter of the greedy or
    sampled generated reply, or the argmax of the scored distribution, by where its answers came from; both where a
    run mixes them), and `gen_measure`, the generated reply that VAD and ERA read (None where the run lacks that
    task)."""
    decoded = "sampled" if config.get("temperature") else "greedy"
    names = {"generate": f"letter of the {decoded} generated reply", "score": "argmax of the scored distribution"}
    sources = sorted(samples["ce_source"].dropna().unique())
    return {"ce_measure": ", ".join(names[s] for s in sources) or None,
            "gen_measure": f"{decoded} generated reply" if samples["reply"].notna().any() else None}


def _argmax(probs) -> str | None:
    return LETTERS[int(np.argmax(probs))] if probs is not None and len(probs) else None


def view(rows: pd.DataFrame) -> pd.DataFrame:
    """Stored rows with, for CE rows, argmax_letter (scored runs), ce_letter (ANSWER_RULE), ce_source (generate or
    score), ce_label (the chosen answer's label, `none` without a letter), ce_correct (1.0 if the gold letter, else
    0.0) and p_gold; for gen rows the reply (empty where none was kept)."""
    out = rows[["task", *SAMPLE_COLUMNS, "speaker_text"]].copy()
    ce = rows["task"] == "ce"
    generated = rows["response"].notna()
    argmax = rows["probs"].map(_argmax).where(ce)
    letter = rows["answer"].where(generated, argmax).where(ce)
    gold = rows["gold_letter"].map(LETTERS.index)
    out["ce_letter"], out["argmax_letter"] = letter, argmax
    out["ce_label"] = [(o.split(",")[LETTERS.index(x)] if isinstance(x, str) else "none") if c else None
                       for o, x, c in zip(rows["options"], letter, ce)]
    out["ce_correct"] = (letter == rows["gold_letter"]).astype(float).where(ce)
    out["p_gold"] = [float(p[g]) if c and p is not None and len(p) == len(LETTERS) else math.nan
                     for p, g, c in zip(rows["probs"], gold, ce)]
    out["ce_source"] = np.where(generated, "generate", "score")
    out["ce_source"] = out["ce_source"].where(ce)
    out["reply"] = rows["answer"].fillna("").where(~ce)
    return out


def gen_metrics(gen: pd.DataFrame, lexicon: VadLexicon | None, era: EraScorer | None) -> pd.DataFrame:
    """Per gen row of the view: the reply, vad_v/a/d (NaN without a lexicon or where a side matches no word) and
    era_ip/ex/er (NaN without classifiers)."""
    gen = gen.copy()
    for dim in "vad":
        gen[f"vad_{dim}"] = math.nan
    if lexicon is not None and len(gen):
        distances = [lexicon.distance(s, r) for s, r in zip(gen["speaker_text"], gen["reply"])]
        gen[["vad_v", "vad_a", "vad_d"]] = np.array(distances, dtype=float)
    for dim in ("ip", "ex", "er"):
        gen[f"era_{dim}"] = math.nan
    if era is not None and len(gen):
        labels = era.score(list(gen["speaker_text"]), list(gen["reply"]))
        for dim in ("ip", "ex", "er"):
            gen[f"era_{dim}"] = np.asarray(labels[dim.upper()], dtype=float)
    return gen[[*SAMPLE_COLUMNS, *GEN_COLUMNS]]


def sample_metrics(rows: pd.DataFrame, lexicon: VadLexicon | None = None, era: EraScorer | None = None) -> pd.DataFrame:
    """Every sample of a run's view (`view`) with the metrics of the tasks it ran (the other metrics NaN)."""
    ce = rows.loc[rows["task"] == "ce", [*SAMPLE_COLUMNS, *CE_COLUMNS]]
    gen = gen_metrics(rows[rows["task"] == "gen"], lexicon, era)
    return ce.merge(gen, on=list(SAMPLE_COLUMNS), how="outer").sort_values("sample_id", kind="stable") \
        .reset_index(drop=True)
