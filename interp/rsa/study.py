"""The RSA study (`empathy-gap interp rsa RUN_DIR...`): does the geometry of a span kind's identity vectors follow
the identities' behaviour, layer by layer (Spearman RSA, Mantel p family-wise over the layers), also with the
identities' token counts and lexical labels held out (partial Mantel), how reliable is the behaviour side (split-half
noise ceiling), and how much of it do the token embeddings already show? The numbers are interp.rsa's; this module
reads the runs through their suites' hooks."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from activations.capture import EMBED_HOOK, LAYER_GRAMMAR, select_hooks
from activations.store import REDUCTIONS, load
from behavioral.report.formats import literal
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Analysis, Figure, Section, Table, scope
from behavioral.core.options import SEED, check_bounds, option
from behavioral.core.selection import field_values
from interp.rsa import lexical, reliability
from interp.identities import (
    WHERE_HELP, Identities, behaviour_rows, parse_where, read_identities, slot_tokens, span_kind, suite_of,
    where_text,
)
from behavioral.analysis.study import Study
from interp import rsa

CONTROLS = ("tokens", "none")
COUNTS = {c: "count" for c in ("n", "n_features", "n_events", "n_splits", "n_defined", "n_groups")}
LEXICAL_SHARE = 0.8  # an embedding r at least this share of the best layer's is called close (a reading, not a test)


def _formats(frame: pd.DataFrame) -> dict[str, str]:
    """p-values printed as p-values, counts as counts, confounds with their sign."""
    return ({c: "p" for c in frame.columns if c == "p" or c.endswith(("_p", "p_fwe", "p_holm"))} | COUNTS
            | {c: "signed" for c in frame.columns if c.endswith("confound")})


@dataclass(frozen=True)
class Options:
    """Which identities are compared with their behaviour (span kind, selection, reduction), at which layers, by
    which distances, against how many permutations, with which controls held out, and how the behaviour's
    reliability is estimated."""

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
    seed: int = option(0, "seed of the permutations and of the splits in halves", metavar="N", **SEED)
    control: str = option("tokens", "held out by the partial Mantel test: the difference in the tokens of the "
                                    "identities' slots as the run's model read them, or none", choices=CONTROLS)
    no_lexical: bool = option(False, "skip the lexical label controls (identities sharing the first token of their "
                                     "head word, or a continent, held out by the partial Mantel test)")
    splits: int = option(100, "random splits of the run's events in halves for the behaviour's split-half "
                              "reliability (noise ceiling); every distinct split where there are fewer; 0: none",
                         metavar="R", minimum=0)
    split_by: str | None = option(None, "field of the run's rows whose values are the events split in halves; "
                                        f"none: {reliability.DEFAULT_FIELD} where the rows have it", metavar="FIELD")
    trust_remote_code: bool = option(False, "let the model folder run its own tokenizer code (for --control tokens "
                                            "and the first-token label)")

    def __post_init__(self):
        check_bounds(self)
        for name, value, known in (("--reduction", self.reduction, REDUCTIONS), ("--metric", self.metric, rsa.METRICS),
                                   ("--behavior-metric", self.behavior_metric, rsa.METRICS),
                                   ("--control", self.control, CONTROLS)):
            if value not in known:
                raise ValueError(f"{name} {value!r}; expected one of {', '.join(known)}")
        parse_where(self.where)


@dataclass(frozen=True)
class Read:
    """One run as the study reads it: its identities, the hooks tested, the behaviour rows and their features, the
    slot token counts (None without the control), the lexical labels per identity (name -> labels), the field its
    events are read from (None: none) and the selection."""

    identities: Identities
    hooks: list[str]
    behaviour: np.ndarray
    features: list[str]
    tokens: list[int] | None
    labels: dict[str, list[str]]
    split_by: str | None
    where: dict


def _labels(run: Run, names: Sequence[str], trust_remote_code: bool) -> dict[str, list[str]]:
    """The lexical labels of the identities: the first token of each one's head word under the run's tokenizer,
    and the continent where the continent file names every identity."""
    from behavioral.inference.models import load_tokenizer
    from behavioral.runner.run import RunConfig

    tokenizer = load_tokenizer(RunConfig.from_run_dir(run.run_dir).model, trust_remote_code)
    labels = {"first_token": lexical.first_tokens(tokenizer, names)}
    continents = lexical.continents(names)
    return labels | ({"continent": continents} if continents is not None else {})


@functools.lru_cache(maxsize=1)
def read(runs: tuple[Run, ...], options: Options) -> list[Read]:
    """Every run's identities, behaviour, token counts and lexical labels. Cached: plan and analyze share one
    read."""
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
        labels = {} if options.no_lexical else _labels(run, ids.names, options.trust_remote_code)
        out.append(Read(ids, select_hooks(options.layers, ids.store.hooks, "--layers"), behaviour, features, tokens,
                        labels, reliability.split_field(run, options.split_by), where))
    return out


def _best(table: pd.DataFrame) -> pd.DataFrame:
    """Each run's layer of the largest RSA, with its p-values and, where tested, the token-count partial test at
    that layer."""
    rows = table.loc[table.groupby(["run", "kind"], sort=False)["rsa"].idxmax()]
    columns = ["run", "kind", "hook", "rsa", "p", "p_fwe", "p_holm", "partial_rsa", "partial_p", "partial_p_fwe",
               "n", "n_features"]
    return rows[[c for c in columns if c in rows]].reset_index(drop=True)


def _embedding(table: pd.DataFrame, best: pd.Series) -> dict:
    """The embedding layer's RSA beside the best layer's (NaN where hook_embed was not tested): the lexical
    baseline, and its share of the best layer's r."""
    rows = table[table["hook"] == EMBED_HOOK]
    if not len(rows):
        return {"embed_rsa": np.nan, "embed_p": np.nan, "embed_p_fwe": np.nan, "embed_share": np.nan}
    row = rows.iloc[0]
    share = row["rsa"] / best["rsa"] if best["rsa"] > 0 else np.nan
    return {"embed_rsa": row["rsa"], "embed_p": row["p"], "embed_p_fwe": row["p_fwe"], "embed_share": share}


def _label_controls(labels: dict[str, list[str]]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The model matrix of each lexical label that groups some identities and not all (name -> matrix), and why
    each other label holds nothing out (name -> note)."""
    controls, notes = {}, {}
    for name, values in labels.items():
        groups = len(set(values))
        if groups == len(values):
            notes[name] = f"no two identities share a {name.replace('_', ' ')}: nothing to hold out"
        elif groups == 1:
            notes[name] = f"every identity shares one {name.replace('_', ' ')}: nothing to hold out"
        else:
            controls[name] = rsa.label_matrix(values)
    return controls, notes


def _label_rows(run: Run, r: Read, table: pd.DataFrame, best: pd.Series, options: Options) -> list[dict]:
    """Each lexical label's row: its groups, its RSA with the behaviour and with the best layer's geometry, and the
    partial Mantel of geometry with behaviour holding it out at the best layer (p_fwe over the layers)."""
    controls, notes = _label_controls(r.labels)
    ids = r.identities
    D_behaviour = rsa.distance_matrix(r.behaviour, options.behavior_metric)
    D_best = rsa.distance_matrix(ids.vectors[ids.store.hooks.index(best["hook"])], options.metric, True)
    rows = []
    for name, values in r.labels.items():
        row = {"run": run.name, "kind": ids.kind, "label": name, "n_groups": len(set(values)), "hook": best["hook"],
               "rsa": best["rsa"], "partial_rsa": np.nan, "partial_p": np.nan, "partial_p_fwe": np.nan,
               "behaviour_confound": np.nan, "geometry_confound": np.nan, "note": notes.get(name, "")}
        if name in controls:
            prefix = f"{name}_partial_"
            row |= {"partial_rsa": best[f"{prefix}rsa"], "partial_p": best[f"{prefix}p"],
                    "partial_p_fwe": best[f"{prefix}p_fwe"],
                    "behaviour_confound": rsa.rsa(controls[name], D_behaviour),
                    "geometry_confound": rsa.rsa(controls[name], D_best)}
        rows.append(row)
    return rows


def _ceiling_row(run: Run, kind: str, split: reliability.Split, best: pd.Series) -> dict:
    """A run's noise-ceiling row: the split, the ceiling's mean and spread over splits, and the best layer's r
    against it."""
    c = split.ceiling
    mean, (low, high) = (c.mean, c.interval) if c is not None else (np.nan, (np.nan, np.nan))
    return {"run": run.name, "kind": kind, "split_by": split.field, "n_events": split.n_events,
            "n_splits": 0 if c is None else len(c.half_r), "n_defined": 0 if c is None else c.n_defined,
            "half_r": np.nan if c is None or not c.n_defined else float(np.nanmean(c.half_r)),
            "ceiling": mean, "ceiling_lo": low, "ceiling_hi": high, "hook": best["hook"], "rsa": best["rsa"],
            "rsa_max": math.sqrt(mean) if mean > 0 else np.nan,
            "rsa_over_ceiling": rsa.against_ceiling(best["rsa"], mean), "note": split.note or ""}


def p_floor(n: int, n_permutations: int) -> tuple[int, float, bool]:
    """The relabellings a Mantel test of n points compares with, its p floor, and whether they are all of them
    (interp.rsa.mantel_permutations: then p is exact)."""
    exact = math.factorial(n) - 1 <= n_permutations
    count = math.factorial(n) - 1 if exact else n_permutations
    return count, 1 / (count + 1), exact


RSA_TEXT = (
    "Per layer, the Spearman correlation between the identities' pairwise distances in the model (identity vectors "
    "centred over the identities) and in behaviour (the distance between two identities' behaviour rows over the "
    "features defined for every identity compared), with a one-sided Mantel p from permuting the identities. Every "
    "layer is tested against the same permutations, and every p has beside it `p_fwe` (max statistic over the "
    "layers: the largest r of any layer under each permutation) and `p_holm`. Read `p_fwe`: this table shows each "
    "run's best layer, and picking it is what `p_fwe` pays for (every layer in rsa.csv, each p with its p_fwe). "
    "`partial_rsa` holds the identities' difference in slot token counts out of both distances (partial Mantel), "
    "since longer names can drive both; `token_confound` is the RSA of that difference with behaviour alone. "
    "`embed_rsa` is the same RSA on the token embeddings (hook_embed), the lexical baseline: `embed_share` is its "
    "share of the best layer's r.")
CEILING_TEXT = (
    "The behaviour side is estimated from a sample of events. Its split-half reliability: the events are split in "
    "two random halves (seeded; every distinct split where there are no more than asked), the suite's behaviour "
    "is computed on each half, and the Spearman r of the two halves' behaviour distances (`half_r`, as the RSA "
    "itself) is corrected to the whole sample by Spearman-Brown, 2r / (1 + r) (`ceiling`: the mean over splits; "
    "`ceiling_lo`..`ceiling_hi`: the central 95% of the splits, their spread over one sample of events, not a "
    "confidence interval). The geometry side is computed, not sampled, so the highest RSA the behaviour allows is "
    "about sqrt(ceiling) (`rsa_max`), and `rsa_over_ceiling` = r / sqrt(ceiling) is the best layer's r corrected "
    "for the behaviour's attenuation; it is left out where the ceiling is not positive (the halves disagree, and no "
    "r can be compared with them) and reads as noisy where it exceeds 1. Fewer than "
    f"{reliability.MIN_PER_HALF} events per half give no ceiling. Each split's values are in "
    "noise_ceiling_splits.csv.")
LEXICAL_TEXT = (
    "Two lexical controls. The embedding layer (`embed_rsa` above) shows what the token embeddings alone give: "
    "an RSA there needs no processing of context. The label controls give identities that share a label distance "
    "0 and all others 1: `first_token`, the first token of each identity's head word as the run's tokenizer reads "
    "it (the words every identity shares, such as \"a person from\", and a leading article skipped; "
    "lexical_labels.csv), and for intergroup's nationalities `continent` (UN M49 region, "
    "interp/rsa/continents.csv). `behaviour_confound` and `geometry_confound` are the label's RSA with the "
    "behaviour and with the best layer's geometry; `partial_rsa` holds the label out of both (partial Mantel at "
    "the best layer, `partial_p_fwe` over the layers, every layer in rsa.csv as LABEL_partial_*). A label no two "
    "identities share (or all do) holds nothing out and says so.")


def _close_to_embedding(summary: pd.DataFrame) -> list[str]:
    """A sentence for each run whose embedding-layer r is close to its best layer's."""
    return [f"{literal(row.run)}: the embedding layer's r ({row.embed_rsa:.2f}) is {row.embed_share:.0%} of the best "
            f"layer's ({row.rsa:.2f}, {literal(row.hook)}): the structure is largely present in the token embeddings."
            for row in summary.itertuples() if np.isfinite(row.embed_share) and row.embed_share >= LEXICAL_SHARE]


def scope_lines(runs: Sequence[Run], reads: Sequence[Read], options: Options, summary: pd.DataFrame,
                ceilings: pd.DataFrame, labels: pd.DataFrame) -> tuple[list[str], list[str]]:
    """What this RSA can and cannot show, from its own identities, events, permutations and controls."""
    can, cannot = [], []
    for run, r, best, ceiling in zip(runs, reads, summary.itertuples(), ceilings.itertuples()):
        n, name = len(r.identities.names), literal(run.name)
        count, floor, exact = p_floor(n, options.permutations)
        events = f" over {ceiling.n_events} values of {literal(ceiling.split_by)}" if ceiling.split_by else ""
        can.append(f"{name}: whether the {n} {r.identities.kind} identities the model represents alike also "
                   f"behave alike ({len(r.features)} behaviour features of {literal(where_text(r.where))}{events}), at "
                   f"{len(r.hooks)} layers, each against {count} relabellings of the identities "
                   f"({'all of them: exact p' if exact else f'seeded draws, seed {options.seed}'}; p floor "
                   f"{floor:.3g}); p_fwe pays for picking the best of the {len(r.hooks)} layers (here "
                   f"{literal(best.hook)}: r {best.rsa:.2f}, p_fwe {best.p_fwe:.3g}).")
        if np.isfinite(ceiling.rsa_over_ceiling):
            can.append(f"{name}: how reliable the behaviour side is: split-half ceiling {ceiling.ceiling:.2f} "
                       f"(splits {ceiling.ceiling_lo:.2f} to {ceiling.ceiling_hi:.2f}, {ceiling.n_defined} splits of "
                       f"{ceiling.n_events} events), so r can reach about {ceiling.rsa_max:.2f}; the best layer's r "
                       f"is {ceiling.rsa_over_ceiling:.2f} of that.")
        elif np.isfinite(ceiling.ceiling):
            cannot.append(f"{name}: a reliable behaviour side: the halves' behaviour distances do not agree "
                          f"(ceiling {ceiling.ceiling:.2f} over {ceiling.n_defined} splits of {ceiling.n_events} "
                          "events), so no r with them says more than noise.")
        else:
            cannot.append(f"{name}: how reliable the behaviour side is: no split-half ceiling ({ceiling.note}).")
        if np.isfinite(best.embed_rsa):
            close = best.embed_share >= LEXICAL_SHARE if np.isfinite(best.embed_share) else False
            can.append(f"{name}: how much the token embeddings already show: {EMBED_HOOK} r {best.embed_rsa:.2f} "
                       f"(p_fwe {best.embed_p_fwe:.3g}) beside the best layer's {best.rsa:.2f}"
                       + ("; close to it: the structure is largely present in the token embeddings." if close
                          else "."))
        else:
            cannot.append(f"{name}: how much of the relation the token embeddings hold: {EMBED_HOOK} is not "
                          f"among --layers {literal(options.layers)}.")
        for row in labels[labels["run"] == run.name].itertuples() if len(labels) else ():
            what = literal(row.label.replace("_", " "))
            if row.note:
                cannot.append(f"{name}: holding out a shared {what}: {row.note}.")
            else:
                can.append(f"{name}: whether the relation survives holding out identities that share a {what} "
                           f"({row.n_groups} groups; partial r {row.partial_rsa:.2f} at {literal(row.hook)}, p_fwe "
                           f"{row.partial_p_fwe:.3g}).")
    if options.control == "tokens":
        can.append("Whether the relation survives holding the slots' token-count difference out (partial Mantel).")
    else:
        cannot.append("Whether token count drives both distances (--control none).")
    if options.no_lexical:
        cannot.append("Whether identities sharing a first token or a continent drive the relation (--no-lexical).")
    cannot += ["That the representation causes the behaviour (patching and steering ask that), nor that any one "
               "pair of identities is close.",
               "Confounds not held out: word frequency, the template's shared wording; the behaviour distance "
               "depends on which features the suite defines and the selection keeps."]
    if len(ceilings) and (ceilings["n_defined"] > 0).any():
        cannot.append("A confidence interval for the ceiling: its spread is over splits of one sample of events, "
                      "and Spearman-Brown assumes the halves are exchangeable.")
    return can, cannot


def _split_plan(run: Run, r: Read, splits: int) -> str:
    """The plan's clause on a run's splits in halves: how many events, or why there will be no ceiling."""
    if not (r.split_by and splits):
        return ""
    n = len(field_values(run.rows, r.split_by, r.where, "the run's rows"))
    few = reliability.too_few(n, r.split_by)
    return (f"; no split-half ceiling ({few})" if few
            else f"; {n} values of {r.split_by} split in halves up to {splits} times")


class RSAStudy(Study):
    """RSA per layer between identity geometry and behaviour, with the partial Mantel tests, the behaviour's noise
    ceiling and the lexical controls (interp.rsa)."""

    name = "rsa"
    description = ("identity geometry vs behaviour: RSA (Spearman) and partial Mantel per layer between a span kind's "
                   "identity vectors and the suite's behaviour per identity, family-wise across layers, with the "
                   "behaviour's split-half noise ceiling and lexical controls")
    Options = Options

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        parts = []
        for run, r in zip(runs, read(tuple(runs), options)):
            events = _split_plan(run, r, options.splits)
            parts.append(f"{run.name}: {len(r.identities.names)} {r.identities.kind} identities of "
                         f"{where_text(r.where)} against {len(r.features)} behaviour features at {len(r.hooks)} "
                         f"layers{events}")
        controls = ["token-count partial Mantel"] if options.control == "tokens" else []
        controls += [] if options.no_lexical else ["lexical label partial Mantel"]
        return "; ".join(parts) + (f". {options.permutations} permutations (seed {options.seed}); "
                                   f"{', '.join(controls) or 'no control'}.")

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True) -> Analysis:
        reads = read(tuple(runs), options)
        several = len(runs) > 1
        tables, tokens, extras, figures, ceilings, splits, labels, described = [], [], [], [], [], [], [], []
        for run, r in zip(runs, reads):
            ids = r.identities
            control = None if r.tokens is None else rsa.difference_matrix(r.tokens)
            table = rsa.layer_rsa(ids.vectors[[ids.store.hooks.index(h) for h in r.hooks]], r.behaviour, r.hooks,
                                  metric=options.metric, behavior_metric=options.behavior_metric,
                                  n_permutations=options.permutations, seed=options.seed, control=control,
                                  progress=progress, controls=_label_controls(r.labels)[0])
            table.insert(0, "kind", ids.kind)
            table.insert(0, "run", run.name)
            tables.append(table.assign(n_features=len(r.features)))
            best = table.loc[table["rsa"].idxmax()]
            extra = {"run": run.name, "kind": ids.kind}
            if r.tokens is not None:
                tokens.append(pd.DataFrame({"run": run.name, "kind": ids.kind, "identity": ids.names,
                                            "tokens": r.tokens}))
                behaviour = rsa.distance_matrix(r.behaviour, options.behavior_metric)
                extra["token_confound"] = rsa.rsa(control, behaviour)
            extras.append(extra | _embedding(table, best))
            split = reliability.behaviour_ceiling(run, ids.kind, ids.names, r.features, r.where, r.split_by,
                                                  options.behavior_metric, options.splits, options.seed)
            ceilings.append(_ceiling_row(run, ids.kind, split, best))
            if len(split.splits):
                splits.append(pd.concat([pd.DataFrame({"run": run.name, "kind": ids.kind}, index=split.splits.index),
                                         split.splits], axis=1))
            labels += _label_rows(run, r, table, best, options)
            if r.labels:
                described.append(pd.DataFrame({"run": run.name, "kind": ids.kind, "identity": ids.names} | r.labels))
            # the figure draws the names as written; its caption in the report is Markdown
            title = f"{run.name}, {ids.kind} ({where_text(r.where)}) vs behaviour"
            shown = f"{literal(run.name)}, {ids.kind} ({literal(where_text(r.where))}) vs behaviour"
            figures.append(Figure(f"figures/{run.stem}_rsa" if several else "figures/rsa", f"RSA per layer, {shown}",
                                  rsa.plot_rsa(table, title)))
        table = pd.concat(tables, ignore_index=True)
        summary = _best(table).merge(pd.DataFrame(extras), on=["run", "kind"], how="left")
        ceilings, labels = pd.DataFrame(ceilings), pd.DataFrame(labels)
        can, cannot = scope_lines(runs, reads, options, summary, ceilings, labels)
        sections = [Section("RSA with behaviour per layer", RSA_TEXT,
                            (Table("rsa_summary", "Each run's best layer by RSA", summary, _formats(summary)),),
                            tuple(figures)),
                    Section("Noise ceiling of the behaviour", CEILING_TEXT,
                            (Table("noise_ceiling", "Split-half reliability of each run's behaviour distances",
                                   ceilings, _formats(ceilings) | {"note": "text"}),))]
        if len(labels):
            text = "\n\n".join([LEXICAL_TEXT, *_close_to_embedding(summary)])
            sections.append(Section("Lexical controls", text, (Table("lexical_controls", "Lexical label controls "
                                                                     "at each run's best layer", labels,
                                                                     _formats(labels)),)))
        sections.append(scope(can, cannot))
        files = [Table("rsa", "RSA and partial Mantel at every layer tested", table, _formats(table))]
        if tokens:
            files.append(Table("token_counts", "Tokens of each identity's slot as the run's model read it",
                               pd.concat(tokens, ignore_index=True), {"tokens": "count"}))
        if splits:
            files.append(Table("noise_ceiling_splits", "Each split's half events, half r and reliability",
                               pd.concat(splits, ignore_index=True)))
        if described:
            files.append(Table("lexical_labels", "Each identity's lexical labels",
                               pd.concat(described, ignore_index=True)))
        record = {"runs_read": {run.name: {"kind": r.identities.kind, "where": r.where, "hooks": r.hooks,
                                           "identities": r.identities.names, "behaviour_features": r.features,
                                           "split_by": r.split_by}
                                for run, r in zip(runs, reads)}}
        method = [f"Identity vectors: {options.reduction} over each slot's tokens, centred over the identities per "
                  f"layer, {options.metric} distance; behaviour rows: {options.behavior_metric} distance.",
                  f"Mantel permutations: {options.permutations} (seed {options.seed}), the same at every layer.",
                  f"Noise ceiling: up to {options.splits} seeded splits of the events in halves (seed "
                  f"{options.seed}), Spearman-Brown corrected."]
        return Analysis("Identity geometry and behaviour per layer", "empathy-gap interp rsa (interp.rsa)", sections,
                        method, files, record=record)


STUDY = RSAStudy()
