"""The RSA study (`empathy-gap interp rsa RUN_DIR...`): does the geometry of a span kind's identity vectors follow
the identities' behaviour, layer by layer (Spearman RSA, Mantel p), also with the identities' token counts held out
(partial Mantel)? The numbers are interp.rsa's; this module reads the runs through their suites' hooks."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from activations.capture import LAYER_GRAMMAR, select_hooks
from activations.store import REDUCTIONS, load
from behavioral.analysis.runs import Run
from behavioral.analysis.spec import Analysis, Figure, Section, Table
from behavioral.options import check_minimums, option
from behavioral.studies.identities import (
    WHERE_HELP, Identities, behaviour_rows, parse_where, read_identities, slot_tokens, span_kind, suite_of,
    where_text,
)
from behavioral.studies.study import Study
from interp import rsa

CONTROLS = ("tokens", "none")
P_FORMATS = {c: "p" for c in ("p", "p_fwe", "p_holm", "partial_p", "partial_p_fwe", "partial_p_holm")} | {
    "n": "count", "n_features": "count"}


@dataclass(frozen=True)
class Options:
    """Which identities are compared with their behaviour (span kind, selection, reduction), at which layers, by
    which distances, against how many permutations, and with which control held out."""

    kind: str | None = option(None, "span kind whose identity geometry is compared with behaviour; none: the first "
                                    "span kind of each run's suite", metavar="KIND")
    where: tuple[str, ...] = option((), WHERE_HELP + "; the suite's behaviour is read under the same selection",
                                    metavar="FIELD=VALUE")
    reduction: str = option("mean", "a span's state: the mean over its tokens or its last token's",
                            choices=REDUCTIONS)
    layers: str = option("all", f"layers tested: {LAYER_GRAMMAR}", metavar="LAYERS")
    metric: str = option("cosine", "distance between identity vectors, centred over the identities of each layer",
                         choices=rsa.METRICS)
    behavior_metric: str = option("euclidean", "distance between the identities' behaviour rows",
                                  choices=rsa.METRICS)
    permutations: int = option(1000, "Mantel permutations (the same ones at every layer)", metavar="N", minimum=1)
    seed: int = option(0, "seed of the permutations", metavar="N")
    control: str = option("tokens", "held out by the partial Mantel test: the difference in the tokens of the "
                                    "identities' slots as the run's model read them, or none", choices=CONTROLS)
    trust_remote_code: bool = option(False, "let the model folder run its own tokenizer code (for --control tokens)")

    def __post_init__(self):
        check_minimums(self)
        for name, value, known in (("--reduction", self.reduction, REDUCTIONS), ("--metric", self.metric, rsa.METRICS),
                                   ("--behavior-metric", self.behavior_metric, rsa.METRICS),
                                   ("--control", self.control, CONTROLS)):
            if value not in known:
                raise ValueError(f"{name} {value!r}; expected one of {', '.join(known)}")
        parse_where(self.where)


@dataclass(frozen=True)
class Read:
    """One run as the study reads it: its identities, the hooks tested, the behaviour rows and their features, the
    slot token counts (None without the control) and the selection."""

    identities: Identities
    hooks: list[str]
    behaviour: np.ndarray
    features: list[str]
    tokens: list[int] | None
    where: dict


@functools.lru_cache(maxsize=1)
def read(runs: tuple[Run, ...], options: Options) -> list[Read]:
    """Every run's identities, behaviour and token counts. Cached: plan and analyze share one read."""
    where, out = parse_where(options.where), []
    for run in runs:
        ids = read_identities(load(run.run_dir), suite_of(run), span_kind(run, options.kind),
                              options.reduction, where)
        if len(ids.names) < 3:
            raise ValueError(f"{run.run_dir}: RSA needs at least 3 {ids.kind} identities, got {len(ids.names)} under "
                             f"{where_text(where)}")
        try:
            behaviour, features = behaviour_rows(run, ids.kind, ids.names, where)
        except NotImplementedError as err:
            raise ValueError(f"{run.run_dir}: {err}; the RSA study compares identities with their behaviour") from None
        tokens = (slot_tokens(run, ids.kind, ids.names, where, options.trust_remote_code)
                  if options.control == "tokens" else None)
        out.append(Read(ids, select_hooks(options.layers, ids.store.hooks, "--layers"), behaviour, features, tokens,
                        where))
    return out


def _best(table: pd.DataFrame) -> pd.DataFrame:
    """Each run's layer of the largest RSA, with its p-values and, where tested, the partial test at that layer."""
    rows = table.loc[table.groupby(["run", "kind"], sort=False)["rsa"].idxmax()]
    columns = ["run", "kind", "hook", "rsa", "p", "p_fwe", "p_holm", "partial_rsa", "partial_p", "partial_p_fwe",
               "n", "n_features"]
    return rows[[c for c in columns if c in rows]].reset_index(drop=True)


RSA_TEXT = (
    "Per layer, the Spearman correlation between the identities' pairwise distances in the model (identity vectors "
    "centred over the identities) and in behaviour (the distance between two identities' behaviour rows over the "
    "features defined for every identity compared), with a one-sided Mantel p from permuting the identities. Every "
    "layer is tested against the same permutations: `p_fwe` (max statistic over the layers) and `p_holm` correct for "
    "having looked at every layer; read `p_fwe` for the best layer, which this table shows (every layer in rsa.csv). "
    "`partial_rsa` holds the identities' difference in slot token counts out of both distances (partial Mantel), "
    "since longer names can drive both; `token_confound` is the RSA of that difference with behaviour alone.")
LIMITS_TEXT = (
    "- RSA says that identities the model represents alike also behave alike, on these identities; it cannot say the "
    "representation causes the behaviour (patching and steering ask that), nor that any one pair is close.\n"
    "- Few identities make weak tests: n identities give n(n-1)/2 distances that are not independent, and p cannot "
    "fall below 1 / (permutations + 1).\n"
    "- Token count is one confound held out; others (word frequency, shared wording of the template) are not.\n"
    "- The behaviour distance depends on which features the suite defines and the selection keeps (e.g. one "
    "setting or several).")


class RSAStudy(Study):
    """RSA per layer between identity geometry and behaviour, with the partial Mantel test (interp.rsa)."""

    name = "rsa"
    description = ("identity geometry vs behaviour: RSA (Spearman) and partial Mantel per layer between a span kind's "
                   "identity vectors and the suite's behaviour per identity, family-wise across layers")
    Options = Options

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        parts = [f"{run.name}: {len(r.identities.names)} {r.identities.kind} identities of {where_text(r.where)} "
                 f"against {len(r.features)} behaviour features at {len(r.hooks)} layers"
                 for run, r in zip(runs, read(tuple(runs), options))]
        control = "token-count partial Mantel too" if options.control == "tokens" else "no control"
        return "; ".join(parts) + f". {options.permutations} permutations (seed {options.seed}); {control}."

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True) -> Analysis:
        reads = read(tuple(runs), options)
        several = len(runs) > 1
        tables, tokens, confounds, figures = [], [], [], []
        for run, r in zip(runs, reads):
            ids = r.identities
            control = None if r.tokens is None else rsa.difference_matrix(r.tokens)
            table = rsa.layer_rsa(ids.vectors[[ids.store.hooks.index(h) for h in r.hooks]], r.behaviour, r.hooks,
                                  metric=options.metric, behavior_metric=options.behavior_metric,
                                  n_permutations=options.permutations, seed=options.seed, control=control,
                                  progress=progress)
            table.insert(0, "kind", ids.kind)
            table.insert(0, "run", run.name)
            tables.append(table.assign(n_features=len(r.features)))
            if r.tokens is not None:
                tokens.append(pd.DataFrame({"run": run.name, "kind": ids.kind, "identity": ids.names,
                                            "tokens": r.tokens}))
                behaviour = rsa.distance_matrix(r.behaviour, options.behavior_metric)
                confounds.append({"run": run.name, "kind": ids.kind, "token_confound": rsa.rsa(control, behaviour)})
            title = f"{run.name}, {ids.kind} ({where_text(r.where)}) vs behaviour"
            figures.append(Figure(f"figures/{run.stem}_rsa" if several else "figures/rsa", f"RSA per layer, {title}",
                                  rsa.plot_rsa(table, title)))
        table = pd.concat(tables, ignore_index=True)
        summary = _best(table)
        if confounds:
            summary = summary.merge(pd.DataFrame(confounds), on=["run", "kind"], how="left")
        sections = [Section("RSA with behaviour per layer", RSA_TEXT,
                            (Table("rsa_summary", "Each run's best layer by RSA", summary,
                                   P_FORMATS | {"token_confound": "signed"}),), tuple(figures)),
                    Section("What these numbers cannot show", LIMITS_TEXT)]
        files = [Table("rsa", "RSA and partial Mantel at every layer tested", table, P_FORMATS)]
        if tokens:
            files.append(Table("token_counts", "Tokens of each identity's slot as the run's model read it",
                               pd.concat(tokens, ignore_index=True), {"tokens": "count"}))
        record = {"runs_read": {run.name: {"kind": r.identities.kind, "where": r.where, "hooks": r.hooks,
                                           "identities": r.identities.names, "behaviour_features": r.features}
                                for run, r in zip(runs, reads)}}
        method = [f"Identity vectors: {options.reduction} over each slot's tokens, centred over the identities per "
                  f"layer, {options.metric} distance; behaviour rows: {options.behavior_metric} distance.",
                  f"Mantel permutations: {options.permutations} (seed {options.seed}), the same at every layer."]
        return Analysis("Identity geometry and behaviour per layer", "empathy-gap interp rsa (interp.rsa)", sections,
                        method, files, record=record)


STUDY = RSAStudy()
