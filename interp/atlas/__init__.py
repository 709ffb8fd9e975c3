"""The identity atlas: whether identities that several sources share are the same states inside one model, layer by
layer. A source is one run's span kind (e.g. the persona that rates, or the group a judge is told the user belongs
to): a matrix of identity vectors per hook. A mapping names the concept each identity stands for.

Every source's vectors are centred on the source's mean identity first: the identities of one source sit in one
template ("a person from ..."), whose shared part would otherwise dominate every cosine; centring keeps what tells
the source's identities apart. Per hook, for the hooks every source has:

1. closeness: the cosine between a concept's (centred) vectors in two sources, and the rank of the matching identity
   among all identities of the other source by cosine to it (1: the match is the nearest). Mean cosine and mean rank
   over the shared concepts are tested against shuffling which concept maps to which; p_rank = rank / candidates is
   one concept's chance of a rank that good if its match were an identity drawn at random.
2. geometry RSA: Spearman r between the two sources' cosine-distance triangles over their shared concepts, one-sided
   Mantel p (interp.rsa).
3. behaviour RSA: one source's geometry against a source's behaviour per identity (Euclidean distance between the
   concepts' z-scored features, each feature z-scored over the concepts compared), once per block of the concepts
   that define the same features (a feature undefined for a concept, such as a rating on another category's grid,
   splits it off).

Every test draws the same seeded permutations at every hook, so p_fwe is the max-statistic family-wise adjustment
across hooks (behavioral.analysis.multiplicity). p_floor is the smallest p a test can give: 1 / k! for k concepts
(there are k! relabellings), or 1 / (permutations + 1) where that is larger. RSA needs 3 shared concepts (and 4 for a
Mantel p below 1/6); a pair with fewer is listed in `untestable` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from tqdm import tqdm

from activations.capture import select_layers
from behavioral.analysis.multiplicity import max_statistic
from behavioral.analysis.figure_style import (
    LABEL_SIZE, column_width, count_range, grid_shape, heatmap_ticks, n_text, new_figure, styled,
)
from interp.clusters import layer_numbers, p_value, plot_against_null
from interp.rsa import distance_matrix, mantel, mantel_permutations

MIN_RSA = 3  # shared concepts an RSA needs (3 pairs of distances)
TESTED = ["value", "p", "p_fwe", "p_floor", "null_mean", "null_q05", "null_q95"]
PAIR = ["source_a", "source_b", "hook", "layer", "statistic", "n_concepts"]
CONCEPT_COLUMNS = ["source_a", "source_b", "hook", "layer", "concept", "identity_a", "identity_b", "cosine", "rank",
                   "n_candidates", "p_rank"]
CLOSENESS_COLUMNS = [*PAIR, "chance", *TESTED]
GEOMETRY_COLUMNS = [*PAIR, *TESTED]
BEHAVIOUR_COLUMNS = [*PAIR, "n_features", "concepts", *TESTED]
UNTESTABLE_COLUMNS = ["analysis", "source_a", "source_b", "n_concepts", "reason"]


class Source(NamedTuple):
    """One source's identity vectors (hooks × identities × d_model), its identity names and hook names."""

    vectors: np.ndarray
    identities: Sequence[str]
    hooks: Sequence[str]


@dataclass(frozen=True)
class Atlas:
    """The atlas's tidy tables (columns as the module's *_COLUMNS) and the hooks compared.

    `concepts`: one row per ordered source pair, hook and shared concept. `closeness`: mean_cosine per unordered
    pair and mean_rank per ordered pair (the rank of source_b's identities from source_a's; `chance` is its expected
    value for a random match, (candidates + 1) / 2). `geometry`: RSA per unordered pair. `behaviour`: RSA of
    source_a's geometry with source_b's behaviour, per block of concepts. `untestable`: the pairs, analyses and
    concept blocks left out, with the reason."""

    concepts: pd.DataFrame
    closeness: pd.DataFrame
    geometry: pd.DataFrame
    behaviour: pd.DataFrame
    untestable: pd.DataFrame
    hooks: list[str]


@dataclass(frozen=True)
class _Prepared:
    """A source ready to compare: centred vectors on the common hooks and its concept -> identity index."""

    vectors: np.ndarray
    identities: list[str]
    index: dict[str, int]


def common_hooks(sources: Mapping[str, Source]) -> list[str]:
    """The hooks every source has, in the first source's order; a ValueError where there is none."""
    first, *others = sources.values()
    hooks = [h for h in first.hooks if all(h in s.hooks for s in others)]
    if not hooks:
        counts = "; ".join(f"{name}: {len(s.hooks)} hooks" for name, s in sources.items())
        raise ValueError(f"the sources share no hook ({counts}); expected captures of the same layers")
    return hooks


def _check(name: str, source: Source) -> None:
    """A ValueError unless a source is hooks × identities × d_model with at least 2 distinct identities."""
    vectors = np.asarray(source.vectors)
    if vectors.ndim != 3 or vectors.shape[:2] != (len(source.hooks), len(source.identities)):
        raise ValueError(f"source {name!r}: vectors of shape {vectors.shape} for {len(source.hooks)} hooks and "
                         f"{len(source.identities)} identities; expected hooks × identities × d_model")
    if len(set(source.identities)) != len(source.identities):
        raise ValueError(f"source {name!r}: identities repeat; expected one vector per identity")
    if len(source.identities) < 2:
        raise ValueError(f"source {name!r}: {len(source.identities)} identity; expected at least 2 (its vectors are "
                         "centred on their mean)")


def _concept_index(name: str, identities: Sequence[str], concept_of: Mapping[str, str]) -> dict[str, int]:
    """concept -> position of the identity that stands for it, in the source's identity order."""
    index: dict[str, int] = {}
    for i, identity in enumerate(identities):
        concept = concept_of.get(identity)
        if concept is None:
            continue
        if concept in index:
            raise ValueError(f"source {name!r}: identities {identities[index[concept]]!r} and {identity!r} both map "
                             f"to concept {concept!r}; expected one identity per concept")
        index[concept] = i
    return index


def shared_concepts(sources: Mapping[str, Source], mapping: Mapping[str, Mapping[str, str]]) -> pd.DataFrame:
    """The concepts each unordered pair of sources shares: source_a, source_b, n_concepts, concepts (comma list,
    in source_a's identity order)."""
    index = {n: _concept_index(n, s.identities, mapping.get(n, {})) for n, s in sources.items()}
    names = list(sources)
    rows = [(a, b, [c for c in index[a] if c in index[b]]) for i, a in enumerate(names) for b in names[i + 1:]]
    return pd.DataFrame([{"source_a": a, "source_b": b, "n_concepts": len(shared), "concepts": ", ".join(shared)}
                         for a, b, shared in rows], columns=["source_a", "source_b", "n_concepts", "concepts"])


def _prepare(name: str, source: Source, hooks: Sequence[str], concept_of: Mapping[str, str]) -> _Prepared:
    """Centre a source on its mean identity at each hook and index its mapped identities by concept."""
    rows = [list(source.hooks).index(h) for h in hooks]
    vectors = np.asarray(source.vectors, dtype=np.float64)[rows]
    return _Prepared(vectors - vectors.mean(1, keepdims=True), list(source.identities),
                     _concept_index(name, source.identities, concept_of))


def _unit(X: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return X / norms


def _tested(observed: np.ndarray, null: np.ndarray, k: int, larger: bool = True) -> dict[str, np.ndarray]:
    """Per-hook p (one-sided, towards `larger` or smaller values), p_fwe (max statistic over the hooks), p_floor
    (the smallest p the test can give: 1 / k! for k concepts, 1 / (permutations + 1)) and the null's mean and
    5th/95th percentiles, from observed[hooks] and null[hooks, permutations]."""
    if null.shape[1] == 0:  # one concept: there is nothing to relabel
        nan = np.full(len(observed), np.nan)
        return {"value": observed, "p": nan, "p_fwe": nan, "p_floor": np.ones(len(observed)), "null_mean": nan,
                "null_q05": nan, "null_q95": nan}
    sign = 1.0 if larger else -1.0
    p = [p_value(sign * o, sign * n) if np.isfinite(o) else np.nan for o, n in zip(observed, null)]
    floor = max(1 / math.factorial(k), 1 / (null.shape[1] + 1))
    return {"value": observed, "p": np.array(p), "p_fwe": max_statistic(sign * observed, sign * null),
            "p_floor": np.full(len(observed), floor), "null_mean": null.mean(1),
            "null_q05": np.quantile(null, 0.05, axis=1), "null_q95": np.quantile(null, 0.95, axis=1)}


def _frame(keys: dict, hooks: Sequence[str], columns: dict[str, np.ndarray], order: list[str]) -> pd.DataFrame:
    """Rows per hook of one test: the pair's keys, hook and layer, and the per-hook columns."""
    return pd.DataFrame({**keys, "hook": list(hooks), "layer": layer_numbers(hooks), **columns})[order]


def _closeness(a: _Prepared, b: _Prepared, shared: list[str], n_permutations: int,
              seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per hook and shared concept, the cosine of a's vector with b's matching one and that match's rank among b's
    identities (1: nearest); and per hook the null of the mean cosine and mean rank under shuffled matches
    ([hooks, permutations] each)."""
    rows = [a.index[c] for c in shared]
    match = np.array([b.index[c] for c in shared])
    cos = np.einsum("hkd,hnd->hkn", _unit(a.vectors[:, rows]), _unit(b.vectors))  # hooks × concepts × candidates
    ranks = 1 + (cos[:, :, None, :] > cos[:, :, :, None]).sum(-1)  # rank of each candidate for each concept
    k = np.arange(len(shared))
    perms = match[mantel_permutations(len(shared), n_permutations, seed)]  # permutations × concepts
    return (cos[:, k, match], ranks[:, k, match], cos[:, k, perms].mean(-1), ranks[:, k, perms].mean(-1))


def _mantel_by_hook(pairs: Sequence[tuple[np.ndarray, np.ndarray]], n_permutations: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mantel RSA of each hook's pair of distance matrices and its null, the same permutations at every hook."""
    results = [mantel(D1, D2, n_permutations, seed, return_null=True) for D1, D2 in pairs]
    return np.array([r for r, _, _ in results]), np.vstack([null for _, _, null in results])


def feature_blocks(table: pd.DataFrame, identities: Mapping[str, str]) -> list[pd.DataFrame]:
    """A source's behaviour (`table`: identity -> features) for the concepts `identities` names (concept ->
    identity), in blocks of the concepts that define the same features (e.g. one category's identities, rated on that
    category's grid): each block indexed by concept, with those of its features that vary over it. Concepts without
    behaviour are left out."""
    rows = table.reindex(list(identities.values())).astype(float).set_axis(list(identities))
    defined = [tuple(flags) for flags in rows.notna().to_numpy()]
    blocks = []
    for key in dict.fromkeys(k for k in defined if any(k)):
        block = rows.loc[[c for c, k in zip(rows.index, defined) if k == key], list(key)]
        blocks.append(block.loc[:, block.std(ddof=0) > 0])
    return blocks


def atlas(sources: Mapping[str, Source], mapping: Mapping[str, Mapping[str, str]],
          behaviour: Mapping[str, pd.DataFrame] | None = None, n_permutations: int = 1000, seed: int = 0,
          progress: bool = False) -> Atlas:
    """The atlas of `sources` (name -> Source, one model's states) whose identities `mapping` (source -> identity
    -> concept) names; identities it leaves out stay among the rank candidates. `behaviour` (source -> frame indexed
    by identity, one float column per feature) adds the behaviour RSA."""
    if len(sources) < 2:
        raise ValueError(f"the atlas compares sources; got {len(sources)} ({', '.join(sources) or 'none'}), "
                         "expected at least 2")
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be at least 1, got {n_permutations}")
    for name, source in sources.items():
        _check(name, source)
    widths = {name: np.shape(s.vectors)[2] for name, s in sources.items()}
    if len(set(widths.values())) > 1:
        raise ValueError(f"sources differ in d_model ({', '.join(f'{n}: {d}' for n, d in widths.items())}); "
                         "expected the states of one model")
    hooks = common_hooks(sources)
    prepared = {n: _prepare(n, s, hooks, mapping.get(n, {})) for n, s in sources.items()}
    behaviour = behaviour or {}
    tables: dict[str, list] = {"concepts": [], "closeness": [], "geometry": [], "behaviour": [], "untestable": []}
    names = list(sources)
    pairs = [(a, b) for a in names for b in names if a != b]
    for a, b in tqdm(pairs, desc="atlas", unit="pair", disable=not progress):
        _pair(a, b, prepared, hooks, n_permutations, seed, tables, first=names.index(a) < names.index(b))
        if b in behaviour:
            _behaviour(a, b, prepared, behaviour[b], hooks, n_permutations, seed, tables)
    for a in names:
        if a in behaviour:
            _behaviour(a, a, prepared, behaviour[a], hooks, n_permutations, seed, tables)
    columns = {"concepts": CONCEPT_COLUMNS, "closeness": CLOSENESS_COLUMNS, "geometry": GEOMETRY_COLUMNS,
               "behaviour": BEHAVIOUR_COLUMNS}
    frames = {key: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns[key])
              for key, parts in tables.items() if key != "untestable"}
    return Atlas(**frames, untestable=pd.DataFrame(tables["untestable"], columns=UNTESTABLE_COLUMNS), hooks=hooks)


def _pair(a: str, b: str, prepared: Mapping[str, _Prepared], hooks: Sequence[str], n_permutations: int, seed: int,
          tables: dict[str, list], first: bool) -> None:
    """Closeness of the ordered pair (a, b); where a comes `first`, the pair's mean cosine and geometry RSA (both
    symmetric) and the reasons it is not testable."""
    pa, pb = prepared[a], prepared[b]
    shared = [c for c in pa.index if c in pb.index]
    k = len(shared)
    keys = {"source_a": a, "source_b": b}
    if first and k < MIN_RSA:
        reason = "no shared concept" if k == 0 else f"{k} shared concept{'s' * (k > 1)}; RSA needs {MIN_RSA}"
        tables["untestable"].append({"analysis": "geometry", **keys, "n_concepts": k, "reason": reason})
        if k == 1:
            tables["untestable"].append({"analysis": "closeness p", **keys, "n_concepts": k,
                                         "reason": "1 shared concept; shuffling the matches needs 2"})
    if k == 0:
        return
    cos, ranks, null_cos, null_rank = _closeness(pa, pb, shared, n_permutations, seed)
    layers = layer_numbers(hooks)
    tables["concepts"].append(pd.DataFrame({
        **keys, "hook": np.repeat(hooks, k), "layer": np.repeat(layers, k), "concept": shared * len(hooks),
        "identity_a": [pa.identities[pa.index[c]] for c in shared] * len(hooks),
        "identity_b": [pb.identities[pb.index[c]] for c in shared] * len(hooks),
        "cosine": cos.ravel(), "rank": ranks.ravel(), "n_candidates": len(pb.identities),
        "p_rank": ranks.ravel() / len(pb.identities)})[CONCEPT_COLUMNS])
    statistics = [("mean_rank", ranks.mean(1), null_rank, False, (len(pb.identities) + 1) / 2)]
    if first:
        statistics.insert(0, ("mean_cosine", cos.mean(1), null_cos, True, np.nan))
    for statistic, observed, null, larger, chance in statistics:
        tested = _tested(observed, null, k, larger)
        tables["closeness"].append(_frame(keys | {"statistic": statistic, "n_concepts": k, "chance": chance},
                                          hooks, tested, CLOSENESS_COLUMNS))
    if first and k >= MIN_RSA:
        rows_a, rows_b = [pa.index[c] for c in shared], [pb.index[c] for c in shared]
        observed, null = _mantel_by_hook([(distance_matrix(Xa[rows_a]), distance_matrix(Xb[rows_b]))
                                          for Xa, Xb in zip(pa.vectors, pb.vectors)], n_permutations, seed)
        tables["geometry"].append(_frame(keys | {"statistic": "rsa", "n_concepts": k}, hooks,
                                         _tested(observed, null, k), GEOMETRY_COLUMNS))


def _behaviour(a: str, b: str, prepared: Mapping[str, _Prepared], table: pd.DataFrame, hooks: Sequence[str],
               n_permutations: int, seed: int, tables: dict[str, list]) -> None:
    """RSA of source a's geometry with source b's behaviour, per block of the concepts both name that define the
    same features in b's behaviour (feature_blocks)."""
    pa, pb = prepared[a], prepared[b]
    keys = {"source_a": a, "source_b": b}
    for block in feature_blocks(table, {c: pb.identities[pb.index[c]] for c in pa.index if c in pb.index}):
        k, named = len(block), ", ".join(block.index)
        if k < MIN_RSA or block.shape[1] == 0:
            reason = f"{named}: {k} concept{'s' * (k > 1)} with these features; RSA needs {MIN_RSA}" \
                if k < MIN_RSA else f"{named}: no feature varies over these concepts"
            tables["untestable"].append({"analysis": "behaviour", **keys, "n_concepts": k, "reason": reason})
            continue
        z = (block - block.mean()) / block.std(ddof=0)
        D_behaviour = distance_matrix(z.to_numpy(), "euclidean")
        rows = [pa.index[c] for c in block.index]
        observed, null = _mantel_by_hook([(distance_matrix(X[rows]), D_behaviour) for X in pa.vectors],
                                         n_permutations, seed)
        tables["behaviour"].append(_frame(keys | {"statistic": "rsa", "n_concepts": k, "n_features": block.shape[1],
                                                  "concepts": named}, hooks, _tested(observed, null, k),
                                          BEHAVIOUR_COLUMNS))


# --- figures ----------------------------------------------------------------------------------------------------


def test_keys(frame: pd.DataFrame) -> list[str]:
    """The columns that name one test of an atlas table (its rows are that test's hooks)."""
    return [c for c in ("source_a", "source_b", "statistic", "concepts") if c in frame.columns]


@styled
def plot_layers(frame: pd.DataFrame, ylabel: str, title: str, alpha: float = 0.05, columns: int = 3) -> Figure:
    """One panel per test of a closeness, geometry or behaviour table (test_keys), `columns` to a row two columns
    wide: the statistic across layers with its null band (mean to 95th percentile, or to the 5th for mean_rank,
    where smaller is closer), filled markers where p_fwe < `alpha`, and the chance rank as a dashed line; each
    panel titled with the concepts it compares."""
    tests = list(frame.groupby(test_keys(frame), sort=False))
    if not tests:
        raise ValueError(f"{title}: no rows to plot")
    nrows, ncols = grid_shape(len(tests), columns)
    fig = new_figure(2, 2.3 * nrows + 0.4)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (key, rows) in zip(axes, tests):
        smaller = key[2] == "mean_rank"
        plot_against_null(ax, rows["layer"].to_numpy(), rows["value"], rows["p_fwe"], rows["null_mean"],
                          rows["null_q05" if smaller else "null_q95"], alpha, test="p_fwe")
        if smaller:
            ax.collections[-1].set_label("null mean..5th pct")
            ax.axhline(rows["chance"].iloc[0], color="black", linestyle="--", linewidth=0.8, label="chance")
            ax.invert_yaxis()
        concepts = f"\n{key[3][:60]}" if len(key) > 3 else ""
        n = n_text(concepts=count_range(rows["n_concepts"]))
        ax.set_title(f"{key[0]}\nvs {key[1]}{concepts}\n{n}", fontsize=LABEL_SIZE)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=LABEL_SIZE - 0.5, loc="best")
    for ax in axes[len(tests):]:
        ax.set_visible(False)
    fig.suptitle(title)
    return fig


@styled
def plot_heatmap(geometry: pd.DataFrame, sources: Sequence[str], hook: int | str, alpha: float = 0.05) -> Figure:
    """Source × source RSA at one layer of the table (activations.capture.select_layers over its hooks: a hook name,
    or a block, -1 the last): r and the number of shared concepts in each cell, * where p_fwe < `alpha`, grey on the
    diagonal and where the pair was not testable; one column wide for up to four sources."""
    named = select_layers(hook, list(dict.fromkeys(geometry["hook"])), "hook", "tested")
    if len(named) != 1:
        raise ValueError(f"hook {hook!r} names {len(named)} hooks; expected one")
    hook = named[0]
    rows = geometry[geometry["hook"] == hook]
    n = len(sources)
    M = np.full((n, n), np.nan)
    labels = np.full((n, n), "", dtype=object)
    for a, b, r, p, k in zip(rows["source_a"], rows["source_b"], rows["value"], rows["p_fwe"], rows["n_concepts"]):
        i, j = sources.index(a), sources.index(b)
        M[i, j] = M[j, i] = r
        labels[i, j] = labels[j, i] = f"{r:.2f}{'*' if p < alpha else ''}\n(n={k})"
    columns = 1 if n <= 4 else 2
    fig = new_figure(columns, 0.85 * column_width(columns) + 0.5)
    ax = fig.subplots()
    ax.set_facecolor("0.85")
    image = ax.imshow(np.ma.masked_invalid(M), cmap="RdBu_r", vmin=-1, vmax=1)
    for i in range(n):
        for j in range(n):
            if labels[i, j]:
                ax.text(j, i, labels[i, j], ha="center", va="center", fontsize=LABEL_SIZE,
                        color="white" if abs(M[i, j]) > 0.6 else "black")
    fig.colorbar(image, ax=ax, label="RSA (Spearman r)")
    ax.set_title(f"RSA between sources at {hook} (* p_fwe < {alpha:g}; grey: not testable)\n"
                 f"{n_text(concepts=count_range(rows['n_concepts']))} per pair")
    heatmap_ticks(ax, sources, sources)
    return fig
