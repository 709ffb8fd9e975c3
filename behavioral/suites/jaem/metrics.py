"""One row per sample of a finished run: the CE answer and whether it was the Empathetic one, the VAD distances
and the ERA labels of the generated reply."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from behavioral.suites.jaem.dimensions import ATTRIBUTES
from behavioral.suites.jaem.era import EraScorer
from behavioral.suites.jaem.lexicon import VadLexicon
from behavioral.suites.jaem.samples import LETTERS

SAMPLE_COLUMNS = ("template", "sample_id", *ATTRIBUTES)


def ce_metrics(rows: pd.DataFrame) -> pd.DataFrame:
    """Per CE sample: ce_letter (the parsed letter of a generated reply, else the argmax of the scored
    distribution over A-E), ce_label, ce_correct (1.0 if the gold letter, 0.0 otherwise, unparsed replies
    included), p_gold (scored runs), ce_source (generate or score)."""
    ce = rows[rows["task"] == "ce"].copy()
    generated = ce["response"].notna()
    scored = ce["probs"].map(lambda p: p is not None and len(p) == len(LETTERS))
    argmax = ce["probs"].map(lambda p: LETTERS[int(np.argmax(p))] if p is not None and len(p) else None)
    ce["ce_letter"] = np.where(generated, ce["answer"], argmax)
    ce["ce_source"] = np.where(generated, "generate", "score")
    gold = ce["gold_letter"].map(LETTERS.index)
    ce["p_gold"] = [float(p[g]) if s else math.nan for p, g, s in zip(ce["probs"], gold, scored)]
    ce["ce_correct"] = (ce["ce_letter"] == ce["gold_letter"]).astype(float)
    ce["ce_label"] = [o.split(",")[LETTERS.index(letter)] if isinstance(letter, str) else "none"
                      for o, letter in zip(ce["options"], ce["ce_letter"])]
    return ce[[*SAMPLE_COLUMNS, "ce_letter", "ce_label", "ce_correct", "p_gold", "ce_source"]]


def gen_metrics(rows: pd.DataFrame, lexicon: VadLexicon | None, era: EraScorer | None) -> pd.DataFrame:
    """Per gen sample: the reply (cut at the speaker's next turn), vad_v/a/d (NaN without a lexicon or where a side
    matches no word) and era_ip/ex/er (NaN without classifiers)."""
    gen = rows[rows["task"] == "gen"].copy()
    gen["reply"] = gen["answer"].fillna("")
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
    return gen[[*SAMPLE_COLUMNS, "reply", "vad_v", "vad_a", "vad_d", "era_ip", "era_ex", "era_er"]]


def sample_metrics(rows: pd.DataFrame, lexicon: VadLexicon | None = None, era: EraScorer | None = None) -> pd.DataFrame:
    """Every sample of a run with the metrics of the tasks it ran (the other metrics NaN)."""
    ce, gen = ce_metrics(rows), gen_metrics(rows, lexicon, era)
    return ce.merge(gen, on=list(SAMPLE_COLUMNS), how="outer").sort_values("sample_id", kind="stable") \
        .reset_index(drop=True)
