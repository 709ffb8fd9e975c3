"""Representational similarity between identity vectors and behaviour.

Per layer, the distance matrix of the identity vectors (cosine, after centring over identities, by default) is
compared with the distance matrix of the identities' behaviour rows (euclidean by default: e.g. how differently two
personas rate every experiencer). The RSA score is the Spearman correlation over the upper triangle (pairs i < j); its
Mantel p-value permutes the identities of one matrix (rows and columns together) and is one-sided for a positive
association: p = (1 + #{null >= r}) / (permutations + 1), over every relabelling where there are no more than
n_permutations + 1 of them (then exact, floor 1 / n!). The partial Mantel test does the same with a control
matrix (e.g. how much two identities differ in token count, or whether they share a label) partialled out of both.
Across layers, p_fwe is the max-statistic family-wise p over the same permutations.

The behaviour side is estimated from a sample of events, so its own reliability bounds any RSA with it: the
split-half noise ceiling correlates the behaviour distances of two random halves of the events and corrects that to
the whole sample (Spearman-Brown).
"""

from __future__ import annotations

import itertools
import math

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy.spatial.distance import pdist, squareform
from scipy.stats import rankdata
from tqdm import tqdm

from behavioral.analysis.multiplicity import holm, max_statistic
from behavioral.analysis.figure_style import LABEL_SIZE, n_text, new_figure, styled
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
    """The relabellings of the points `mantel` compares with ([permutations, n]): every one but the identity where
    n! - 1 <= n_permutations, so the p-value (1 + #{null >= observed}) / (len(null) + 1) is the exact one, whose
    floor is 1 / n! (a sample would put p below it); else n_permutations seeded draws."""
    if math.factorial(n) - 1 <= n_permutations:
        return np.array(list(itertools.permutations(range(n)))[1:], dtype=np.int64).reshape(-1, n)
    rng = np.random.default_rng(seed)
    return rng.permuted(np.tile(np.arange(n), (n_permutations, 1)), axis=1)


def _permuted(D: np.ndarray, n_permutations: int, seed: int) -> tuple[np.ndarray, Iterator[np.ndarray]]:
    """The standardized ranks of D's upper triangle, and those of D with its points relabelled by each of
    `mantel_permutations` (chunks of [permutations, pairs]).

    Relabelling the points only reorders the upper-triangle values, so their ranks are computed once and each
    permutation costs one gather."""
    n = len(D)
    iu = np.triu_indices(n, k=1)
    R = np.zeros((n, n))
    R[iu] = _standard(rankdata(D[iu]))
    R = R + R.T  # symmetric matrix of D's standardized off-diagonal ranks
    perms = mantel_permutations(n, n_permutations, seed)
    step = max(1, _CHUNK // (n * n))
    chunks = (R[p[:, :, None], p[:, None, :]][:, iu[0], iu[1]] for p in np.split(perms, range(step, len(perms), step)))
    return R[iu], chunks


def _check_permutations(n_permutations: int) -> None:
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be at least 1, got {n_permutations}")


def mantel(D1: np.ndarray, D2: np.ndarray, n_permutations: int = 1000, seed: int = 0,
           return_null: bool = False) -> tuple[float, float] | tuple[float, float, np.ndarray]:
    """RSA of D1 and D2 and its one-sided Mantel p-value: D2's rows and columns are permuted together.
    `return_null` adds the null correlations."""
    D1, D2 = _check_pair(D1, D2)
    _check_permutations(n_permutations)
    a = _standard(rankdata(_upper(D1)))
    b, chunks = _permuted(D2, n_permutations, seed)
    r = float(a @ b)
    null = np.concatenate([chunk @ a for chunk in chunks])
    p_val = p_value(r, null) if np.isfinite(r) else float("nan")
    return (r, p_val, null) if return_null else (r, p_val)


def _partial(r_ab, r_az: float, r_bz):
    """Correlation of a and b with z partialled out of both, from the three pairwise correlations."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (r_ab - r_az * r_bz) / np.sqrt((1 - r_az ** 2) * (1 - r_bz ** 2))


def partial_mantel(D1: np.ndarray, D2: np.ndarray, Z: np.ndarray, n_permutations: int = 1000, seed: int = 0,
                   return_null: bool = False) -> tuple[float, float] | tuple[float, float, np.ndarray]:
    """Partial Mantel test: the Spearman correlation of D1 and D2 with the control matrix Z partialled out of both,
    and its one-sided p-value from permuting D2's points (the permutations of `mantel`), as vegan's mantel.partial
    computes it with method="spearman". NaN where Z is constant or ranks like D1 or D2 exactly."""
    D1, D2 = _check_pair(D1, D2)
    _, Z = _check_pair(D1, Z)
    _check_permutations(n_permutations)
    a, z = _standard(rankdata(_upper(D1))), _standard(rankdata(_upper(Z)))
    r_az = float(a @ z)
    b, chunks = _permuted(D2, n_permutations, seed)
    r = float(_partial(a @ b, r_az, b @ z))
    null = np.concatenate([_partial(chunk @ a, r_az, chunk @ z) for chunk in chunks])
    p_val = p_value(r, null) if np.isfinite(r) else float("nan")
    return (r, p_val, null) if return_null else (r, p_val)


def difference_matrix(values: Sequence[float]) -> np.ndarray:
    """Square matrix |v_i - v_j| of a per-point quantity, e.g. the token count of each persona (a control for
    `partial_mantel`)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"expected one value per point, got shape {v.shape}")
    return np.abs(v[:, None] - v[None, :])


def label_matrix(labels: Sequence) -> np.ndarray:
    """Square matrix of 0 where two points share a label and 1 where they do not, e.g. identities by the first token
    of their name (a lexical control for `partial_mantel`)."""
    labels = np.asarray(labels, dtype=object)
    if labels.ndim != 1:
        raise ValueError(f"expected one label per point, got shape {labels.shape}")
    return (labels[:, None] != labels[None, :]).astype(np.float64)


def layer_rsa(
    vectors: np.ndarray,
    behaviour: np.ndarray,
    hooks: Sequence[str] | None = None,
    metric: str = "cosine",
    behavior_metric: str = "euclidean",
    center: bool = True,
    n_permutations: int = 1000,
    seed: int = 0,
    control: np.ndarray | None = None,
    progress: bool = False,
    controls: Mapping[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """RSA per layer between identity vectors [layers × n × d] and behaviour rows [n × features] (the same n
    identities in the same order, e.g. the personas' rows of a rating matrix).

    One row per layer: hook, layer, rsa (Spearman r), p (Mantel, one-sided), p_fwe, p_holm, null_mean, null_q95, n,
    metric, behavior_metric, n_permutations. Identity vectors are centred over the identities of each layer
    (`center`); every layer is tested against the same permutations, so p_fwe is the max-statistic family-wise
    adjustment over the layers (the largest r of any layer under each permutation), p_holm Holm's over the layers;
    each p is followed by its p_fwe and p_holm. `control`, an [n × n] distance matrix such as
    `difference_matrix(token counts)`, adds the partial Mantel test with it partialled out: partial_rsa, partial_p,
    partial_p_fwe, partial_p_holm, partial_null_mean, partial_null_q95; each entry NAME of `controls` adds the same
    columns prefixed NAME_partial_ (e.g. first_token_partial_rsa).
    """
    vectors = np.asarray(vectors)
    behaviour = np.asarray(behaviour)
    if vectors.ndim != 3:
        raise ValueError(f"identity vectors must be layers × identities × d_model, got shape {vectors.shape}")
    if behaviour.ndim != 2 or len(behaviour) != vectors.shape[1]:
        raise ValueError(f"behaviour rows of shape {behaviour.shape} for {vectors.shape[1]} identities")
    hooks = list(hooks) if hooks is not None else [f"layer_{i}" for i in range(len(vectors))]
    if len(hooks) != len(vectors):
        raise ValueError(f"{len(hooks)} hook names for {len(vectors)} layers")
    partials = ({"partial_": control} if control is not None else {}) | {
        f"{name}_partial_": Z for name, Z in (controls or {}).items()}
    D_behaviour = distance_matrix(behaviour, behavior_metric)
    rows, nulls = [], {"": []} | {prefix: [] for prefix in partials}
    layers = tqdm(zip(hooks, layer_numbers(hooks), vectors), total=len(hooks), desc="RSA", unit="layer",
                  disable=not progress)
    for hook, layer, X in layers:
        D_vectors = distance_matrix(X, metric, center)
        r, p, null = mantel(D_vectors, D_behaviour, n_permutations, seed, return_null=True)
        row = {"hook": hook, "layer": layer, "rsa": r, "p": p, **_null_summary(null), "n": vectors.shape[1],
               "metric": metric, "behavior_metric": behavior_metric, "n_permutations": n_permutations}
        nulls[""].append(null)
        for prefix, Z in partials.items():
            r, p, null = partial_mantel(D_vectors, D_behaviour, Z, n_permutations, seed, return_null=True)
            row |= {f"{prefix}rsa": r, f"{prefix}p": p} | {f"{prefix}{k}": v for k, v in _null_summary(null).items()}
            nulls[prefix].append(null)
        rows.append(row)
    table = pd.DataFrame(rows)
    for prefix, null in nulls.items():
        statistic = table[f"{prefix}rsa"].to_numpy(dtype=float)
        table[f"{prefix}p_fwe"] = max_statistic(statistic, np.vstack(null))
        table[f"{prefix}p_holm"] = holm(table[f"{prefix}p"])
    return table[_corrections_beside(list(table.columns))]


def _corrections_beside(columns: list[str]) -> list[str]:
    """`columns` with each p's p_fwe and p_holm right after it."""
    adjusted = {c for c in columns if c.endswith(("p_fwe", "p_holm"))}
    order = []
    for column in (c for c in columns if c not in adjusted):
        order += [column] + [f"{column}{suffix}" for suffix in ("_fwe", "_holm") if f"{column}{suffix}" in adjusted]
    return order


def _null_summary(null: np.ndarray) -> dict[str, float]:
    return {"null_mean": float(np.nanmean(null)), "null_q95": float(np.nanquantile(null, 0.95))}


def spearman_brown(r: float | np.ndarray, parts: float = 2.0) -> float | np.ndarray:
    """The reliability of data `parts` times as long as the parts whose correlation is r (the Spearman-Brown
    prophecy formula): parts·r / (1 + (parts - 1)·r); for two halves, 2r / (1 + r)."""
    r = np.asarray(r, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = parts * r / (1 + (parts - 1) * r)
    return float(out) if out.ndim == 0 else out


def split_halves(n: int, n_splits: int, seed: int = 0) -> np.ndarray:
    """[splits, n] bool masks of `n` items (events) split in two: True marks one half (n // 2 items), False the other.
    Every distinct split (a split and its complement are one) where there are no more than `n_splits` of them, else
    `n_splits` distinct seeded draws."""
    if n < 2:
        raise ValueError(f"a split in halves needs at least 2 items, got {n}")
    if n_splits < 1:
        raise ValueError(f"the number of splits must be at least 1, got {n_splits}")
    size = n // 2
    distinct = math.comb(n, size) // (2 if 2 * size == n else 1)
    if distinct <= n_splits:
        combos = (c for c in itertools.combinations(range(n), size) if 2 * size < n or 0 in c)
        halves = [list(c) for c in combos]
    else:
        rng, seen = np.random.default_rng(seed), {}
        while len(seen) < n_splits:
            half = frozenset(int(i) for i in rng.permutation(n)[:size])
            if 2 * size == n and 0 not in half:
                half = frozenset(range(n)) - half  # the half holding item 0 names an even split
            seen.setdefault(half, None)
        halves = [sorted(h) for h in seen]
    masks = np.zeros((len(halves), n), dtype=bool)
    for row, half in zip(masks, halves):
        row[half] = True
    return masks


@dataclass(frozen=True)
class Ceiling:
    """Split-half reliability of a distance matrix estimated from data (the behaviour of a sample of events): per
    split, the Spearman r of the upper triangles of the two halves' matrices (NaN where a half defines none) and its
    Spearman-Brown correction to the whole sample; summarized by the mean and a percentile interval over the
    splits. The interval is the spread over splits of one sample, not a confidence interval over samples."""

    half_r: np.ndarray
    level: float = 0.95

    @property
    def reliability(self) -> np.ndarray:
        """Each split's reliability of the whole sample's matrix (Spearman-Brown, two halves)."""
        return np.asarray(spearman_brown(self.half_r), dtype=np.float64).reshape(-1)

    @property
    def n_defined(self) -> int:
        """Splits whose halves both gave a matrix and a correlation."""
        return int(np.isfinite(self.reliability).sum())

    @property
    def mean(self) -> float:
        """The mean reliability over the defined splits (NaN: none)."""
        values = self.reliability[np.isfinite(self.reliability)]
        return float(values.mean()) if len(values) else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        """The central `level` percentile interval of the splits' reliabilities."""
        values = self.reliability[np.isfinite(self.reliability)]
        if not len(values):
            return float("nan"), float("nan")
        low, high = np.quantile(values, [(1 - self.level) / 2, (1 + self.level) / 2])
        return float(low), float(high)


def noise_ceiling(halves: Iterable[tuple[np.ndarray, np.ndarray] | None], level: float = 0.95) -> Ceiling:
    """The split-half noise ceiling from each split's pair of distance matrices (the two halves' behaviour
    distances over the same points; None: a half defined none): their RSA (Spearman, as the RSA itself), corrected by
    Spearman-Brown, over the splits."""
    return Ceiling(np.array([np.nan if pair is None else rsa(*pair) for pair in halves], dtype=np.float64), level)


def against_ceiling(r: float, reliability: float) -> float:
    """An RSA r over the highest r the behaviour's reliability allows, sqrt(reliability) (the geometry side is
    computed, not sampled, so Spearman's correction for attenuation divides by the behaviour's alone); NaN where the
    reliability is not positive, where no r can be compared with it."""
    return r / math.sqrt(reliability) if np.isfinite(reliability) and reliability > 0 else float("nan")


@styled
def plot_rsa(df: pd.DataFrame, title: str | None = None, alpha: float = 0.05, events: int | None = None) -> Figure:
    """Spearman r between identity and behaviour distances across layers, with the Mantel null's mean and 95th
    percentile; filled markers where p_fwe (family-wise over the layers) < `alpha`; the partial Mantel curve beside
    it where `df` has one. The title carries n: the identities, the `events` behind the behaviour where given, and
    the permutations."""
    partial = "partial_rsa" in df
    fig = new_figure(2 if partial else 1, 2.8)
    axes = fig.subplots(1, 2 if partial else 1, squeeze=False)[0]
    layers = df["layer"].to_numpy()
    plot_against_null(axes[0], layers, df["rsa"], df["p_fwe"], df["null_mean"], df["null_q95"], alpha,
                      "RSA (Spearman r)", "Mantel p_fwe")
    axes[0].set_ylabel("Spearman r, identities vs behaviour")
    if partial:
        plot_against_null(axes[1], layers, df["partial_rsa"], df["partial_p_fwe"], df["partial_null_mean"],
                          df["partial_null_q95"], alpha, "partial RSA", "partial Mantel p_fwe")
        axes[1].set_ylabel("partial r, token count held out")
        shown = df[["rsa", "null_mean", "null_q95", "partial_rsa", "partial_null_mean", "partial_null_q95"]]
        lo, hi = float(np.nanmin(shown.to_numpy())), float(np.nanmax(shown.to_numpy()))
        pad = 0.05 * (hi - lo) or 0.05
        for ax in axes:  # one scale for both panels, every curve inside it
            ax.set_ylim(min(lo, 0) - pad, hi + pad)
    for ax in axes:
        ax.axhline(0, color="black", linewidth=0.5)
        ax.legend(fontsize=LABEL_SIZE, loc="best")
    first = df.iloc[0]
    n = n_text(identities=int(first["n"]), events=events, permutations=int(first["n_permutations"]))
    fig.suptitle(f"{title}\n{n}" if title else n)
    return fig
