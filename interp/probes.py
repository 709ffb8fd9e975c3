"""Linear probes on final-token states: is a label of the prompt (e.g. whether perceiver and experiencer share a
group) linearly readable at each layer? Cross-validated logistic regression with a label-shuffled control.

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
from tqdm import tqdm

from behavioral.outputs import save_figure
from interp.clusters import layer_numbers

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


def layer_probes(samples: np.ndarray, y, hooks: Sequence[str], groups=None, cv: int = 5, seed: int = 0,
                 n_shuffles: int = 3, C: float = 1.0, progress: bool = False) -> pd.DataFrame:
    """One `probe` per layer of `samples` [layers × n × d] predicting the labels `y` (one per sample), with the same
    folds (`groups`: no group in both train and test) and seed at every layer, so layers compare on equal terms.

    One row per layer: hook, layer, then the probe's and its shuffled-label control's scores (see `probe`).
    """
    samples = np.asarray(samples)
    hooks = list(hooks)
    if samples.ndim != 3 or len(samples) != len(hooks):
        raise ValueError(f"samples must be layers × samples × d with one hook name per layer, got shape "
                         f"{samples.shape} for {len(hooks)} hooks")
    rows = []
    layers = tqdm(zip(hooks, layer_numbers(hooks), samples), total=len(hooks), desc="probes", unit="layer",
                  disable=not progress)
    for hook, layer, X in layers:
        rows.append({"hook": hook, "layer": layer} | probe(X, y, cv=cv, seed=seed, groups=groups,
                                                           n_shuffles=n_shuffles, C=C))
    return pd.DataFrame(rows)


def probe_figure(table: pd.DataFrame, metric: str = "balanced_accuracy", title: str | None = None) -> Figure:
    """Accuracy vs layer with the shuffled-label control, one panel per target (rows) and split (columns) of a table
    of `layer_probes` rows with `target` and `split` columns; `title` over them all (e.g. the run and selection)."""
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
            ax.set_title(f"{target} (split by {split})", fontsize=9)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_probes(table: pd.DataFrame, out_dir: str | Path, name: str = "probes", metric: str = "balanced_accuracy",
                title: str | None = None) -> list[Path]:
    """The probe figure as PNG and PDF; returns the paths."""
    return save_figure(probe_figure(table, metric, title), out_dir, name)
