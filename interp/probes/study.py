"""The probe study (`empathy-gap interp probe RUN_DIR...`): is a label of the prompt linearly readable from the
final-token states at each layer, and more readable than the same procedure makes any labelling of the same cells?
Targets are any field of the activation index or any label the suite derives for final-token rows (intergroup:
`ingroup`, `perceiver_group`, `experiencer_group`, `same_name`); the folds may keep whole cells or whole values of a
field out of training. A boolean target that is the equality of two fields (ingroup: perceiver_group =
experiencer_group) gets the control task of wrong matchings; one that holds a narrower derived label (ingroup holds
same_name) gets the cross-name probe. The numbers are interp.probes'; this module reads the runs through their
suites' hooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from activations.capture import LAYER_GRAMMAR, select_hooks
from activations.store import ActivationStore, load
from behavioral.report.formats import literal
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Analysis, Figure, Section, Table, scope
from behavioral.core.options import SEED, check_bounds, option
from interp.identities import WHERE_HELP, parse_where, suite_of, where_text
from behavioral.analysis.study import Study
from behavioral.suite.protocol import Suite
from interp import probes
from interp.matchings import wrong_matchings

SPLITS = ("sample", "cell")  # besides any index field
SCORES = ["balanced_accuracy_mean", "control_balanced_accuracy_mean", "chance", "accuracy_mean",
          "control_accuracy_mean", "majority"]
MATCHING_SCORES = ["matching_real", "matching_mean", "matching_q05", "matching_q95", "matching_max", "selectivity",
                   "matching_rank", "matching_p", "matching_p_fwe", "matchings", "matching_exact"]
CROSS_SCORES = ["cross_balanced_accuracy", "cross_ci_low", "cross_ci_high", "cross_recall", "cross_false_positive",
                "n_source", "n_heldout", "n_negative", "cells_heldout", "cells_negative"]
ALPHA = 0.05  # the level the readings are worded at


@dataclass(frozen=True)
class Options:
    """What is probed (targets, selection, layers), how the folds are split, the probe's settings and its
    controls."""

    targets: tuple[str, ...] = option((), "labels probed: fields of the final-token index or labels the suite "
                                          "derives; none: the labels the suite derives", name="--target",
                                      metavar="FIELD")
    splits: tuple[str, ...] = option(SPLITS, "folds: sample (stratified), cell (no cell of the capture spec in "
                                             "both train and test) or an index field such as event_id (no value "
                                             "in both)", name="--split", metavar="SPLIT")
    where: tuple[str, ...] = option((), WHERE_HELP, metavar="FIELD=VALUE")
    layers: str = option("all", f"layers probed: {LAYER_GRAMMAR}", metavar="LAYERS")
    cv: int = option(5, "folds (fewer where the smallest class or the groups are fewer)", metavar="K", minimum=2)
    seed: int = option(0, "seed of the folds, the shuffled labels, the wrong matchings and the resamples",
                       metavar="N", **SEED)
    n_shuffles: int = option(3, "label shuffles of the shuffled-label control", metavar="N", minimum=0)
    matchings: int = option(20, "wrong matchings of the control task of a target that is the equality of two "
                                "fields (all of them where there are at most K); 0: none", metavar="K", minimum=0)
    n_bootstrap: int = option(1000, "resamples of the test cells for the cross-name interval", metavar="N",
                              minimum=1)
    C: float = option(1.0, "inverse regularization of the logistic regression", name="--C", metavar="C")

    def __post_init__(self):
        check_bounds(self)
        if not self.splits:
            raise ValueError("--split: none given; expected sample, cell or an index field")
        if not self.C > 0:
            raise ValueError(f"--C must be positive, got {self.C}")
        parse_where(self.where)


def labelled_samples(store: ActivationStore, suite: Suite, where: dict) -> tuple[np.ndarray, pd.DataFrame, list[str]]:
    """The selected final-token samples (hooks × samples × d_model), their index joined with the labels the suite
    derives for them, and those labels' names; a derived label that repeats an index field is a ValueError."""
    samples, index = store.final_samples(**where)
    labels = suite.cell_labels(index)
    clash = sorted(set(labels.columns) & set(index.columns))
    if clash:
        raise ValueError(f"suite {suite.name}: derived label {clash[0]!r} repeats a field of the activation index")
    return samples, pd.concat([index, labels], axis=1), list(labels.columns)


def split_groups(table: pd.DataFrame, split: str, cell: Sequence[str]) -> np.ndarray | None:
    """The fold groups of a split: none (sample), the capture spec's cell of each row (cell), or the values of an
    index field; an unknown split is a ValueError naming --split and the choices."""
    if split == "sample":
        return None
    if split == "cell":
        return table[list(cell)].astype(str).agg("|".join, axis=1).to_numpy()
    if split not in table.columns:
        raise ValueError(f"--split {split!r}: expected sample, cell or a field of the final-token index "
                         f"({', '.join(table.columns)})")
    return table[split].to_numpy()


@dataclass(frozen=True)
class Design:
    """How one target is controlled: the two fields whose equality it is (None: no matching gives it, the control
    task is not defined) and their shared values, the narrower derived label its cross-name probe trains on (None:
    none), and a derived label equal to it on every row (None: none), e.g. same_name where each group holds one
    name."""

    target: str
    left: str | None = None
    right: str | None = None
    values: tuple[str, ...] = ()
    source: str | None = None
    same_as: str | None = None

    @property
    def matching(self) -> str:
        """The rule the real matching is, as the report prints it."""
        return f"{self.left} = {self.right}" if self.left else "not defined"


def _boolean(values: pd.Series) -> np.ndarray | None:
    """The bool array of a two-valued True/False column, None for any other."""
    distinct = set(values.dropna().unique().tolist())
    return values.to_numpy(dtype=bool) if distinct == {True, False} else None


def design(table: pd.DataFrame, target: str, derived: Sequence[str], keep: np.ndarray) -> Design:
    """The `Design` of a boolean target on the rows `keep` (where it is defined), read off the table: the first pair
    of text columns (in column order) that take the same two or more values there and whose equality is the target
    on every row; among the other derived boolean labels, defined wherever the target is, the first equal to it and
    the first true only where it is (with fewer rows true). Not boolean: nothing defined."""
    y = _boolean(table.loc[keep, target])
    if y is None:
        return Design(target)
    rows = table[keep]
    texts = [c for c in rows.columns if c != target and _boolean(rows[c]) is None and rows[c].notna().all()]
    pair: dict = {}
    for a_i, a in enumerate(texts):
        left = rows[a].astype(str).to_numpy()
        for b in texts[a_i + 1:]:
            right = rows[b].astype(str).to_numpy()
            values = sorted(set(left))
            if len(values) >= 2 and values == sorted(set(right)) and np.array_equal(left == right, y):
                pair = {"left": a, "right": b, "values": tuple(values)}
                break
        if pair:
            break
    same_as = source = None
    for label in derived:
        other = None if label == target or rows[label].isna().any() else _boolean(rows[label])
        if other is None:
            continue
        if same_as is None and np.array_equal(other, y):
            same_as = label
        elif source is None and not np.any(other & ~y) and other.sum() < y.sum() and other.any():
            source = label
    return Design(target, **pair, source=source, same_as=same_as)


@dataclass(frozen=True)
class Probes:
    """One run's probes: every target's, split's and layer's scores with their controls (`table`), the cross-name
    probes per target and layer (`cross`), each target's `Design`, and what was selected (samples, events)."""

    table: pd.DataFrame
    cross: pd.DataFrame
    designs: tuple[Design, ...]
    n: int
    events: int | None


def probe_tables(store: ActivationStore, suite: Suite, where: dict, targets: Sequence[str] | None,
                 splits: Sequence[str], hooks: Sequence[str], cv: int = 5, seed: int = 0, n_shuffles: int = 3,
                 C: float = 1.0, progress: bool = False, matchings: int = 20, n_bootstrap: int = 1000) -> Probes:
    """Probes of every target (None: the labels the suite derives) and split at `hooks` on the final-token samples
    `where` selects, rows where a target is NA left out of its probes, with the control task (`matchings` wrong
    matchings, seeded, of a target whose `Design` has a matching; folds of the same number and seed, stratified by
    each labelling, so they differ between labellings) and the cross-name
    probe (a target whose Design has a source; cells held out as in the cell split)."""
    samples, table, derived = labelled_samples(store, suite, where)
    targets = list(targets or derived)
    if not targets:
        raise ValueError(f"suite {suite.name} derives no labels for final-token rows; name one with --target (a "
                         f"field of the final-token index: {', '.join(table.columns)})")
    unknown = [t for t in targets if t not in table.columns]
    if unknown:
        raise ValueError(f"--target {unknown[0]!r}: expected a field of the final-token index or a label the suite "
                         f"derives ({', '.join(table.columns)})")
    at = samples[[store.hooks.index(h) for h in hooks]]
    cells = split_groups(table, "cell", store.meta["cell"])
    frames, crosses, designs = [], [], []
    for target in targets:
        values = table[target]
        keep = values.notna().to_numpy()
        y = values[keep].to_numpy(dtype=bool if values.dtype == "boolean" else None)
        plan = design(table, target, derived, keep)
        designs.append(plan)
        if plan.left and matchings:
            code = {v: i for i, v in enumerate(plan.values)}
            left, right = (table.loc[keep, c].astype(str).map(code).to_numpy() for c in (plan.left, plan.right))
            wrong = wrong_matchings(len(plan.values), matchings, seed)
        for split in splits:
            groups = split_groups(table, split, store.meta["cell"])
            groups = None if groups is None else groups[keep]
            frame = probes.layer_probes(at[:, keep], y, hooks, groups, cv, seed, n_shuffles, C, progress)
            if plan.left and matchings:
                control = probes.layer_matching_controls(at[:, keep], left, right, wrong, hooks, groups, cv, seed, C,
                                                         progress)
                frame = pd.concat([frame, control.drop(columns=["hook", "layer"])], axis=1)
            frame.insert(0, "split", split)
            frame.insert(0, "target", target)
            frames.append(frame)
        if plan.source:
            cross = probes.layer_cross_name(at[:, keep], y, table.loc[keep, plan.source].to_numpy(dtype=bool),
                                            cells[keep], hooks, cv, seed, C, n_bootstrap, progress)
            cross.insert(0, "source", plan.source)
            cross.insert(0, "target", target)
            crosses.append(cross)
    events = int(table["event_id"].nunique()) if "event_id" in table else None
    cross = pd.concat(crosses, ignore_index=True) if crosses else pd.DataFrame()
    return Probes(pd.concat(frames, ignore_index=True), cross, tuple(designs), len(table), events)


def probe_table(store: ActivationStore, suite: Suite, where: dict, targets: Sequence[str] | None,
                splits: Sequence[str], hooks: Sequence[str], cv: int = 5, seed: int = 0, n_shuffles: int = 3,
                C: float = 1.0, progress: bool = False, matchings: int = 20) -> pd.DataFrame:
    """`probe_tables`' scores alone: one row per target, split and hook (target, split, hook, layer, the probe's and
    its shuffled-label control's scores, then the control task's where it ran)."""
    return probe_tables(store, suite, where, targets, splits, hooks, cv, seed, n_shuffles, C, progress,
                        matchings).table


def _best(table: pd.DataFrame) -> pd.DataFrame:
    """Each run's, target's and split's layer of the highest balanced accuracy, with its controls and chance."""
    rows = table.loc[table.groupby(["run", "target", "split"], sort=False)["balanced_accuracy_mean"].idxmax()]
    columns = [c for c in MATCHING_SCORES if c in rows]
    return rows[["run", "target", "split", "hook", *SCORES, *columns, "n", "n_classes", "folds"]].reset_index(
        drop=True)


def _best_cross(cross: pd.DataFrame) -> pd.DataFrame:
    """Each run's and target's layer of the highest cross-name balanced accuracy."""
    rows = cross.loc[cross.groupby(["run", "target"], sort=False)["cross_balanced_accuracy"].idxmax()]
    return rows[["run", "target", "source", "hook", *CROSS_SCORES]].reset_index(drop=True)


def _p(value: float) -> str:
    return f"{value:.3g}"


def matching_reading(row: pd.Series, plan: Design, layers: int) -> str:
    """What the control task at a target's best layer (`row` of `_best`) supports, in one sentence from its
    numbers: readable beyond every wrong matching of the same cells, not separable from them at ALPHA with so few
    matchings, or no more readable than they are."""
    target = literal(plan.target)
    head = (f"**{literal(row['run'])}, {target}** (split by {row['split']}, best layer {literal(row['hook'])}, n = "
            f"{row['n']}: balanced accuracy {row['balanced_accuracy_mean']:.2f}; shuffled labels "
            f"{row['control_balanced_accuracy_mean']:.2f})")
    if not plan.left:
        return (f"{head}: no matching of two fields gives this label, so the control task is not defined; the "
                "shuffled-label control says only that the probe beats labels with no structure at all.")
    if pd.isna(row.get("matching_real", np.nan)):
        return f"{head}: the control task ({literal(plan.matching)}) did not run (--matchings 0)."
    m = int(row["matchings"])
    drawn = f"all {m}" if row["matching_exact"] else f"{m} drawn"
    numbers = (f"{row['matching_real']:.2f} against the wrong matchings of {literal(plan.matching)}: mean "
               f"{row['matching_mean']:.2f} (5–95% {row['matching_q05']:.2f}–{row['matching_q95']:.2f}, largest "
               f"{row['matching_max']:.2f}; {drawn}), selectivity {row['selectivity']:+.2f}, rank "
               f"{int(row['matching_rank'])} of {m + 1} (ties count against it), p = {_p(row['matching_p'])}, "
               f"max-statistic p over the {layers} layers {_p(row['matching_p_fwe'])} (floor {_p(1 / (m + 1))})")
    if row["matching_p_fwe"] <= ALPHA and row["selectivity"] > 0:
        verdict = (f"{target} is linearly readable beyond what any wrong matching of the same cell structure "
                   "gives")
    elif 1 / (m + 1) > ALPHA:
        verdict = (f"with {m} wrong matchings p cannot fall to {ALPHA}, so the control cannot tell this matching "
                   "apart")
    else:
        verdict = (f"{target} is no more readable than wrong matchings of the same cells (their mean "
                   f"{row['matching_mean']:.2f}, shuffled labels {row['control_balanced_accuracy_mean']:.2f}): what "
                   "the probe reads here, if anything, any labelling of the cells gives")
    text = f"{head}: {numbers}. Reading: {verdict}."
    if plan.same_as:
        same = literal(plan.same_as)
        text += (f" Here {target} equals {same} on every row, so this probe cannot tell the two readings apart: "
                 f"whatever it supports for {target} it supports for {same} (intergroup: "
                 "the same string as persona and experiencer, where each group holds one name).")
    return text


def cross_reading(row: pd.Series, ordinary: float | None, layers: int) -> str:
    """What a target's cross-name probe at its best layer (`row` of `_best_cross`) supports, beside the ordinary
    probe's best balanced accuracy split by cell (`ordinary`)."""
    beside = f"; the ordinary probe split by cell: {ordinary:.2f}" if ordinary is not None else ""
    target = literal(row["target"])
    head = (f"**{literal(row['run'])}, {target} across names** (trained on {literal(row['source'])} rows, tested "
            f"on {row['cells_heldout']} {target} cells of different names against {row['cells_negative']} "
            f"held-out negative cells; best of {layers} layers, {literal(row['hook'])}): balanced accuracy "
            f"{row['cross_balanced_accuracy']:.2f}, 95% interval "
            f"{row['cross_ci_low']:.2f}–{row['cross_ci_high']:.2f} over test cells (recall "
            f"{row['cross_recall']:.2f}, false positives {row['cross_false_positive']:.2f}){beside}")
    if row["cross_ci_low"] > 0.5:
        return (f"{head}. It generalises across names: a same-string detector scores 0.5 here, so "
                f"{target} is read as more than same-string detection.")
    return (f"{head}. The interval reaches chance (0.5, what a same-string detector scores): no evidence that "
            f"{target} is readable beyond same-string detection.")


PROBE_TEXT = (
    "Per layer, a logistic-regression probe (standardized states, balanced class weights) predicts the target from "
    "each selected final-token sample, scored by stratified k-fold cross-validation: `balanced_accuracy` averages "
    "the recall of every class, so `chance` is 1 / classes whatever their sizes. Folds by `cell` keep every cell's "
    "samples on one side, so the probe must generalize to unseen cells; folds by a field (e.g. event_id) do the "
    "same for its values. Rows where the target is undefined (e.g. intergroup's \"a person\") are left out.\n\n"
    "Three controls answer three questions. **Shuffled labels** (`control_*`): the same probe on labels permuted "
    "across samples; it destroys the cell structure, so it says only whether the probe beats labels with no "
    "structure. **Wrong matchings** (`matching_*`, the control task): a target that is the equality of two fields "
    "(ingroup: perceiver_group = experiencer_group) relabelled by permutations π of the left field's values "
    "(persona group g is \"in-group\" with experiencer group π(g)), each probed with folds of the same number and "
    "seed, stratified by its own labels (so its folds differ from the real label's); `selectivity` "
    "is the real balanced accuracy minus the wrong matchings' mean, `matching_p` = (1 + #{wrong >= real}) / (m + 1) "
    "(floor 1 / (m + 1), exact where all n! − 1 are enumerated) and `matching_p_fwe` the same against the largest "
    "wrong score over the layers (max statistic): what a procedure reads equally well for wrong matchings is the "
    "cell structure, not the in-group relation. **Cross-name** (`cross_*`): a probe of the target trained only on "
    "the rows of a narrower label (ingroup: same_name, the same string on both sides) and the negatives of most "
    "cells, tested on the target's other rows (same group, different names) and the negatives of held-out cells; a "
    "same-string detector scores 0.5. The tables show each target's best layer (every layer in probes.csv and "
    "cross_name.csv).")


def _scope(options: Options, results: Sequence[tuple[Run, Probes]], layers: int) -> Section:
    """The report's "what this can and cannot show", from this run's settings and designs."""
    can, cannot, where = [], [], literal(where_text(parse_where(options.where)))
    for run, found in results:
        events, name = f", {found.events} events" if found.events is not None else "", literal(run.name)
        can.append(f"{name}: whether each target is available to a linear readout at each of {layers} layers, on "
                   f"the {found.n} final-token samples selected{events} ({where}; "
                   f"each probe uses the rows where its target is defined: n in the tables), split by "
                   f"{', '.join(options.splits)}.")
        matched = [literal(d.target) for d in found.designs if d.left]
        if matched and options.matchings:
            can.append(f"{name}: whether each of {', '.join(matched)} is readable beyond up to "
                       f"{options.matchings} wrong matchings of the same cells (the control task keeps the cell "
                       "structure the shuffled labels destroy).")
        undefined = [literal(d.target) for d in found.designs if not d.left]
        if undefined:
            cannot.append(f"{name}: the control task for {', '.join(undefined)}: no matching of two fields gives "
                          "it, so only the shuffled-label control ran, which any cell structure beats.")
        if matched and not options.matchings:
            cannot.append(f"{name}: whether each of {', '.join(matched)} is special among labellings of the "
                          "same cells: no wrong matching ran (--matchings 0).")
        equal: dict[frozenset, Design] = {}
        for d in found.designs:
            if d.same_as:
                equal.setdefault(frozenset((d.target, d.same_as)), d)
        for d in equal.values():
            cannot.append(f"{name}: tell {literal(d.target)} from {literal(d.same_as)}: they are equal on every "
                          "selected row, so no probe here separates the two readings (intergroup: a group relation "
                          "from same-string detection).")
        for d in found.designs:
            if d.source:
                can.append(f"{name}: whether {literal(d.target)} transfers from the rows of {literal(d.source)} to its "
                           "other rows (cross-name: intergroup's same string to different names of one group).")
    if "sample" in options.splits:
        cannot.append("With the split by sample, a test sample's cell was seen in training: read the cell split for "
                      "generalisation to unseen cells.")
    cannot += [
        "That the model uses a readable label: steering and patching ask that.",
        f"Which layer is best without selection: the best of {layers} layers is picked after looking; quote "
        "matching_p_fwe (max statistic over the layers), not matching_p, for it. The ordinary probe's only "
        "uncertainty is its folds' spread (`_std`), not an interval over events.",
        "Whether a target spelled in the prompt (a perceiver's group) is read beyond its tokens: the embedding layer's "
        "score (if probed) shows how much the tokens alone give."]
    if options.matchings and 1 / (options.matchings + 1) > ALPHA:
        cannot.append(f"A control-task p below {_p(1 / (options.matchings + 1))}: with --matchings "
                      f"{options.matchings} that is its floor.")
    return scope(can, cannot)


class ProbeStudy(Study):
    """Linear probes per layer on final-token samples, with shuffled-label, wrong-matching and cross-name controls
    (interp.probes)."""

    name = "probe"
    description = ("linear probes: is a label of the prompt (an index field or a label the suite derives) readable "
                   "from the final-token states per layer, against shuffled labels and wrong matchings of the same "
                   "cells, and across names, split by sample, cell or field")
    Options = Options

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        parts = []
        for run in runs:
            store = load(run.run_dir)
            hooks = select_hooks(options.layers, store.hooks, "--layers")
            parts.append(f"{run.name}: {len(hooks)} layers of the final-token samples of "
                         f"{where_text(parse_where(options.where))}")
        targets = ", ".join(options.targets) or "the labels each suite derives"
        return (f"{'; '.join(parts)}; targets {targets}; splits {', '.join(options.splits)}; {options.cv}-fold, "
                f"{options.n_shuffles} label shuffles, up to {options.matchings} wrong matchings per matching target "
                f"(each one more probe per split and layer), cross-name where a target holds a narrower label "
                f"(seed {options.seed}).")

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True) -> Analysis:
        where, frames, crosses, figures, results = parse_where(options.where), [], [], [], []
        for run in runs:
            store = load(run.run_dir)
            hooks = select_hooks(options.layers, store.hooks, "--layers")
            found = probe_tables(store, suite_of(run), where, options.targets, options.splits, hooks, options.cv,
                                 options.seed, options.n_shuffles, options.C, progress, options.matchings,
                                 options.n_bootstrap)
            results.append((run, found))
            frames.append(found.table.assign(run=run.name)[["run", *found.table.columns]])
            cross = found.cross.assign(run=run.name)[["run", *found.cross.columns]] if len(found.cross) else None
            crosses.append(cross)
            name = f"figures/{run.stem}_probes" if len(runs) > 1 else "figures/probes"
            # the figure draws the names as written; its caption in the report is Markdown
            title = f"{run.name}, final token ({where_text(where)})"
            figures.append(Figure(name, f"Probes per layer, {literal(run.name)}, final token "
                                        f"({literal(where_text(where))})",
                                  probes.probe_figure(found.table, title=title, cross=found.cross if len(found.cross)
                                                      else None, events=found.events)))
        table = pd.concat(frames, ignore_index=True)
        layers = int(table.groupby(["run", "target", "split"]).size().max())
        best = _best(table)
        readings = []
        cross_tables, files = (), [Table("probes", "Probe and control scores at every layer", table)]
        for run, found in results:
            for plan in found.designs:
                for _, row in best[(best.run == run.name) & (best.target == plan.target)].iterrows():
                    readings.append(matching_reading(row, plan, layers))
        present = [c for c in crosses if c is not None]
        if present:
            cross = pd.concat(present, ignore_index=True)
            best_cross = _best_cross(cross)
            for _, row in best_cross.iterrows():
                by_cell = best[(best.run == row["run"]) & (best.target == row["target"]) & (best.split == "cell")]
                readings.append(cross_reading(row, by_cell["balanced_accuracy_mean"].iloc[0] if len(by_cell) else None,
                                              layers))
            cross_tables = (Table("cross_name_summary", "Each target's best layer across names", best_cross,
                                  {c: "count" for c in CROSS_SCORES[5:]}),)
            files.append(Table("cross_name", "Cross-name probes at every layer", cross))
        noted = set()
        for run, found in results:
            for plan in found.designs:
                pair = (run.name, frozenset((plan.target, plan.same_as)))
                if plan.same_as and not plan.source and pair not in noted:
                    noted.add(pair)
                    target, same = literal(plan.target), literal(plan.same_as)
                    readings.append(f"**{literal(run.name)}, {target} across names**: not defined: {target} equals "
                                    f"{same} on every selected row, so no {target} row lies outside {same} to test "
                                    "on.")
        formats = {"n": "count", "n_classes": "count", "folds": "count", "matchings": "count",
                   "matching_rank": "count", "matching_p": "p", "matching_p_fwe": "p", "selectivity": "signed"}
        sections = [Section("Probes per layer", PROBE_TEXT,
                            (Table("probe_summary", "Each target's best layer by balanced accuracy, with its controls",
                                   best, formats), *cross_tables), tuple(figures)),
                    Section("What each probe supports", "\n".join(f"- {r}" for r in readings)),
                    _scope(options, results, layers)]
        method = [f"Probe: StandardScaler then LogisticRegression (C={options.C}, balanced class weights); "
                  f"{options.cv}-fold cross-validation (seed {options.seed}); controls: {options.n_shuffles} label "
                  f"shuffles (folds pooled); up to {options.matchings} wrong matchings (interp.matchings, seed "
                  f"{options.seed}; all where fewer exist), folds of the same number and seed stratified by each "
                  f"labelling; cross-name: {options.cv} folds of the "
                  f"negative cells, {options.n_bootstrap} resamples of the test cells."]
        return Analysis("Linear probes per layer", "empathy-gap interp probe (interp.probes)", sections, method,
                        files, record={"where": where})


STUDY = ProbeStudy()
