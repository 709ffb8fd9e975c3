"""The probe study (`empathy-gap interp probe RUN_DIR...`): is a label of the prompt linearly readable from the
final-token states at each layer? Targets are any field of the activation index or any label the suite derives for
final-token rows (intergroup: `ingroup`, `perceiver_group`); the folds may keep whole cells or whole values of a field
out of training. The numbers are interp.probes'; this module reads the runs through their suites' hooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from activations.capture import LAYER_GRAMMAR, select_hooks
from activations.store import ActivationStore, load
from behavioral.analysis.runs import Run
from behavioral.analysis.spec import Analysis, Figure, Section, Table
from behavioral.options import check_minimums, option
from behavioral.studies.identities import WHERE_HELP, parse_where, suite_of, where_text
from behavioral.studies.study import Study
from behavioral.suite import Suite
from interp import probes

SPLITS = ("sample", "cell")  # besides any index field
SCORES = ["balanced_accuracy_mean", "control_balanced_accuracy_mean", "chance", "accuracy_mean",
          "control_accuracy_mean", "majority"]


@dataclass(frozen=True)
class Options:
    """What is probed (targets, selection, layers), how the folds are split, and the probe's settings."""

    targets: tuple[str, ...] = option((), "labels probed: fields of the final-token index or labels the suite "
                                          "derives; none: the labels the suite derives", name="--target",
                                      metavar="FIELD")
    splits: tuple[str, ...] = option(SPLITS, "folds: sample (stratified), cell (no cell of the capture spec in "
                                             "both train and test) or an index field such as event_id (no value "
                                             "in both)", name="--split", metavar="SPLIT")
    where: tuple[str, ...] = option((), WHERE_HELP, metavar="FIELD=VALUE")
    layers: str = option("all", f"layers probed: {LAYER_GRAMMAR}", metavar="LAYERS")
    cv: int = option(5, "folds (fewer where the smallest class or the groups are fewer)", metavar="K", minimum=2)
    seed: int = option(0, "seed of the folds and the shuffled labels", metavar="N")
    n_shuffles: int = option(3, "label shuffles of the control", metavar="N", minimum=0)
    C: float = option(1.0, "inverse regularization of the logistic regression", name="--C", metavar="C")

    def __post_init__(self):
        check_minimums(self)
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


def probe_table(store: ActivationStore, suite: Suite, where: dict, targets: Sequence[str] | None,
                splits: Sequence[str], hooks: Sequence[str], cv: int = 5, seed: int = 0, n_shuffles: int = 3,
                C: float = 1.0, progress: bool = False) -> pd.DataFrame:
    """Probes of every target (None: the labels the suite derives) and split at `hooks` on the final-token samples
    `where` selects, rows where a target is NA left out of its probes: one row per target, split and hook (target,
    split, hook, layer, scores)."""
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
    frames = []
    for target in targets:
        values = table[target]
        keep = values.notna().to_numpy()
        y = values[keep].to_numpy(dtype=bool if values.dtype == "boolean" else None)
        for split in splits:
            groups = split_groups(table, split, store.meta["cell"])
            frame = probes.layer_probes(at[:, keep], y, hooks, None if groups is None else groups[keep], cv, seed,
                                        n_shuffles, C, progress)
            frame.insert(0, "split", split)
            frame.insert(0, "target", target)
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _best(table: pd.DataFrame) -> pd.DataFrame:
    """Each run's, target's and split's layer of the highest balanced accuracy, with its control and chance."""
    rows = table.loc[table.groupby(["run", "target", "split"], sort=False)["balanced_accuracy_mean"].idxmax()]
    return rows[["run", "target", "split", "hook", *SCORES, "n", "n_classes", "folds"]].reset_index(drop=True)


PROBE_TEXT = (
    "Per layer, a logistic-regression probe (standardized states, balanced class weights) predicts the target from "
    "each selected final-token sample, scored by stratified k-fold cross-validation: `balanced_accuracy` averages "
    "the recall of every class, so `chance` is 1 / classes whatever their sizes. The control refits the same probe "
    "on shuffled labels (same folds and seed): what the probe gets from chance structure alone. Folds by `cell` keep "
    "every cell's samples on one side, so the probe must generalize to unseen cells; folds by a field (e.g. "
    "event_id) do the same for its values. Rows where the target is undefined (e.g. intergroup's \"a person\") are "
    "left out. The table shows each target's best layer (every layer in probes.csv).")
LIMITS_TEXT = (
    "- A readable label is available to a linear readout at that layer; it cannot say the model uses it (steering "
    "and patching ask that), and a probe with many dimensions and few samples can fit structure that a split by "
    "sample leaks: compare with the cell split.\n"
    "- The best layer is picked after looking at every layer, and the folds' spread (`_std` in probes.csv) is the "
    "only uncertainty given; with few samples per class it is large.\n"
    "- Targets correlated with the prompt's wording (a perceiver's group is spelled in the prompt) are readable from "
    "the tokens alone; the embedding layer's score shows how much.")


class ProbeStudy(Study):
    """Linear probes per layer on final-token samples, with a shuffled-label control (interp.probes)."""

    name = "probe"
    description = ("linear probes: is a label of the prompt (an index field or a label the suite derives) readable "
                   "from the final-token states per layer, against shuffled labels, split by sample, cell or field")
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
                f"{options.n_shuffles} label shuffles (seed {options.seed}).")

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True) -> Analysis:
        where, frames, figures = parse_where(options.where), [], []
        for run in runs:
            store = load(run.run_dir)
            hooks = select_hooks(options.layers, store.hooks, "--layers")
            table = probe_table(store, suite_of(run), where, options.targets, options.splits, hooks,
                                options.cv, options.seed, options.n_shuffles, options.C, progress)
            table.insert(0, "run", run.name)
            frames.append(table)
            name = f"figures/{run.stem}_probes" if len(runs) > 1 else "figures/probes"
            title = f"{run.name}, final token ({where_text(where)})"
            figures.append(Figure(name, f"Probes per layer, {title}", probes.probe_figure(table, title=title)))
        table = pd.concat(frames, ignore_index=True)
        sections = [Section("Probes per layer", PROBE_TEXT,
                            (Table("probe_summary", "Each target's best layer by balanced accuracy", _best(table),
                                   {"n": "count", "n_classes": "count", "folds": "count"}),), tuple(figures)),
                    Section("What these numbers cannot show", LIMITS_TEXT)]
        method = [f"Probe: StandardScaler then LogisticRegression (C={options.C}, balanced class weights); "
                  f"{options.cv}-fold cross-validation (seed {options.seed}); control: {options.n_shuffles} label "
                  "shuffles, folds pooled."]
        return Analysis("Linear probes per layer", "empathy-gap interp probe (interp.probes)", sections, method,
                        [Table("probes", "Probe and control scores at every layer", table)],
                        record={"where": where})


STUDY = ProbeStudy()
