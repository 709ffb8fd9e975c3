"""Linear probes on final-token states: is "in-group" (perceiver and experiencer share a group) or the perceiver's
group linearly readable at each layer? Cross-validated logistic regression with a label-shuffled control.

The probe is ``StandardScaler`` then ``LogisticRegression`` (balanced class weights) in one pipeline, scored by
stratified k-fold cross-validation (optionally grouped, so that no cell or event of a test fold was seen in
training). The control refits the same pipeline, folds and seed on labels permuted at random: its accuracy is what
the probe gets from chance structure alone (about 1 / classes for balanced ones).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from activations.capture import hook_layer
from activations.store import ActivationStore
from behavioral.outputs import save_figure
from behavioral.suites.intergroup.groups import UNSPECIFIED, get_category

TARGETS = ("ingroup", "perceiver_group")
SPLITS = ("sample", "cell", "event")
SCORING = ("accuracy", "balanced_accuracy")


def _pipeline(C: float, max_iter: int):
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter, class_weight="balanced"))


def probe(X: np.ndarray, y, cv: int = 5, seed: int = 0, groups=None, n_shuffles: int = 3, C: float = 1.0,
          max_iter: int = 2000) -> dict:
    """Cross-validated accuracy of a logistic-regression probe predicting `y` from `X` [n, d], and of the same probe
    on shuffled labels.

    Folds: StratifiedKFold(cv, shuffled with `seed`), or StratifiedGroupKFold when `groups` is given (a group never
    straddles train and test); `cv` shrinks to the smallest class size (at least 2). The control shuffles `y`
    `n_shuffles` times (seeded) and pools the folds. Returns accuracy_mean/std, balanced_accuracy_mean/std,
    control_accuracy_mean/std, control_balanced_accuracy_mean/std, majority (the most frequent class's share),
    chance (1 / classes), n, n_classes, folds.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if X.ndim != 2 or len(X) != len(y):
        raise ValueError(f"X must be [n, d] with one label per row, got X {X.shape} and {len(y)} labels")
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        raise ValueError(f"a probe needs at least 2 classes, got {list(classes)}")
    folds = min(cv, int(counts.min()))
    if groups is not None:
        folds = min(folds, len(np.unique(groups)))
    if folds < 2:
        raise ValueError(f"too few samples for cross-validation: smallest class has {counts.min()} "
                         f"(classes {dict(zip(classes.tolist(), counts.tolist()))})")
    if groups is None:
        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    else:
        splitter = StratifiedGroupKFold(folds, shuffle=True, random_state=seed)

    def scores(labels) -> dict[str, np.ndarray]:
        splits = list(splitter.split(X, labels, groups))
        # one BLAS thread: these fits are small, and threaded BLAS on a busy machine is ten times slower
        with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
            warnings.simplefilter("ignore", ConvergenceWarning)
            result = cross_validate(_pipeline(C, max_iter), X, labels, cv=splits, scoring=SCORING, n_jobs=None)
        return {s: result[f"test_{s}"] for s in SCORING}

    real = scores(y)
    rng = np.random.default_rng(seed)
    control = [scores(rng.permutation(y)) for _ in range(n_shuffles)]
    out = {}
    for s in SCORING:
        out[f"{s}_mean"], out[f"{s}_std"] = float(real[s].mean()), float(real[s].std())
        pooled = np.concatenate([c[s] for c in control]) if control else np.array([np.nan])
        out[f"control_{s}_mean"], out[f"control_{s}_std"] = float(pooled.mean()), float(pooled.std())
    out.update(majority=float(counts.max() / counts.sum()), chance=1.0 / len(classes), n=int(len(y)),
               n_classes=int(len(classes)), folds=folds)
    return out


def probe_labels(category: str, cells: pd.DataFrame, target: str) -> tuple[np.ndarray, np.ndarray]:
    """(keep mask, labels) of sample rows for a target; rows with "a person" on either side are dropped."""
    if target not in TARGETS:
        raise ValueError(f"unknown probe target {target!r}; expected one of {', '.join(TARGETS)}")
    cat = get_category(category)
    keep = ((cells["perceiver"] != UNSPECIFIED) & (cells["experiencer"] != UNSPECIFIED)).to_numpy()
    p = cells["perceiver"].map(cat.group_of)
    if target == "ingroup":
        labels = (p == cells["experiencer"].map(cat.group_of)).to_numpy()
    else:
        labels = p.fillna(UNSPECIFIED).to_numpy()
    return keep, labels[keep]


def layer_probes(store: ActivationStore, category: str, setting: str, target: str = "ingroup", cv: int = 5,
                 seed: int = 0, split: str = "sample", n_shuffles: int = 3, C: float = 1.0,
                 hooks: Sequence[str] | None = None) -> pd.DataFrame:
    """One probe per hook (``hook_embed``, then each captured layer; `hooks` picks some of them) on the final-token
    samples of a category and setting; "a person" cells are left out.

    `target`: ``ingroup`` (perceiver and experiencer in the same group) or ``perceiver_group``. `split`: ``sample``
    (plain stratified folds), ``cell`` (no (perceiver, experiencer) cell in both train and test: the probe must
    generalize to unseen pairs) or ``event`` (no event in both).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    samples, cells = store.final_samples(category, setting)
    keep, y = probe_labels(category, cells, target)
    kept = cells[keep]
    groups = None
    if split == "cell":
        groups = (kept["perceiver"] + "|" + kept["experiencer"]).to_numpy()
    elif split == "event":
        groups = kept["event_id"].to_numpy()
    unknown = sorted(set(hooks or ()) - set(store.hooks))
    if unknown:
        raise ValueError(f"hooks {unknown} were not captured; captured: {', '.join(store.hooks)}")
    rows = []
    for i, hook in enumerate(store.hooks):
        if hooks is not None and hook not in hooks:
            continue
        result = probe(samples[i][keep], y, cv=cv, seed=seed, groups=groups, n_shuffles=n_shuffles, C=C)
        rows.append({"category": category, "setting": setting, "target": target, "split": split, "hook": hook,
                     "layer": hook_layer(hook)} | result)
    return pd.DataFrame(rows)


def probe_figure(table: pd.DataFrame, metric: str = "balanced_accuracy") -> Figure:
    """Accuracy vs layer with the shuffled-label control, one panel per target (rows) and split (columns)."""
    targets = list(dict.fromkeys(table["target"]))
    splits = list(dict.fromkeys(table["split"]))
    fig = Figure(figsize=(4.5 * len(splits), 3.2 * len(targets)), layout="constrained")
    axes = fig.subplots(len(targets), len(splits), squeeze=False)
    for i, target in enumerate(targets):
        for j, split in enumerate(splits):
            ax = axes[i, j]
            part = table[(table["target"] == target) & (table["split"] == split)].sort_values("layer")
            for column, label, color in ((metric, "probe", "C0"), (f"control_{metric}", "shuffled labels", "C7")):
                mean, std = part[f"{column}_mean"], part[f"{column}_std"]
                ax.plot(part["layer"], mean, marker="o", markersize=3, color=color, label=label)
                ax.fill_between(part["layer"], mean - std, mean + std, color=color, alpha=0.2)
            if len(part):
                chance = part["chance" if metric == "balanced_accuracy" else "majority"].iloc[0]
                ax.axhline(chance, color="black", linestyle=":", linewidth=1, label="chance")
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("layer (−1: embedding)")
            ax.set_ylabel(metric.replace("_", " "))
            first = part.iloc[0] if len(part) else None
            where = f"{first['category']} {first['setting']}, " if first is not None else ""
            ax.set_title(f"{target} ({where}split by {split})", fontsize=9)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    return fig


def plot_probes(table: pd.DataFrame, out_dir: str | Path, name: str = "probes",
                metric: str = "balanced_accuracy") -> list[Path]:
    """The probe figure as PNG and PDF; returns the paths."""
    return save_figure(probe_figure(table, metric), out_dir, name)
