"""The clusters study (`empathy-gap interp clusters RUN_DIR...`): do a span kind's identity vectors cluster by the
suite's grouping of its identities (intergroup's Inglehart-Welzel zones or race groups), layer by layer, and how do
they and the identities' behaviour look in 2-D? The numbers are interp.clusters'; this module reads the runs through
their suites' hooks and writes the report."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from activations.capture import EMBED_HOOK, LAYER_GRAMMAR, hook_layer, select_hooks
from activations.store import REDUCTIONS, load
from behavioral.report.formats import literal
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Analysis, Figure, Section, Table, scope
from behavioral.core.options import SEED, check_bounds, option
from behavioral.core.selection import field_values
from interp.identities import (
    WHERE_HELP, Identities, behaviour_rows, parse_where, read_identities, span_kind, suite_of, where_text,
)
from behavioral.analysis.study import Study
from interp import clusters
from interp.rsa.reliability import split_field

BEHAVIOUR_METRIC = "euclidean"  # between behaviour rows, for projections and cluster statistics
COUNTS = {"n": "count", "n_labels": "count", "n_features": "count"}


@dataclass(frozen=True)
class Options:
    """Which identities are clustered (span kind, selection, reduction), at which layers, how (distance, k, methods)
    and against how many label permutations."""

    kind: str | None = option(None, "span kind whose identities are clustered; none: the first span kind of each "
                                    "run's suite", metavar="KIND")
    where: tuple[str, ...] = option((), WHERE_HELP, metavar="FIELD=VALUE")
    reduction: str = option("mean", "a span's state: the mean over its tokens or its last token's",
                            choices=REDUCTIONS)
    layers: str = option("all", f"layers of the cluster statistics: {LAYER_GRAMMAR}", metavar="LAYERS")
    project: str = option("first,middle,last", "layers drawn as 2-D projections (the same grammar)",
                          metavar="LAYERS")
    methods: tuple[str, ...] = option(("tsne",), "projection methods (umap needs umap-learn)",
                                      choices=clusters.METHODS, metavar="METHOD")
    metric: str = option("cosine", "distance between identity vectors, centred over the identities of each layer",
                         choices=clusters.METRICS)
    k: int = option(3, "neighbours of the leave-one-out kNN accuracy", metavar="K", minimum=1)
    permutations: int = option(1000, "label permutations of every p-value (the same ones at every layer)",
                               metavar="N", minimum=1)
    seed: int = option(0, "seed of the permutations and the projections", metavar="N", **SEED)

    def __post_init__(self):
        check_bounds(self)
        for name, value, known in (("--reduction", self.reduction, REDUCTIONS),
                                   ("--metric", self.metric, clusters.METRICS)):
            if value not in known:
                raise ValueError(f"{name} {value!r}; expected one of {', '.join(known)}")
        unknown = [m for m in self.methods if m not in clusters.METHODS]
        if unknown or not self.methods:
            raise ValueError(f"--methods {','.join(self.methods) or 'none'}; expected some of "
                             f"{', '.join(clusters.METHODS)}")
        parse_where(self.where)


@dataclass(frozen=True)
class Read:
    """One run as the study reads it: its identities, the hooks tested and drawn, its behaviour rows (None, with a
    note, where its suite declares none), the selection and how many events its selected rows hold (None where the
    rows name no events; the figures' titles carry it)."""

    identities: Identities
    tested: list[str]
    projected: list[str]
    behaviour: np.ndarray | None
    features: list[str]
    note: str | None
    where: dict
    events: int | None


@functools.lru_cache(maxsize=1)
def read(runs: tuple[Run, ...], options: Options) -> list[Read]:
    """Every run's identities, hooks and behaviour. Cached: plan and analyze share one read."""
    where, out = parse_where(options.where), []
    for run in runs:
        identities = read_identities(load(run.run_dir), suite_of(run), span_kind(run, options.kind),
                                     options.reduction, where)
        hooks = identities.store.hooks
        tested = select_hooks(options.layers, hooks, "--layers")
        projected = select_hooks(options.project, hooks, "--project")
        try:
            behaviour, features = behaviour_rows(run, identities.kind, identities.names, where)
            note = None
        except NotImplementedError as err:
            behaviour, features, note = None, [], f"{literal(run.name)}: no behaviour ({err})"
        out.append(Read(identities, tested, projected, behaviour, features, note, where, _events(run, where)))
    return out


def _events(run: Run, where: dict) -> int | None:
    """How many events the rows `where` selects hold (the rsa study's event field), None where they name none."""
    field = split_field(run, None)
    return None if field is None else len(field_values(run.rows, field, where, "the run's rows"))


def _rows(identities: Identities, hooks: Sequence[str]) -> np.ndarray:
    """The identity vectors at `hooks` (hooks × identities × d_model)."""
    return identities.vectors[[identities.store.hooks.index(h) for h in hooks]]


def _hook_title(hook: str) -> str:
    return "embeddings" if hook == EMBED_HOOK else f"layer {hook_layer(hook)}"


def _projections(run: Run, r: Read, options: Options) -> tuple[pd.DataFrame, list[tuple[str, str, np.ndarray]]]:
    """The 2-D coordinates of every projected layer and of the behaviour rows, by method, as a table and as
    (method, source, points) panels."""
    ids = r.identities
    sources = [(f"{ids.kind}, {_hook_title(h)}", h, X, options.metric, True)
               for h, X in zip(r.projected, _rows(ids, r.projected))]
    if r.behaviour is not None and r.behaviour.shape[1] > 1:  # a projection needs two features
        sources.append(("behaviour", None, r.behaviour, BEHAVIOUR_METRIC, False))
    labels = ids.labels or ids.names
    records, panels = [], []
    for method in options.methods:
        for source, hook, X, metric, center in sources:
            points = clusters.project(X, method, options.seed, metric=metric, center=center)
            panels.append((method, source, points))
            records += [{"run": run.name, "kind": ids.kind, "method": method, "source": source, "hook": hook,
                         "identity": name, "label": label, "x": float(x), "y": float(y)}
                        for name, label, (x, y) in zip(ids.names, labels, points)]
    return pd.DataFrame(records), panels


def _formats(frame: pd.DataFrame) -> dict[str, str]:
    """p-values printed as p-values, counts as counts."""
    return {c: "p" for c in frame.columns if c == "p" or c.endswith(("_p", "p_fwe", "p_holm"))} | COUNTS


def _best(stats: pd.DataFrame) -> pd.DataFrame:
    """Each run's and statistic's layer of the largest value, with its p-values and null."""
    rows = []
    for (run, kind), part in stats.groupby(["run", "kind"], sort=False):
        for statistic, prefix in (("silhouette", "silhouette"), ("knn_accuracy", "knn")):
            best = part.loc[part[statistic].idxmax()]
            rows.append({"run": run, "kind": kind, "statistic": statistic, "hook": best["hook"],
                         "value": best[statistic], "p": best[f"{prefix}_p"], "p_fwe": best[f"{prefix}_p_fwe"],
                         "p_holm": best[f"{prefix}_p_holm"], "null_mean": best[f"{prefix}_null_mean"],
                         "null_q95": best[f"{prefix}_null_q95"], "n": best["n"], "n_labels": best["n_labels"],
                         "ceiling": best["knn_ceiling"] if prefix == "knn" else None})
    return pd.DataFrame(rows)


IDENTITIES_TEXT = (
    "The identities of each run's span kind among the selected activation rows, in the suite's order (its baseline "
    "identities, such as intergroup's \"a person\", left out); each identity's vector is the mean of its rows (e.g. "
    "over settings where the selection keeps several). `label` is the suite's grouping, the clusters tested against "
    "(intergroup: Inglehart-Welzel zones for nationality, the four groups for race, none for religion or across "
    "categories).")
STATS_TEXT = (
    "Per layer, after centring the identity vectors over the identities: the mean silhouette of the grouping and "
    "the leave-one-out kNN accuracy (each identity's group predicted by its k nearest others), each against the same "
    "statistic under random relabellings that keep the group sizes (p one-sided; `null_mean` is chance, `null_q95` "
    "its 95th percentile). Every layer is tested against the same permutations: `p_fwe` (max statistic over the "
    "layers) and `p_holm` correct for having looked at every layer; read `p_fwe` for the best layer, which this "
    "table shows (every layer in cluster_stats.csv). `knn_ceiling` is the best kNN accuracy the group sizes allow "
    "(an identity alone in its group can never be predicted). `behaviour` gives the same statistics on the "
    "identities' behaviour rows (Euclidean).")
def scope_lines(runs: Sequence[Run], reads: Sequence[Read], options: Options,
                stats: pd.DataFrame) -> tuple[list[str], list[str]]:
    """What these cluster statistics can and cannot show, from the study's own identities, layers, permutations and
    the embedding layer's statistics (the lexical baseline)."""
    can, cannot = [], []
    floor = 1 / (options.permutations + 1)
    for run, r in zip(runs, reads):
        ids, name = r.identities, literal(run.name)
        if ids.labels is None:
            cannot.append(f"{name}: any cluster statistic: the suite groups none of these {len(ids.names)} "
                          f"{ids.kind} identities (projections only).")
            continue
        layers = len(r.tested)
        can.append(f"{name}: whether the {len(ids.names)} {ids.kind} identities of {literal(where_text(r.where))} "
                   f"lie closer to their own group ({len(set(ids.labels))} groups of the suite's grouping) than to the "
                   f"others at each of {layers} layers (silhouette, leave-one-out {options.k}-NN accuracy), each "
                   f"against {options.permutations} seeded relabellings that keep the group sizes (seed "
                   f"{options.seed}; p floor {floor:.3g}); p_fwe pays for picking the best of the {layers} layers.")
        part = stats[stats["run"] == run.name]
        embed = part[part["hook"] == EMBED_HOOK]
        if len(embed):
            e, best = embed.iloc[0], part.loc[part["silhouette"].idxmax()]
            can.append(f"{name}: how much of the grouping the token embeddings already show: {EMBED_HOOK} "
                       f"silhouette {e.silhouette:.2f} (p_fwe {e.silhouette_p_fwe:.3g}), kNN accuracy "
                       f"{e.knn_accuracy:.2f} (p_fwe {e.knn_p_fwe:.3g}), beside the best layer's silhouette "
                       f"{best.silhouette:.2f} ({literal(best.hook)}).")
        else:
            cannot.append(f"{name}: whether the grouping is already in the token embeddings: {EMBED_HOOK} is "
                          f"not among --layers {literal(options.layers)}.")
        if r.behaviour is not None:
            can.append(f"{name}: whether the identities' behaviour ({len(r.features)} features) groups the same "
                       "way (the same statistics on the behaviour rows).")
        else:
            cannot.append(f"{name}: whether behaviour groups the same way: {r.note.removeprefix(f'{name}: ')}.")
    cannot += ["That the model uses the grouping for its answers (patching and steering ask that); the grouping is "
               "the suite's (a paper's), not the model's.",
               "What part of the distances the template's shared wording before the slot and the slots' token counts "
               "make: each state depends on the whole prompt up to its slot (the RSA study holds token counts and "
               "shared first tokens out).",
               f"Distances from the projections ({', '.join(options.methods)}): t-SNE and UMAP keep neighbourhoods, "
               "not distances; the statistics are the measure."]
    return can, cannot


class ClustersStudy(Study):
    """Identity clusters per layer against the suite's grouping, and 2-D projections (interp.clusters)."""

    name = "clusters"
    description = ("identity clusters: do a span kind's identity vectors cluster by the suite's grouping, per layer "
                   "(silhouette, kNN, permutation p, family-wise across layers), with t-SNE/UMAP projections")
    Options = Options

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        parts = []
        for run, r in zip(runs, read(tuple(runs), options)):
            ids = r.identities
            grouping = (f"{len(set(ids.labels))} groups" if ids.labels else "no grouping: projections only")
            parts.append(f"{run.name}: {len(ids.names)} {ids.kind} identities ({grouping}) of "
                         f"{where_text(r.where)}; statistics at {len(r.tested) if ids.labels else 0} layers, "
                         f"projections ({', '.join(options.methods)}) at {', '.join(r.projected)}"
                         + ("" if r.behaviour is None else f" and of {len(r.features)} behaviour features"))
        return "; ".join(parts) + f". {options.permutations} permutations (seed {options.seed})."

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True) -> Analysis:
        reads = read(tuple(runs), options)
        several = len(runs) > 1
        stats, behaviour, projections, described, figures, notes = [], [], [], [], [], []
        for run, r in zip(runs, reads):
            ids, prefix = r.identities, f"figures/{run.stem}_" if several else "figures/"
            described.append(pd.DataFrame({"run": run.name, "kind": ids.kind, "identity": ids.names,
                                           "label": ids.labels or [None] * len(ids.names)}))
            notes += [r.note] if r.note else []
            if r.behaviour is not None and r.behaviour.shape[1] == 1:
                notes.append(f"{literal(run.name)}: one behaviour feature ({literal(r.features[0])}); behaviour not "
                             "projected")
            # the figure draws the names as written; its caption in the report is Markdown
            title = f"{run.name}, {ids.kind} ({where_text(r.where)})"
            shown = f"{literal(run.name)}, {ids.kind} ({literal(where_text(r.where))})"
            reference = None
            if ids.labels is None:
                notes.append(f"{literal(run.name)}: the suite groups none of these {ids.kind} identities; cluster "
                             "statistics skipped, projections coloured by identity")
            else:
                table = clusters.layer_stats(_rows(ids, r.tested), ids.labels, r.tested, metric=options.metric,
                                             k=options.k, n_permutations=options.permutations, seed=options.seed,
                                             progress=progress)
                table.insert(0, "kind", ids.kind)
                table.insert(0, "run", run.name)
                stats.append(table)
                if r.behaviour is not None:
                    result = clusters.cluster_stats(r.behaviour, ids.labels, options.permutations, options.seed,
                                                    options.k, metric=BEHAVIOUR_METRIC)
                    behaviour.append({"run": run.name, "kind": ids.kind, "n_features": len(r.features)} | result)
                    reference = {key: result[key] for key in ("silhouette", "knn_accuracy")}
                figures.append(Figure(f"{prefix}cluster_stats", f"Cluster statistics per layer, {shown}",
                                      clusters.plot_layer_stats(table, f"{title} vs the suite's grouping",
                                                                reference, events=r.events)))
            frame, panels = _projections(run, r, options)
            projections.append(frame)
            figures.append(Figure(f"{prefix}projections", f"Projections, {shown}",
                                  clusters.plot_projection_grid(panels, ids.labels or ids.names,
                                                                clusters.short_names(ids.names), title,
                                                                events=r.events)))
        return _analysis(runs, options, reads, stats, behaviour, projections, described, figures, notes)


def _analysis(runs, options, reads, stats, behaviour, projections, described, figures, notes) -> Analysis:
    """The report of the computed tables and figures."""
    stats = pd.concat(stats, ignore_index=True) if stats else pd.DataFrame()
    behaviour = pd.DataFrame(behaviour)
    sections = [Section("Identities", IDENTITIES_TEXT, (Table("identities", "Identities compared and their groups",
                                                              pd.concat(described, ignore_index=True)),))]
    if len(stats):
        summary = _best(stats)
        tables = (Table("cluster_summary", "Each run's best layer by silhouette and by kNN accuracy", summary,
                        _formats(summary)),)
        if len(behaviour):
            tables += (Table("cluster_stats_behaviour", "The same statistics on the identities' behaviour",
                             behaviour, _formats(behaviour)),)
        sections.append(Section("Cluster statistics per layer", STATS_TEXT, tables,
                                tuple(f for f in figures if f.name.endswith("cluster_stats"))))
    sections += [Section("Projections", f"2-D projections ({', '.join(options.methods)}; t-SNE perplexity and UMAP "
                                        "neighbours adapted to the number of identities, seeded) of the identity "
                                        "vectors at the projected layers and of the behaviour rows; coordinates in "
                                        "projections.csv.",
                         figures=tuple(f for f in figures if f.name.endswith("projections"))),
                 scope(*scope_lines(runs, reads, options, stats))]
    files = [Table("projections", "2-D coordinates of every projection", pd.concat(projections, ignore_index=True))]
    if len(stats):
        files.insert(0, Table("cluster_stats", "Cluster statistics at every layer tested", stats, _formats(stats)))
    record = {"runs_read": {run.name: {"kind": r.identities.kind, "where": r.where, "identities": r.identities.names,
                                       "labels": r.identities.labels, "tested_hooks": r.tested,
                                       "projected_hooks": r.projected, "behaviour_features": len(r.features),
                                       "tsne_perplexity": clusters.tsne_perplexity(len(r.identities.names)),
                                       "umap_n_neighbors": clusters.umap_neighbors(len(r.identities.names))}
                            for run, r in zip(runs, reads)}}
    method = [f"Identity vectors: {options.reduction} over each slot's tokens, centred over the identities per layer, "
              f"{options.metric} distance; behaviour rows: {BEHAVIOUR_METRIC} distance, not centred.",
              f"kNN: k = {options.k}; permutations: {options.permutations} (seed {options.seed}), the same at every "
              "layer."]
    return Analysis("Identity clusters per layer", "empathy-gap interp clusters (interp.clusters)", sections,
                    method + notes, files, record=record)


STUDY = ClustersStudy()
