"""The paper's numbers from result rows: accuracy per category (Tables 1, 2, 6), with the denominator of the
authors' first eval.py as well; shifts from Raw to COT and ID with their item flips (Tables 4, 5); identity swaps
(Tables 3, 7); and how often an answer was read (verdicts, letter mass). Our additions: each accuracy's Wilson
interval over the questions, each shift's percentile bootstrap interval over the paired questions, and McNemar's p
Holm-adjusted over the categories and Overall of one run, mode and prompt type."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from behavioral.analysis.bootstrap import item_bootstrap
from behavioral.analysis.multiplicity import holm
from behavioral.analysis.proportion import item_share
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.prompts import LETTERS, PROMPT_TYPES, SWAP_TYPES

OVERALL = "Overall"
RUN_KEYS = ["run", "mode"]
SWAP_ACCURACIES = ("cot_swap", "id_swap", "no_mismatch", "id")


def _by_category(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(category, rows) in the paper's column order for the categories present, then Overall."""
    present = [(c, rows[rows["category"] == c]) for c in CATEGORIES if (rows["category"] == c).any()]
    return present + [(OVERALL, rows)]


def _p_correct(rows: pd.DataFrame) -> float:
    """Mean probability of the correct letter (score rows; NaN without probabilities)."""
    if rows.empty:
        return float("nan")
    probs = rows[[f"p_{x}" for x in LETTERS]].to_numpy(dtype=float)
    picked = probs[np.arange(len(rows)), rows["correct"].map(LETTERS.index).to_numpy()]
    return float(np.mean(picked))


def accuracy(results: pd.DataFrame) -> pd.DataFrame:
    """Rows run × mode × prompt type (cot, id, raw) × category and Overall: correct, n, accuracy = correct/n (a reply
    without a verdict is wrong and counted) with its 95% Wilson interval over the questions (accuracy_low, _high),
    accuracy_paper = correct/(n + 1) per category as the first eval.py computed it (its first item of a category
    counted twice; Overall correct/N), 3 places, and the mean p_correct."""
    out = []
    plain = results[results["prompt_type"].isin(PROMPT_TYPES)]
    for (run, mode, t), rows in plain.groupby(RUN_KEYS + ["prompt_type"], sort=False):
        for category, group in _by_category(rows):
            correct, n = int(group["is_correct"].sum()), len(group)
            share, low, high = item_share(group["is_correct"], group["item_id"])
            paper = correct / (n if category == OVERALL else n + 1)
            out.append({"run": run, "mode": mode, "prompt_type": t, "category": category, "correct": correct, "n": n,
                        "accuracy": share, "accuracy_low": low, "accuracy_high": high,
                        "accuracy_paper": round(paper, 3), "p_correct": _p_correct(group)})
    return pd.DataFrame(out, columns=["run", "mode", "prompt_type", "category", "correct", "n", "accuracy",
                                      "accuracy_low", "accuracy_high", "accuracy_paper", "p_correct"])


def by_identity(results: pd.DataFrame) -> pd.DataFrame:
    """Rows per identity (the group of the questions, which their unswapped COT and ID prompts name), sorted:
    accuracy_cot, accuracy_id, accuracy_raw (accuracy's Overall over that group's questions) and shift_cot, shift_id
    = accuracy(type) − accuracy(raw) as shift defines them; NaN where the rows hold no prompt of a type. `results`:
    the rows of one run and mode."""
    acc = accuracy(results.assign(run=results["identity"]))  # accuracy per identity: the identity stands as the run
    overall = acc[acc["category"] == OVERALL].pivot(index="run", columns="prompt_type", values="accuracy")
    overall = overall.reindex(columns=list(PROMPT_TYPES)).sort_index()
    out = pd.DataFrame({"identity": overall.index.to_numpy(),
                        **{f"accuracy_{t}": overall[t].to_numpy(dtype=float) for t in PROMPT_TYPES}})
    for t in SWAP_TYPES:
        out[f"shift_{t}"] = out[f"accuracy_{t}"] - out["accuracy_raw"]
    return out


def mcnemar_exact(plus: int, minus: int) -> float:
    """Exact two-sided McNemar p-value of `plus` items gained against `minus` lost (1.0 when none changed)."""
    return 1.0 if plus + minus == 0 else float(binomtest(plus, plus + minus, 0.5).pvalue)


def shift_interval(pair: pd.DataFrame, t: str, n_resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of mean(pair[t]) − mean(pair["raw"]) over resamples of the paired questions
    (the rows of `pair`: one per question, whether it was right under each prompt type)."""
    diff = pair[t].to_numpy(dtype=float) - pair["raw"].to_numpy(dtype=float)
    low, high, _ = item_bootstrap(lambda draw: float(diff[draw].mean()), len(diff), n_resamples, seed)
    return low, high


def shift(results: pd.DataFrame, acc: pd.DataFrame | None = None, n_resamples: int = 1000,
          seed: int = 0) -> pd.DataFrame:
    """Rows run × mode × type (cot, id) × category and Overall: shift = acc(type) − acc(raw) with its percentile
    bootstrap interval over `n_resamples` seeded resamples of the paired questions (shift_low, _high); shift_paper =
    the difference of the rounded paper accuracies; plus = items right under the type and wrong under raw, minus the
    reverse; mcnemar_p on plus against minus and mcnemar_p_holm, Holm over the categories and Overall of one run,
    mode and type. Items are paired by id."""
    acc = accuracy(results) if acc is None else acc
    key = ["run", "mode", "prompt_type", "category"]
    indexed = acc.set_index(key)
    out = []
    for (run, mode), rows in results.groupby(RUN_KEYS, sort=False):
        right = rows[rows["prompt_type"].isin(PROMPT_TYPES)].pivot_table(
            index="item_id", columns="prompt_type", values="is_correct", aggfunc="first")
        if "raw" not in right:
            continue
        category = rows.drop_duplicates("item_id").set_index("item_id")["category"]
        for t in ("cot", "id"):
            if t not in right:
                continue
            pair = right[[t, "raw"]].dropna().astype(bool).join(category)
            for name, group in _by_category(pair):
                plus = int((group[t] & ~group["raw"]).sum())
                minus = int((~group[t] & group["raw"]).sum())
                a, b = indexed.loc[(run, mode, t, name)], indexed.loc[(run, mode, "raw", name)]
                low, high = shift_interval(group, t, n_resamples, seed)
                out.append({"run": run, "mode": mode, "prompt_type": t, "category": name, "n": len(group),
                            "shift": a["accuracy"] - b["accuracy"], "shift_low": low, "shift_high": high,
                            "shift_paper": round(a["accuracy_paper"] - b["accuracy_paper"], 3),
                            "plus": plus, "minus": minus, "mcnemar_p": mcnemar_exact(plus, minus)})
    frame = pd.DataFrame(out, columns=["run", "mode", "prompt_type", "category", "n", "shift", "shift_low",
                                       "shift_high", "shift_paper", "plus", "minus", "mcnemar_p"])
    frame["mcnemar_p_holm"] = frame.groupby(["run", "mode", "prompt_type"], sort=False)["mcnemar_p"].transform(holm)
    return frame


def swap(results: pd.DataFrame) -> pd.DataFrame:
    """Rows run × mode × (S_i, S_j): n items of S_i, accuracy of their COT and ID prompts naming S_j (against the
    original correct letter), and of the unswapped COT ("No mismatch" in the paper) and ID prompts, each with its
    Wilson interval over the questions (`<accuracy>_low`, `_high`)."""
    out = []
    swapped = results[results["prompt_type"].isin(SWAP_TYPES.values())]
    for (run, mode), rows in results.groupby(RUN_KEYS, sort=False):
        mine = swapped[(swapped["run"] == run) & (swapped["mode"] == mode)]
        for (si, sj), pairs in mine.groupby(["identity", "swap_to"], sort=False):
            ids = set(pairs["item_id"])
            base = rows[rows["item_id"].isin(ids)]
            picked = {"cot_swap": pairs[pairs["prompt_type"] == "cot_swap"],
                      "id_swap": pairs[pairs["prompt_type"] == "id_swap"],
                      "no_mismatch": base[base["prompt_type"] == "cot"], "id": base[base["prompt_type"] == "id"]}
            row = {"run": run, "mode": mode, "s_i": si, "s_j": sj, "n": len(ids)}
            for name, frame in picked.items():
                row[name], row[f"{name}_low"], row[f"{name}_high"] = item_share(frame["is_correct"], frame["item_id"])
            out.append(row)
    accuracies = [f"{name}{end}" for name in SWAP_ACCURACIES for end in ("", "_low", "_high")]
    return pd.DataFrame(out, columns=["run", "mode", "s_i", "s_j", "n", *accuracies])


def answer_rates(results: pd.DataFrame) -> pd.DataFrame:
    """Rows run × mode: n prompts; generate: the share of replies holding a verdict eval.py reads (the others count as
    wrong); score: the mean mass of the four letters after `[[` before renormalising."""
    out = []
    for (run, mode), rows in results.groupby(RUN_KEYS, sort=False):
        generated = mode == "generate"
        out.append({"run": run, "mode": mode, "n": len(rows),
                    "with_verdict": float(rows["answer_select"].notna().mean()) if generated else float("nan"),
                    "letter_mass": float("nan") if generated else float(rows["letter_mass"].mean())})
    return pd.DataFrame(out, columns=["run", "mode", "n", "with_verdict", "letter_mass"])
