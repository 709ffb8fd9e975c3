"""Representational similarity between identity vectors and behavior.

Per layer, the distance matrix of the persona vectors (cosine, after centring over identities, by default) is
compared with the distance matrix of the perceivers' rows of M (euclidean by default: how differently two perceivers
rate every experiencer). The RSA score is the Spearman correlation over the upper triangle (pairs i < j); its
Mantel p-value permutes the identities of one matrix (rows and columns together) and is one-sided for a positive
association: p = (1 + #{null >= r}) / (n_permutations + 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy.spatial.distance import pdist, squareform
from scipy.stats import rankdata

from behavioral.outputs import save_figure
from interp.clusters import layer_numbers, p_value, plot_against_null

METRICS = ("cosine", "euclidean", "correlation")
_CHUNK = 4_000_000  # permutations × n × n handled at once


def distance_matrix(X: np.ndarray, metric: str = "cosine", center: bool = False) -> np.ndarray:
    """Square matrix [n, n] of distances between the rows of X (cosine, euclidean or correlation distance);
    `center` subtracts the mean row first."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array (points × features), got shape {X.shape}")
    if center:
        X = X - X.mean(0)
    return squareform(pdist(X, metric=metric))


def _check_pair(D1: np.ndarray, D2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    D1, D2 = np.asarray(D1, dtype=np.float64), np.asarray(D2, dtype=np.float64)
    for D in (D1, D2):
        if D.ndim != 2 or D.shape[0] != D.shape[1]:
            raise ValueError(f"a distance matrix must be square, got shape {D.shape}")
    if D1.shape != D2.shape:
        raise ValueError(f"distance matrices differ in shape: {D1.shape} vs {D2.shape}")
    if len(D1) < 3:
        raise ValueError(f"RSA needs at least 3 points, got {len(D1)}")
    if not (np.isfinite(D1).all() and np.isfinite(D2).all()):
        raise ValueError("distance matrices must be finite (a zero vector has no cosine distance)")
    return D1, D2


def _upper(D: np.ndarray) -> np.ndarray:
    return D[np.triu_indices(len(D), k=1)]


def _standard(v: np.ndarray) -> np.ndarray:
    v = v - v.mean()
    norm = np.sqrt((v * v).sum())
    return v / norm if norm > 0 else np.full_like(v, np.nan)


def rsa(D1: np.ndarray, D2: np.ndarray) -> float:
    """Spearman correlation between the upper triangles (i < j) of two square distance matrices (average ranks for
    ties; NaN where one triangle is constant)."""
    D1, D2 = _check_pair(D1, D2)
    a, b = _standard(rankdata(_upper(D1))), _standard(rankdata(_upper(D2)))
    return float((a * b).sum())


def mantel_permutations(n: int, n_permutations: int, seed: int) -> np.ndarray:
    """[n_permutations, n] seeded permutations of the points, as `mantel` draws them."""
    rng = np.random.default_rng(seed)
    return rng.permuted(np.tile(np.arange(n), (n_permutations, 1)), axis=1)


def mantel(D1: np.ndarray, D2: np.ndarray, n_permutations: int = 1000, seed: int = 0,
           return_null: bool = False) -> tuple[float, float] | tuple[float, float, np.ndarray]:
    """RSA of D1 and D2 and its one-sided Mantel p-value: D2's rows and columns are permuted together.

    Vectorized: relabelling the points of D2 only reorders its upper-triangle values, so their ranks are computed
    once and each permutation costs one gather and one dot product. `return_null` adds the null correlations.
    """
    D1, D2 = _check_pair(D1, D2)
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be at least 1, got {n_permutations}")
    n = len(D1)
    iu = np.triu_indices(n, k=1)
    a = _standard(rankdata(D1[iu]))
    R = np.zeros((n, n))
    R[iu] = rankdata(D2[iu])
    R = R + R.T  # symmetric rank matrix of D2's off-diagonal entries
    mean = R[iu].mean()
    norm = np.sqrt(((R[iu] - mean) ** 2).sum())
    r = float((a * (R[iu] - mean)).sum() / norm) if norm > 0 else float("nan")
    perms = mantel_permutations(n, n_permutations, seed)
    null = np.empty(n_permutations)
    step = max(1, _CHUNK // (n * n))
    for start in range(0, n_permutations, step):
        p = perms[start:start + step]
        permuted = R[p[:, :, None], p[:, None, :]][:, iu[0], iu[1]]  # [chunk, pairs]
        null[start:start + step] = (permuted - mean) @ a / norm if norm > 0 else np.nan
    p_val = p_value(r, null) if np.isfinite(r) else float("nan")
    return (r, p_val, null) if return_null else (r, p_val)


def layer_rsa(
    persona: np.ndarray,
    M_rows: np.ndarray,
    hooks: Sequence[str] | None = None,
    metric: str = "cosine",
    behavior_metric: str = "euclidean",
    center: bool = True,
    n_permutations: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """RSA per layer between persona vectors [layers × n × d] and behavior rows [n × columns] (the same n identities
    in the same order, e.g. the perceivers' rows of M without "a person").

    One row per layer: hook, layer, rsa (Spearman r), p (Mantel, one-sided), null_mean, null_q95, n, metric,
    behavior_metric, n_permutations. Persona vectors are centred over the identities of each layer (`center`); every
    layer is tested against the same permutations.
    """
    persona = np.asarray(persona)
    M_rows = np.asarray(M_rows)
    if persona.ndim != 3:
        raise ValueError(f"persona vectors must be layers × identities × d_model, got shape {persona.shape}")
    if M_rows.ndim != 2 or len(M_rows) != persona.shape[1]:
        raise ValueError(f"behavior rows of shape {M_rows.shape} for {persona.shape[1]} identities")
    hooks = list(hooks) if hooks is not None else [f"layer_{i}" for i in range(len(persona))]
    if len(hooks) != len(persona):
        raise ValueError(f"{len(hooks)} hook names for {len(persona)} layers")
    D_behavior = distance_matrix(M_rows, behavior_metric)
    rows = []
    for hook, layer, X in zip(hooks, layer_numbers(hooks), persona):
        r, p, null = mantel(distance_matrix(X, metric, center), D_behavior, n_permutations, seed, return_null=True)
        rows.append({"hook": hook, "layer": layer, "rsa": r, "p": p, "null_mean": float(null.mean()),
                     "null_q95": float(np.quantile(null, 0.95)), "n": persona.shape[1], "metric": metric,
                     "behavior_metric": behavior_metric, "n_permutations": n_permutations})
    return pd.DataFrame(rows)


def plot_rsa(df: pd.DataFrame, title: str | None = None, alpha: float = 0.05,
             out: str | Path | None = None) -> Figure:
    """Spearman r between persona and behavior distances across layers, with the Mantel null's mean and 95th
    percentile; filled markers where p < `alpha`. `out` (a path without suffix) saves PNG and PDF."""
    fig = Figure(figsize=(6.5, 3.8))
    ax = fig.subplots()
    plot_against_null(ax, df["layer"].to_numpy(), df["rsa"], df["p"], df["null_mean"], df["null_q95"], alpha,
                      "RSA (Spearman r)", "Mantel p")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_ylabel("Spearman r (persona vs behavior distances)")
    ax.legend(fontsize=7, loc="best", frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    if out is not None:
        save_figure(fig, Path(out).parent, Path(out).name)
    return fig
