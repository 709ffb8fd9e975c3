"""Linear probes on final-token states: is a label of the prompt (e.g. whether perceiver and experiencer share a
group) linearly readable at each layer, and readable beyond what the procedure gives any labelling of the same cells?

The probe is ``StandardScaler`` then ``LogisticRegression`` (balanced class weights) in one pipeline, scored by
stratified k-fold cross-validation (optionally grouped, so that no cell or event of a test fold was seen in
training). Three controls, each answering its own question:

- shuffled labels (`probe`): the same probe on labels permuted across samples. It destroys the cell structure, so it
  says only what the procedure scores on labels with no structure at all (about 1 / classes);
- wrong matchings (`matching_scores`, the control task of Hewitt & Liang 2019 adapted to identities): a label
  "left == right" relabelled "π(left) == right" for permutations π other than the identity (interp.matchings), on
  the same samples and folds. Every such labelling has the same cells and the same kind of rule; a probe that reads
  the real one no better than wrong ones reads the cell structure (which identities appear), not the matching;
- cross-name generalisation (`cross_name`): trained on the positives where the strings are the same, tested on the
  other positives, so a same-string detector scores chance.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

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

from behavioral.analysis.bootstrap import percentile_interval, resamples
from behavioral.analysis.multiplicity import max_statistic
from behavioral.analysis.figure_style import GREY, LABEL_SIZE, PALETTE, count_range, n_text, new_figure, styled
from interp.clusters import layer_numbers, p_value
from interp.matchings import matched

SCORING = ("accuracy", "balanced_accuracy")


def _pipeline(C: float, max_iter: int):
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter, class_weight="balanced"))


def n_folds(labellings: Sequence[np.ndarray], cv: int, groups=None) -> int:
    """The folds every labelling of the same samples can be split into: `cv`, fewer where a labelling's smallest
    class or the groups are fewer; fewer than 2 is a ValueError naming the class sizes."""
    folds = cv if groups is None else min(cv, len(np.unique(groups)))
    for y in labellings:
        classes, counts = np.unique(y, return_counts=True)
        if len(classes) < 2:
            raise ValueError(f"a probe needs at least 2 classes, got {list(classes)}")
        if min(folds, int(counts.min())) < 2:
            raise ValueError(f"too few samples for cross-validation: smallest class has {counts.min()} "
                             f"(classes {dict(zip(classes.tolist(), counts.tolist()))})")
        folds = min(folds, int(counts.min()))
    return folds


def cv_scores(X: np.ndarray, y, folds: int, seed: int = 0, groups=None, C: float = 1.0,
              max_iter: int = 2000) -> dict[str, np.ndarray]:
    """Per-fold test scores (SCORING) of the probe predicting `y` from `X`: StratifiedKFold(folds, shuffled with
    `seed`), or StratifiedGroupKFold when `groups` is given (a group never straddles train and test), stratified by
    `y` itself so every labelling's test folds hold each class."""
    if groups is None:
        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    else:
        splitter = StratifiedGroupKFold(folds, shuffle=True, random_state=seed)
    splits = list(splitter.split(X, y, groups))
    # one BLAS thread: these fits are small, and threaded BLAS on a busy machine is ten times slower
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = cross_validate(_pipeline(C, max_iter), X, y, cv=splits, scoring=SCORING, n_jobs=None)
    return {s: result[f"test_{s}"] for s in SCORING}


def _check(X, y) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if X.ndim != 2 or len(X) != len(y):
        raise ValueError(f"X must be [n, d] with one label per row, got X {X.shape} and {len(y)} labels")
    return X, y


def probe(X: np.ndarray, y, cv: int = 5, seed: int = 0, groups=None, n_shuffles: int = 3, C: float = 1.0,
          max_iter: int = 2000) -> dict:
    """Cross-validated accuracy of a logistic-regression probe predicting `y` from `X` [n, d], and of the same probe
    on shuffled labels.

    Folds: see `cv_scores`; `cv` shrinks to the smallest class size (at least 2) and the number of groups. The
    control shuffles `y` `n_shuffles` times (seeded) and pools the folds: it permutes samples, so it destroys the
    cell structure too, and answers only "what does this procedure score on labels with no structure at all".
    Returns accuracy_mean/std, balanced_accuracy_mean/std, control_accuracy_mean/std,
    control_balanced_accuracy_mean/std, majority (the most frequent class's share), chance (1 / classes), n,
    n_classes, folds.
    """
    X, y = _check(X, y)
    folds = n_folds([y], cv, groups)
    classes, counts = np.unique(y, return_counts=True)
    real = cv_scores(X, y, folds, seed, groups, C, max_iter)
    rng = np.random.default_rng(seed)
    control = [cv_scores(X, rng.permutation(y), folds, seed, groups, C, max_iter) for _ in range(n_shuffles)]
    out = {}
    for s in SCORING:
        out[f"{s}_mean"], out[f"{s}_std"] = float(real[s].mean()), float(real[s].std())
        pooled = np.concatenate([c[s] for c in control]) if control else np.array([np.nan])
        out[f"control_{s}_mean"], out[f"control_{s}_std"] = float(pooled.mean()), float(pooled.std())
    out.update(majority=float(counts.max() / counts.sum()), chance=1.0 / len(classes), n=int(len(y)),
               n_classes=int(len(classes)), folds=folds)
    return out


def matching_scores(X: np.ndarray, left, right, matchings: np.ndarray, groups=None, cv: int = 5, seed: int = 0,
                    C: float = 1.0, max_iter: int = 2000) -> tuple[float, np.ndarray, int]:
    """(real, controls [m], folds): the probe's cross-validated balanced accuracy for the real matching (a sample is
    positive where `left` == `right`, integer codes of one vocabulary) and for each wrong matching π of `matchings`
    [m, n] (positive where π(left) == right, interp.matchings.matched), each on the same samples, groups, seed and
    number of folds (the fewest any labelling allows), so they differ only in which cells are called positive."""
    X, left = _check(X, left)
    right = np.asarray(right)
    labellings = [matched(left, right)] + [matched(left, right, m) for m in matchings]
    folds = n_folds(labellings, cv, groups)
    scores = [float(cv_scores(X, y, folds, seed, groups, C, max_iter)["balanced_accuracy"].mean())
              for y in labellings]
    return scores[0], np.array(scores[1:]), folds


def matching_summary(real: float, controls: np.ndarray, n_identities: int) -> dict:
    """The control task's numbers for one probe: the real matching's balanced accuracy, the wrong matchings' mean,
    quantiles and largest, selectivity (real − mean), p = (1 + #{control >= real}) / (m + 1) (floor 1 / (m + 1);
    exact when the m matchings are all n! − 1 of `n_identities`) and the real matching's rank among all m + 1 (1:
    best; ties count against it, so p = rank / (m + 1))."""
    controls = np.asarray(controls, dtype=float)
    m = len(controls)
    q05, q50, q95 = np.quantile(controls, [0.05, 0.5, 0.95])
    return {"matching_real": real, "matching_mean": float(controls.mean()), "matching_q05": float(q05),
            "matching_q50": float(q50), "matching_q95": float(q95), "matching_max": float(controls.max()),
            "selectivity": real - float(controls.mean()), "matching_rank": int(1 + np.sum(controls >= real - 1e-12)),
            "matching_p": p_value(real, controls), "matching_p_floor": 1.0 / (m + 1), "matchings": m,
            "matching_exact": m == math.factorial(n_identities) - 1}


def _check_layers(samples: np.ndarray, hooks: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    samples, hooks = np.asarray(samples), list(hooks)
    if samples.ndim != 3 or len(samples) != len(hooks):
        raise ValueError(f"samples must be layers × samples × d with one hook name per layer, got shape "
                         f"{samples.shape} for {len(hooks)} hooks")
    return samples, hooks


def layer_probes(samples: np.ndarray, y, hooks: Sequence[str], groups=None, cv: int = 5, seed: int = 0,
                 n_shuffles: int = 3, C: float = 1.0, progress: bool = False) -> pd.DataFrame:
    """One `probe` per layer of `samples` [layers × n × d] predicting the labels `y` (one per sample), with the same
    folds (`groups`: no group in both train and test) and seed at every layer, so layers compare on equal terms.

    One row per layer: hook, layer, then the probe's and its shuffled-label control's scores (see `probe`).
    """
    samples, hooks = _check_layers(samples, hooks)
    rows = []
    layers = tqdm(zip(hooks, layer_numbers(hooks), samples), total=len(hooks), desc="probes", unit="layer",
                  disable=not progress)
    for hook, layer, X in layers:
        rows.append({"hook": hook, "layer": layer} | probe(X, y, cv=cv, seed=seed, groups=groups,
                                                           n_shuffles=n_shuffles, C=C))
    return pd.DataFrame(rows)


def layer_matching_controls(samples: np.ndarray, left, right, matchings: np.ndarray, hooks: Sequence[str],
                            groups=None, cv: int = 5, seed: int = 0, C: float = 1.0,
                            progress: bool = False) -> pd.DataFrame:
    """The control task at every layer of `samples` [layers × n × d]: `matching_scores` for the real matching of
    `left` and `right` and each wrong one, the same matchings and folds at every layer, summarized by
    `matching_summary`, with matching_p_fwe: the real matching's p against the largest wrong-matching score over
    all layers (max statistic, the family being these layers; floor 1 / (m + 1)), the p to quote for a best layer
    picked after looking. One row per layer: hook, layer, the summary, matching_p_fwe, matching_folds."""
    samples, hooks = _check_layers(samples, hooks)
    matchings = np.asarray(matchings)
    rows, null = [], []
    layers = tqdm(zip(hooks, layer_numbers(hooks), samples), total=len(hooks), desc="matching controls",
                  unit="layer", disable=not progress)
    for hook, layer, X in layers:
        real, controls, folds = matching_scores(X, left, right, matchings, groups, cv, seed, C)
        rows.append({"hook": hook, "layer": layer} | matching_summary(real, controls, matchings.shape[1])
                    | {"matching_folds": folds})
        null.append(controls)
    table = pd.DataFrame(rows)
    table.insert(table.columns.get_loc("matching_p") + 1, "matching_p_fwe",
                 max_statistic(table["matching_real"].to_numpy(), np.vstack(null)))
    return table


def cross_name_folds(y, source, cells, cv: int = 5, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) sample indices of the cross-name split: every fold trains on the positives where `source`
    holds (e.g. in-group cells whose persona and experiencer strings are the same) and tests on every other positive
    (same group, different names); the negatives' cells are dealt into min(cv, cells) seeded folds, each held out
    once, so both classes are in every test fold and no cell is on both sides."""
    y, source, cells = np.asarray(y, dtype=bool), np.asarray(source, dtype=bool), np.asarray(cells)
    if np.any(source & ~y):
        raise ValueError("the cross-name source must imply the target: a source row is not positive")
    train_pos, test_pos = np.flatnonzero(y & source), np.flatnonzero(y & ~source)
    if not len(train_pos) or not len(test_pos):
        raise ValueError(f"a cross-name split needs positives with and without the source, got {len(train_pos)} "
                         f"and {len(test_pos)}")
    negative_cells = np.unique(cells[~y])
    if len(negative_cells) < 2:
        raise ValueError(f"a cross-name split needs at least 2 negative cells, got {len(negative_cells)}")
    dealt = np.array_split(np.random.default_rng(seed).permutation(negative_cells), min(cv, len(negative_cells)))
    folds = []
    for held in dealt:
        out = ~y & np.isin(cells, held)
        folds.append((np.concatenate([train_pos, np.flatnonzero(~y & ~out)]),
                      np.concatenate([test_pos, np.flatnonzero(out)])))
    return folds


def cross_name(X: np.ndarray, y, source, cells, cv: int = 5, seed: int = 0, C: float = 1.0, max_iter: int = 2000,
               n_bootstrap: int = 1000) -> dict:
    """Does a probe of `y` trained on the source positives read the other positives (`cross_name_folds`)?

    Every held-out positive is scored in every fold (its predictions averaged), every negative in the one fold that
    holds its cell out. recall: the held-out positives' share predicted positive; false_positive: the held-out
    negatives' share; balanced_accuracy = (recall + 1 − false_positive) / 2, which a same-string detector scores 0.5
    (it calls every held-out positive negative). ci_low/ci_high: the 95% percentile interval over `n_bootstrap`
    resamples of the test cells (positive and negative cells resampled separately), fits held fixed, so it covers
    which cells were tested, not the training's variance. Also n_source, n_heldout, n_negative (samples), cells_heldout,
    cells_negative, folds.
    """
    X, y = _check(X, y)
    y, source, cells = y.astype(bool), np.asarray(source, dtype=bool), np.asarray(cells)
    folds = cross_name_folds(y, source, cells, cv, seed)
    positive = np.zeros(len(y))
    negative = np.full(len(y), np.nan)
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        for train, test in folds:
            predicted = _pipeline(C, max_iter).fit(X[train], y[train]).predict(X[test]).astype(float)
            held_pos = y[test]
            positive[test[held_pos]] += predicted[held_pos] / len(folds)
            negative[test[~held_pos]] = predicted[~held_pos]
    heldout = y & ~source
    pos_cells, pos_codes = np.unique(cells[heldout], return_inverse=True)
    neg_cells, neg_codes = np.unique(cells[~y], return_inverse=True)
    pos_sum, pos_n = np.bincount(pos_codes, positive[heldout]), np.bincount(pos_codes)
    neg_sum, neg_n = np.bincount(neg_codes, negative[~y]), np.bincount(neg_codes)

    def balanced(p_draw: np.ndarray, n_draw: np.ndarray) -> np.ndarray:
        recall = pos_sum[p_draw].sum(axis=-1) / pos_n[p_draw].sum(axis=-1)
        false_positive = neg_sum[n_draw].sum(axis=-1) / neg_n[n_draw].sum(axis=-1)
        return (recall + 1 - false_positive) / 2

    recall, false_positive = pos_sum.sum() / pos_n.sum(), neg_sum.sum() / neg_n.sum()
    low, high = percentile_interval(balanced(resamples(len(pos_cells), n_bootstrap, seed),
                                             resamples(len(neg_cells), n_bootstrap, seed + 1)))
    return {"cross_balanced_accuracy": float((recall + 1 - false_positive) / 2), "cross_ci_low": low,
            "cross_ci_high": high, "cross_recall": float(recall), "cross_false_positive": float(false_positive),
            "n_source": int((y & source).sum()), "n_heldout": int(heldout.sum()), "n_negative": int((~y).sum()),
            "cells_heldout": len(pos_cells), "cells_negative": len(neg_cells), "cross_folds": len(folds)}


def layer_cross_name(samples: np.ndarray, y, source, cells, hooks: Sequence[str], cv: int = 5, seed: int = 0,
                     C: float = 1.0, n_bootstrap: int = 1000, progress: bool = False) -> pd.DataFrame:
    """`cross_name` at every layer of `samples` [layers × n × d], the same folds and resamples at each; one row per
    layer: hook, layer, then its numbers."""
    samples, hooks = _check_layers(samples, hooks)
    layers = tqdm(zip(hooks, layer_numbers(hooks), samples), total=len(hooks), desc="cross-name", unit="layer",
                  disable=not progress)
    return pd.DataFrame([{"hook": hook, "layer": layer} | cross_name(X, y, source, cells, cv, seed, C,
                                                                     n_bootstrap=n_bootstrap)
                         for hook, layer, X in layers])


@styled
def probe_figure(table: pd.DataFrame, metric: str = "balanced_accuracy", title: str | None = None,
                 cross: pd.DataFrame | None = None, events: int | None = None) -> Figure:
    """Accuracy vs layer with the shuffled-label control, one panel per target (rows) and split (columns) of a table
    of `layer_probes` rows with `target` and `split` columns, each titled with its prompts and classes; where the
    table holds `layer_matching_controls` columns (balanced accuracy only), the wrong matchings' median and 5–95%
    band; `cross`: `layer_cross_name` rows with a `target` column, drawn on that target's panels; `title` over them
    all (e.g. the run and selection), with the `events` the prompts come from where given."""
    targets = list(dict.fromkeys(table["target"]))
    splits = list(dict.fromkeys(table["split"]))
    fig = new_figure(1 if len(splits) == 1 else 2, 2.4 * len(targets) + 0.4)
    axes = fig.subplots(len(targets), len(splits), squeeze=False)
    for i, target in enumerate(targets):
        for j, split in enumerate(splits):
            ax = axes[i, j]
            part = table[(table["target"] == target) & (table["split"] == split)].sort_values("layer")
            for column, label, color in ((metric, "probe", PALETTE[0]), (f"control_{metric}", "shuffled labels", GREY)):
                mean, std = part[f"{column}_mean"], part[f"{column}_std"]
                ax.plot(part["layer"], mean, marker="o", markersize=3, color=color, label=label)
                ax.fill_between(part["layer"], mean - std, mean + std, color=color, alpha=0.2)
            if metric == "balanced_accuracy" and "matching_q50" in part and part["matching_q50"].notna().any():
                ax.plot(part["layer"], part["matching_q50"], color=PALETTE[1], linewidth=1, label="wrong matchings")
                ax.fill_between(part["layer"], part["matching_q05"], part["matching_q95"], color=PALETTE[1],
                                alpha=0.2)
            if metric == "balanced_accuracy" and cross is not None and (cross["target"] == target).any():
                line = cross[cross["target"] == target].sort_values("layer")
                ax.errorbar(line["layer"], line["cross_balanced_accuracy"],
                            [line["cross_balanced_accuracy"] - line["cross_ci_low"],
                             line["cross_ci_high"] - line["cross_balanced_accuracy"]],
                            color=PALETTE[2], marker="s", markersize=3, capsize=2, label="cross-name")
            if len(part):
                chance = part["chance" if metric == "balanced_accuracy" else "majority"].iloc[0]
                ax.axhline(chance, color="black", linestyle=":", linewidth=1, label="chance")
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("layer (−1: embedding)")
            ax.set_ylabel(metric.replace("_", " "))
            n = (n_text(prompts=count_range(part["n"]), classes=count_range(part["n_classes"])) if len(part)
                 else n_text(prompts=0))
            ax.set_title(f"{target} (split by {split})\n{n}")
            ax.legend(fontsize=LABEL_SIZE - 0.5)
    lines = ([title] if title else []) + ([n_text(events=events)] if events is not None else [])
    if lines:
        fig.suptitle("\n".join(lines))
    return fig

