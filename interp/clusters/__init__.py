"""Identity embeddings and their clusters: 2-D projections (t-SNE, UMAP) and cluster statistics per layer, on arrays
of identity vectors and one grouping label per identity (which suite they come from is the caller's business).

Distances. Identity vectors of one template share a large common component (e.g. every persona of a nationality
prompt reads "a person from ..."), so the per-layer analyses centre the vectors over the identities (subtract their
mean) and use the **cosine** distance by default; `metric="euclidean"` is the alternative. Silhouette and k-nearest-neighbour accuracy use the same distance.

Statistics (`cluster_stats`):

- silhouette: the mean silhouette coefficient (as `sklearn.metrics.silhouette_score`; a point alone in its cluster
  scores 0);
- knn_accuracy: leave-one-out k-nearest-neighbour accuracy (each point's label predicted by the majority of its k
  nearest other points; a tie goes to the tied label whose member is nearest). A point alone in its cluster (e.g.
  Germany among the Inglehart-Welzel zones) can never be predicted right: `knn_ceiling` is the best reachable accuracy;
- p-values: one-sided, against the same statistic under random relabellings (the labels permuted over the points,
  cluster sizes kept): p = (1 + #{null >= observed}) / (n_permutations + 1).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy.spatial.distance import pdist, squareform
from tqdm import tqdm

from activations.capture import EMBED_HOOK, table_layer
from behavioral.analysis.multiplicity import holm, max_statistic
from behavioral.core.extras import require
from behavioral.analysis.figure_style import (
    GREY, PALETTE, PANEL_HEIGHT, grid_shape, legend_below, n_text, new_figure, scatter_by_label, styled,
)
from behavioral.analysis.figure_files import label_points

METHODS = ("tsne", "umap")
METHOD_TITLES = {"tsne": "t-SNE", "umap": "UMAP"}
METRICS = ("cosine", "euclidean")
_CHUNK = 2_000_000  # permutations × points × labels handled at once


# --- projections ------------------------------------------------------------------------------------------------


def _prepare(X: np.ndarray, center: bool) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array (points × features), got shape {X.shape}")
    return X - X.mean(0) if center else X


def tsne_perplexity(n: int) -> float:
    """Perplexity for n points: (n - 1) / 4 within [2, 30] (5 for the 21 countries, as the paper's Figure 4)."""
    return float(min(30.0, max(2.0, (n - 1) / 4)))


def umap_neighbors(n: int) -> int:
    """UMAP n_neighbors for n points: n // 3 within [2, 15] (7 for the 21 countries)."""
    return int(min(15, max(2, n // 3)))


def project(X: np.ndarray, method: str = "tsne", seed: int = 0, metric: str = "euclidean",
            center: bool = False) -> np.ndarray:
    """2-D coordinates [n, 2] of the rows of X by t-SNE (exact gradients, PCA start) or UMAP (PCA start), with the
    neighbourhood size adapted to small n (`tsne_perplexity`, `umap_neighbors`); the same seed gives the same result."""
    if method not in METHODS:
        raise ValueError(f"unknown projection method {method!r}; expected one of {', '.join(METHODS)}")
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    X = _prepare(X, center)
    n = len(X)
    if n < 4:
        raise ValueError(f"a 2-D projection needs at least 4 points, got {n}")
    if method == "tsne":
        from sklearn.manifold import TSNE

        tsne = TSNE(n_components=2, perplexity=min(tsne_perplexity(n), n - 1.0), metric=metric, init="pca",
                    method="exact", random_state=seed)
        return tsne.fit_transform(X)
    umap = require("umap", "the UMAP projection")  # slow to import (numba); only when asked for
    reducer = umap.UMAP(n_components=2, n_neighbors=umap_neighbors(n), metric=metric, init="pca",
                        random_state=seed, n_jobs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n_jobs overridden by random_state; small-graph notices
        return np.asarray(reducer.fit_transform(X), dtype=np.float64)


# --- cluster statistics -----------------------------------------------------------------------------------------


def distances(X: np.ndarray, metric: str = "cosine", center: bool = False) -> np.ndarray:
    """Square matrix of pairwise distances between the rows of X (cosine or euclidean)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    return squareform(pdist(_prepare(X, center), metric=metric))


def _codes(labels: Sequence) -> tuple[np.ndarray, int]:
    values = list(labels)
    order = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return np.array([order[v] for v in values], dtype=np.int64), len(order)


def permuted_labels(codes: np.ndarray, n_permutations: int, seed: int) -> np.ndarray:
    """[n_permutations + 1, n]: the labels as given (row 0), then seeded random permutations of them."""
    rng = np.random.default_rng(seed)
    perms = rng.permuted(np.tile(np.arange(len(codes)), (n_permutations, 1)), axis=1)
    return np.vstack([codes[None, :], codes[perms]])


def silhouettes(D: np.ndarray, codes: np.ndarray, n_labels: int) -> np.ndarray:
    """Mean silhouette of each labelling (row of `codes`, [P, n]) over the distance matrix D [n, n]."""
    codes = np.atleast_2d(codes)
    P, n = codes.shape
    out = np.empty(P)
    step = max(1, _CHUNK // (n * n_labels))
    for start in range(0, P, step):
        c = codes[start:start + step]
        onehot = np.zeros((len(c), n, n_labels))
        np.put_along_axis(onehot, c[..., None], 1.0, axis=2)
        sums = D @ onehot  # [p, n, labels]: summed distance of each point to each cluster
        counts = onehot.sum(1)  # [p, labels]
        own_count = np.take_along_axis(counts, c, axis=1)
        a = np.take_along_axis(sums, c[..., None], axis=2)[..., 0] / np.maximum(own_count - 1, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            other = sums / counts[:, None, :]
        np.put_along_axis(other, c[..., None], np.inf, axis=2)
        b = other.min(2)
        denom = np.maximum(a, b)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(denom > 0, (b - a) / denom, 0.0)
        s[own_count == 1] = 0.0
        out[start:start + step] = s.mean(1)
    return out


def knn_accuracies(D: np.ndarray, codes: np.ndarray, n_labels: int, k: int = 3) -> np.ndarray:
    """Leave-one-out k-nearest-neighbour accuracy of each labelling (row of `codes`, [P, n]) over D [n, n]."""
    codes = np.atleast_2d(codes)
    P, n = codes.shape
    if not 1 <= k < n:
        raise ValueError(f"k must be in 1..{n - 1} for {n} points, got {k}")
    Dm = np.array(D, dtype=np.float64)
    np.fill_diagonal(Dm, np.inf)
    neighbours = np.argsort(Dm, axis=1, kind="stable")[:, :k]  # [n, k], nearest first; labels do not matter
    weights = 1.0 - 1e-6 * np.arange(k)  # ties between labels go to the one with the nearer member
    out = np.empty(P)
    step = max(1, _CHUNK // (n * n_labels))
    rows, points = np.arange(step)[:, None], np.arange(n)[None, :]
    for start in range(0, P, step):
        c = codes[start:start + step]
        votes = np.zeros((len(c), n, n_labels))
        for j in range(k):
            votes[rows[:len(c)], points, c[:, neighbours[:, j]]] += weights[j]
        out[start:start + step] = (votes.argmax(2) == c).mean(1)
    return out


def p_value(observed: float, null: np.ndarray) -> float:
    """One-sided permutation p-value (1 + #{null >= observed}) / (len(null) + 1), with a 1e-12 tolerance."""
    return float((1 + np.sum(null >= observed - 1e-12)) / (len(null) + 1))


def cluster_stats(
    X: np.ndarray,
    labels: Sequence,
    n_permutations: int = 1000,
    seed: int = 0,
    k: int = 3,
    metric: str = "cosine",
    center: bool = False,
    return_null: bool = False,
) -> dict:
    """Silhouette and leave-one-out kNN accuracy of `labels` on the rows of X, with label-permutation p-values.

    metric: "cosine" (default) or "euclidean" on the rows of X (centred over rows first if `center`), or
    "precomputed" with X a square distance matrix. Returns silhouette, silhouette_p, silhouette_null_mean,
    silhouette_null_q95, knn_accuracy, knn_p, knn_null_mean (chance level), knn_null_q95, knn_ceiling, n, n_labels,
    k, metric, n_permutations (and the null arrays under `null_silhouette`, `null_knn` if `return_null`).
    """
    if metric == "precomputed":
        D = np.asarray(X, dtype=np.float64)
        if D.ndim != 2 or D.shape[0] != D.shape[1]:
            raise ValueError(f"a precomputed distance matrix must be square, got shape {D.shape}")
    else:
        D = distances(X, metric, center)
    codes, n_labels = _codes(labels)
    n = len(codes)
    if n != len(D):
        raise ValueError(f"{len(D)} points but {n} labels")
    if not 2 <= n_labels <= n - 1:
        raise ValueError(f"cluster statistics need 2..{n - 1} distinct labels for {n} points, got {n_labels}")
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be at least 1, got {n_permutations}")
    all_codes = permuted_labels(codes, n_permutations, seed)
    sil = silhouettes(D, all_codes, n_labels)
    knn = knn_accuracies(D, all_codes, n_labels, k)
    sizes = np.bincount(codes)
    result = {
        "silhouette": float(sil[0]),
        "silhouette_p": p_value(sil[0], sil[1:]),
        "silhouette_null_mean": float(sil[1:].mean()),
        "silhouette_null_q95": float(np.quantile(sil[1:], 0.95)),
        "knn_accuracy": float(knn[0]),
        "knn_p": p_value(knn[0], knn[1:]),
        "knn_null_mean": float(knn[1:].mean()),
        "knn_null_q95": float(np.quantile(knn[1:], 0.95)),
        "knn_ceiling": float((sizes[codes] > 1).mean()),
        "n": n,
        "n_labels": n_labels,
        "k": k,
        "metric": metric,
        "n_permutations": n_permutations,
    }
    if return_null:
        result |= {"null_silhouette": sil[1:], "null_knn": knn[1:]}
    return result


def layer_stats(
    vectors: np.ndarray,
    labels: Sequence,
    hooks: Sequence[str] | None = None,
    *,
    metric: str = "cosine",
    center: bool = True,
    k: int = 3,
    n_permutations: int = 1000,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """`cluster_stats` per layer of `vectors` [layers × points × d] against one label per point, with family-wise
    adjusted p-values across the layers, so a study may report the best layer without a multiplicity bias.

    One row per layer (`hooks` names them; default layer_0, ...): hook, layer, the statistics, then
    silhouette_p_fwe, silhouette_p_holm, knn_p_fwe and knn_p_holm. Vectors are centred over the points of each layer
    (`center`) and compared by `metric`. Every layer is tested against the same label permutations, so `_p_fwe` is
    the max-statistic adjustment (the largest statistic of any layer under each permutation) and `_p_holm` Holm's.
    """
    vectors = np.asarray(vectors)
    if vectors.ndim != 3:
        raise ValueError(f"expected layers × points × features, got shape {vectors.shape}")
    hooks = list(hooks) if hooks is not None else [f"layer_{i}" for i in range(len(vectors))]
    if len(hooks) != len(vectors):
        raise ValueError(f"{len(hooks)} hook names for {len(vectors)} layers")
    rows, nulls = [], {"silhouette": [], "knn": []}
    layers = tqdm(zip(hooks, layer_numbers(hooks), vectors), total=len(hooks), desc="cluster statistics",
                  unit="layer", disable=not progress)
    for hook, layer, X in layers:
        stats = cluster_stats(X, labels, n_permutations, seed, k, metric, center, return_null=True)
        nulls["silhouette"].append(stats.pop("null_silhouette"))
        nulls["knn"].append(stats.pop("null_knn"))
        rows.append({"hook": hook, "layer": layer, **stats})
    table = pd.DataFrame(rows)
    for name, statistic in (("silhouette", "silhouette"), ("knn", "knn_accuracy")):
        table[f"{name}_p_fwe"] = max_statistic(table[statistic].to_numpy(dtype=float), np.vstack(nulls[name]))
        table[f"{name}_p_holm"] = holm(table[f"{name}_p"])
    return table


def layer_numbers(hooks: Sequence[str]) -> list[int]:
    """The ``layer`` column of per-layer tables: each hook name's activations.capture.table_layer (-1 for
    hook_embed, a plotting position; the ``hook`` column addresses the layer); positions instead where the names are
    not all hook names (``layer_0``, ... of a bare array)."""
    try:
        return [table_layer(hook) for hook in hooks]
    except ValueError:
        return list(range(len(hooks)))


# --- figures ----------------------------------------------------------------------------------------------------


MARKER_AREA = 20.0  # points²: the projections' markers


def _draw_projection(ax: Axes, points: np.ndarray, labels: Sequence[str], title: str | None) -> None:
    """Points coloured and shaped by label on `ax`, titled."""
    scatter_by_label(ax, points, labels, MARKER_AREA)
    if title:
        ax.set_title(title)


def _label(ax: Axes, points: np.ndarray, names: Sequence[str]) -> None:
    """The points' names, repelled from each other and from the markers (behavioral.analysis.figure_files.label_points)."""
    label_points(ax, points, names, marker=np.sqrt(MARKER_AREA) / 2 + 0.5)


def _grouped(labels: Sequence[str]) -> bool:
    """Whether some label holds several points (else each point's name says its label and a legend repeats it)."""
    return len(set(labels)) < len(labels)


def projection_title(method: str, source: str, n: int, events: int | None = None) -> str:
    """A projection panel's title: the method, the source (the layer, or behaviour) and the sample sizes."""
    return f"{METHOD_TITLES[method]}, {source}\n{n_text(identities=n, events=events)}"


@styled
def plot_projection_grid(panels: Sequence[tuple[str, str, np.ndarray]], labels: Sequence[str],
                         names: Sequence[str] | None = None, title: str | None = None,
                         events: int | None = None) -> Figure:
    """(method, source, points) panels in reading order, at most two to a row (one column wide for one panel, two
    for more), each titled with its method, source and n (the points, and the `events` behind them where given);
    one legend of labels, in the grid's spare cell or below; every point named, no two names overlapping."""
    rows, columns = grid_shape(len(panels))
    fig = new_figure(columns, PANEL_HEIGHT * rows + 0.5)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, (method, source, points) in zip(axes, panels):
        _draw_projection(ax, points, labels, projection_title(method, source, len(labels), events))
    for spare in axes[len(panels):]:
        spare.axis("off")
    if _grouped(labels):
        handles, texts = axes[0].get_legend_handles_labels()
        if len(axes) > len(panels):
            axes[-1].legend(handles, texts, loc="center", borderaxespad=0)
        else:
            legend_below(fig, handles, texts, columns=4 if columns > 1 else 2)
    if title:
        fig.suptitle(title)
    if names is not None:
        for ax, (_, _, points) in zip(axes, panels):
            _label(ax, np.asarray(points), names)
    return fig


def short_names(names: Sequence[str]) -> list[str]:
    """Point labels for a plot: the names without the words they all begin with (e.g. "a person from"), where
    every name keeps a word."""
    words = [name.split(" ") for name in names]
    shared = 0
    while all(len(w) > shared + 1 and w[shared] == words[0][shared] for w in words):
        shared += 1
    return [" ".join(w[shared:]) for w in words]


def layer_ticks(ax: Axes, layers: Sequence[int]) -> None:
    """Label a layer axis: at most about 8 ticks, the last layer kept, ``emb`` for the embeddings."""
    layers = list(layers)
    step = max(1, -(-len(layers) // 8))  # at most about 8 ticks
    shown = layers[::step]
    if layers and shown[-1] != layers[-1] and layers[-1] - shown[-1] >= step / 2:
        shown.append(layers[-1])
    ax.set_xticks(shown, ["emb" if l == table_layer(EMBED_HOOK) else str(l) for l in shown])
    ax.set_xlabel("layer (resid_post; emb = embeddings)")


def plot_against_null(ax: Axes, layers: np.ndarray, values, p, null_mean, null_q95, alpha: float,
                      label: str = "observed", test: str = "p") -> None:
    """A statistic across layers with its permutation null (the band from its mean to its 95th percentile), filled
    markers where p < `alpha`, layer ticks."""
    values = np.asarray(values)
    sig = np.asarray(p) < alpha
    color = PALETTE[0]
    ax.plot(layers, values, color=color, label=label)
    ax.scatter(layers[sig], values[sig], color=color, s=14, zorder=3, label=f"{test} < {alpha:g}")
    ax.scatter(layers[~sig], values[~sig], facecolors="white", edgecolors=color, s=14, zorder=3)
    ax.fill_between(layers, null_mean, null_q95, color=GREY, alpha=0.25, linewidth=0, label="null mean..95th pct")
    layer_ticks(ax, layers)


@styled
def plot_layer_stats(df: pd.DataFrame, title: str | None = None, reference: Mapping[str, float] | None = None,
                     alpha: float = 0.05, reference_label: str = "behaviour", events: int | None = None) -> Figure:
    """Silhouette and LOO kNN accuracy across layers, each with its permutation null (mean and 95th percentile);
    filled markers where p < `alpha`. `reference` (keys silhouette, knn_accuracy) draws a dashed line named
    `reference_label`, e.g. the statistics of the identities' behaviour. The title carries n: the identities, their
    groups, the `events` behind them where given, and the permutations."""
    fig = new_figure(2, 2.7)
    axes = fig.subplots(1, 2)
    x = df["layer"].to_numpy()
    panels = (("silhouette", "silhouette_p", "silhouette_null_mean", "silhouette_null_q95", "silhouette"),
              ("knn_accuracy", "knn_p", "knn_null_mean", "knn_null_q95", f"LOO {int(df['k'].iloc[0])}-NN accuracy"))
    for ax, (col, pcol, mean, q95, name) in zip(axes, panels):
        plot_against_null(ax, x, df[col], df[pcol], df[mean], df[q95], alpha)
        if col == "knn_accuracy" and "knn_ceiling" in df:
            ax.axhline(df["knn_ceiling"].iloc[0], color=GREY, linestyle=":", linewidth=1, label="ceiling")
        if reference is not None and col in reference:
            ax.axhline(reference[col], color=PALETTE[3], linestyle="--", linewidth=1, label=reference_label)
        ax.set_ylabel(name)
    legend_below(fig, *axes[1].get_legend_handles_labels(), columns=5)
    first = df.iloc[0]
    n = n_text(identities=int(first["n"]), groups=int(first["n_labels"]), events=events,
               permutations=int(first["n_permutations"]))
    fig.suptitle(f"{title}\n{n}" if title else n)
    return fig
