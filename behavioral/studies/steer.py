"""The steering study (`empathy-gap interp steer RUN_DIR`): does moving the final-token states along the direction
that separates a suite's labelled cells (intergroup: in-group minus out-group) move the suite's measure? The
direction comes from the run's capture through the suite's `cell_labels`; the steered reruns of the run's slice, one
run directory per steering, and their measures come from the suite's steering protocol (only intergroup has one)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
from matplotlib.figure import Figure as MplFigure

from activations.capture import EMBED_HOOK, LAYER_GRAMMAR, hook_layer, select_hooks
from activations.store import ActivationStore, load
from behavioral.analysis.runs import Run
from behavioral.analysis.spec import Analysis, Figure, Section, Table
from behavioral.options import check_minimums, option
from behavioral.run import RunConfig
from behavioral.studies.identities import WHERE_HELP, parse_where, suite_of, where_text
from behavioral.studies.rerun import load_model, one_run, suite_protocol
from behavioral.studies.study import Study
from interp.steering import (
    Condition, direction_table, layer_directions, mean_difference, run_conditions, sweep_conditions, unit_rows,
    zero_coefficient_check,
)

PROTOCOLS = {"intergroup": "behavioral.suites.intergroup.steering"}  # suite -> module of its steering protocol
RUNS_DIR = "runs"  # in the output folder: the steered run directories, kept and resumed


class SteeringProtocol(Protocol):
    """What a suite's steering module provides (the module itself is the protocol)."""

    LABEL: str  # the cell label (Suite.cell_labels) whose true cells minus false cells is the direction
    KEY: tuple[str, ...]  # the columns that identify a result row of a rerun
    RESULT_COLUMNS: tuple[str, ...]  # the result columns coefficient 0 must reproduce exactly

    def block(self, config: Mapping, where: Mapping) -> dict:
        """The selection (index fields -> one value each) of the direction's cells and the reruns' slice."""

    def final(self, store: ActivationStore, selection: Mapping) -> tuple[np.ndarray, pd.DataFrame]:
        """The selected final-token cell means and their index (with `count`), in the order they are pooled."""

    def slice_config(self, stored: RunConfig, selection: Mapping, limit_events: int | None) -> RunConfig:
        """The run's configuration narrowed to the selection (and a sample of events)."""

    def read_rows(self, run_dir: Path) -> pd.DataFrame:
        """A rerun's result rows."""

    def summarize(self, rows: pd.DataFrame, n_permutations: int, seed: int) -> pd.DataFrame:
        """The suite's measures per steering (and per block of the slice)."""

    def figures(self, summary: pd.DataFrame) -> list[tuple[str, str, MplFigure]]:
        """(name, title, figure) of the summary."""


@dataclass(frozen=True)
class Options:
    """Which cells give the direction, where and how hard it steers, the control, the reruns' events, the
    statistics, and how the run's model is loaded."""

    where: tuple[str, ...] = option((), WHERE_HELP + "; the final-token cells of the direction and the slice the "
                                    "steered runs rerun (intergroup: one category and one setting; default the "
                                    "run's first)", metavar="FIELD=VALUE")
    layers: str = option("middle", f"decoder layers steered, one at a time: {LAYER_GRAMMAR} (hook_embed is never "
                                   "steered)", metavar="LAYERS")
    coefs: tuple[float, ...] = option((-4.0, 0.0, 4.0), "coefficients (negative ones as --coef=-4,4); 1 adds one "
                                      "whole difference of the two sides (with --unit: one unit of activation norm); "
                                      "0 is always added, as the exactness check", name="--coef", metavar="C")
    unit: bool = option(False, "scale each layer's direction to norm 1")
    project: bool = option(False, "also project each layer's direction out")
    random_control: bool = option(False, "with --project: also project out a random direction of the same norm at "
                                         "each layer (seeded by the layer), the control")
    limit_events: int | None = option(None, "events of the steered runs, a seeded sample (default: the run's own); "
                                            "the direction still comes from the whole capture", metavar="N",
                                      minimum=1)
    permutations: int = option(10_000, "permutations of the identity matching in δ's test", metavar="N", minimum=1)
    seed: int = option(0, "seed of the permutations", name="--permutation-seed", metavar="N")
    device: str = option("auto", "device of the model", metavar="DEVICE")
    dtype: str | None = option(None, "dtype of the model (default: the run's)", metavar="DTYPE")
    batch_size: int = option(32, "prompts per forward of the reruns", metavar="N", minimum=1)
    trust_remote_code: bool = option(False, "let the model folder run its own code (never taken from a manifest)")

    def __post_init__(self):
        try:
            coefs = tuple(float(c) for c in self.coefs)
        except ValueError:
            raise ValueError(f"--coef {','.join(map(str, self.coefs))}: expected numbers, e.g. --coef=-4,4") from None
        object.__setattr__(self, "coefs", coefs)
        check_minimums(self)
        if self.random_control and not self.project:
            raise ValueError("--random-control goes with --project (it is the projection's control)")
        parse_where(self.where)


def steered_hooks(spec: str, hooks: Sequence[str]) -> list[int]:
    """The decoder layers of the captured `hooks` that --layers names (hook_embed left out); none is a ValueError."""
    layers = [hook_layer(h) for h in select_hooks(spec, hooks, "--layers") if h != EMBED_HOOK]
    if not layers:
        raise ValueError(f"--layers {spec}: names no decoder block (hook_embed is never steered)")
    return layers


@dataclass(frozen=True)
class Direction:
    """The direction of a selection: the raw difference and the one steered (unit rows where asked), [hooks, d]
    float32 in the store's hook order, and the cells' means it came from."""

    raw: np.ndarray
    used: np.ndarray
    means: np.ndarray


def direction(store: ActivationStore, run: Run, protocol: SteeringProtocol, selection: Mapping,
              unit: bool) -> Direction:
    """The count-weighted mean final-token state of the selected cells (read by the protocol's `final`) whose
    suite-derived label (the protocol's LABEL) is true minus that of the cells where it is false (cells where it is
    NA in neither)."""
    label = protocol.LABEL
    means, cells = protocol.final(store, selection)
    labels = suite_of(run).cell_labels(cells)
    if label not in labels.columns:
        raise ValueError(f"suite {run.config['suite']} derives no {label!r} label for final-token cells")
    values = labels[label]
    raw = mean_difference(means, cells["count"], values.eq(True).fillna(False), values.eq(False).fillna(False))
    return Direction(raw.astype(np.float32), (unit_rows(raw) if unit else raw).astype(np.float32), means)


def conditions(options: Options, layers: Sequence[int]) -> list[Condition]:
    """The sweep's steerings: unsteered, each layer × coefficient (0 always, once), projections and controls."""
    return sweep_conditions(layers, sorted(set(options.coefs) | {0.0}), options.project, options.random_control)


DIRECTION_TEXT = (
    "Per captured layer, the direction is the count-weighted mean final-token state of the selected cells the suite "
    "labels `{label}` minus that of the cells it labels otherwise (cells without the label, e.g. intergroup's "
    "\"a person\", in neither). The table gives its norm beside the norm of the mean state (`relative_norm`: how far "
    "coefficient 1 moves the state) and its cosine with the previous layer's direction; direction_vectors.csv holds "
    "the vectors steered.")
SWEEP_TEXT = (
    "Each steering reruns the run's slice with the model's output at one decoder layer moved by coefficient × the "
    "direction at every position of every forward (projection: its component along the direction removed; the "
    "random control projects out a seeded random direction of the same norm). The suite's measures per steering, "
    "with `*_change` the difference from the unsteered rerun; steering_rows.csv holds every prompt's result.")
CHECK_TEXT = (
    "Coefficient 0 runs the steering hook without moving anything: its rows must equal the unsteered rerun's exactly "
    "(every result column, NaN equal to NaN). A difference means the steered path itself changes results.")
LIMITS_TEXT = (
    "- A direction that moves the measure is sufficient to move it along that axis; it does not show that the model "
    "computes the measure from it, and large coefficients push states off their distribution (watch the refusal "
    "and numeric rates beside δ).\n"
    "- The direction comes from the same capture whose slice is rerun: a change is an in-sample effect, and few "
    "events give δ a wide null interval.\n"
    "- The projection's effect is only informative beside the random direction's (--random-control).")


class SteerStudy(Study):
    """Steering along the direction a suite's cell label gives, with the suite's steered reruns and measures."""

    name = "steer"
    keep = (RUNS_DIR,)
    description = ("steering: rerun the run's slice with its final-token direction (the suite's label, intergroup: "
                   "in-group minus out-group) added or projected out at chosen layers; the suite's measures per "
                   "steering, the zero-coefficient check, a random-direction control")
    Options = Options

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        run = one_run(runs, self.name)
        protocol: SteeringProtocol = suite_protocol(run, PROTOCOLS, "steering")
        selection = protocol.block(run.config, parse_where(options.where))
        layers = steered_hooks(options.layers, load(run.run_dir).hooks)
        steerings = conditions(options, layers)
        n = options.limit_events
        events = f"{n} event{'s' if n != 1 else ''}" if n else "the run's events"
        return (f"{run.name}: the direction of {where_text(selection)} from its final-token cells ({protocol.LABEL} "
                f"true minus false{', unit norm' if options.unit else ''}); {len(steerings)} reruns of that slice "
                f"({events}) at layers {layers} into the output folder's {RUNS_DIR}/ (resumed on a rerun with the "
                f"same options): "
                f"{', '.join(c.label for c in steerings)}; the model {run.config['model']} is loaded as the run "
                "recorded it and one batch is timed first.")

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True) -> Analysis:
        run = one_run(runs, self.name)
        protocol: SteeringProtocol = suite_protocol(run, PROTOCOLS, "steering")
        selection = protocol.block(run.config, parse_where(options.where))
        store = load(run.run_dir)
        layers = steered_hooks(options.layers, store.hooks)
        found = direction(store, run, protocol, selection, options.unit)
        loaded = load_model(run, options.device, options.dtype, options.trust_remote_code)
        stored = RunConfig.from_run_dir(run.run_dir, trust_remote_code=options.trust_remote_code)
        config = dataclasses.replace(protocol.slice_config(stored, selection, options.limit_events),
                                     device=options.device, batch_size=options.batch_size, capture=(),
                                     per_cell_samples=0, dtype=options.dtype or stored.dtype)
        steerings = conditions(options, layers)
        rows = run_conditions(config, out / RUNS_DIR, loaded,
                              layer_directions(found.used, store.hooks, layers), steerings, protocol.read_rows,
                              suite_of(run).caches, run.run_dir, progress)
        summary = protocol.summarize(rows, options.permutations, options.seed)
        check = zero_coefficient_check(rows, protocol.KEY, protocol.RESULT_COLUMNS)
        reproduces = bool(check["identical"].all()) and len(check) == 1
        vectors = pd.DataFrame(found.used, columns=[f"d{i}" for i in range(found.used.shape[1])])
        vectors.insert(0, "hook", store.hooks)
        figures = tuple(Figure(f"figures/{name}", title, fig) for name, title, fig in protocol.figures(summary))
        sections = [
            Section("The direction", DIRECTION_TEXT.format(label=protocol.LABEL),
                    (Table("directions", f"Direction per layer, {where_text(selection)}",
                           direction_table(found.raw, found.means, store.hooks)),)),
            Section("The suite's measures under steering", SWEEP_TEXT,
                    (Table("steering", "Measures per steering", summary, {"n_prompts": "count"}),), figures),
            Section("Coefficient 0 reproduces the unsteered rerun", CHECK_TEXT,
                    (Table("zero_coefficient_check", "Coefficient 0 against the unsteered rerun", check,
                           {"n_rows": "count", "differing_rows": "count"}),)),
            Section("What these numbers cannot show", LIMITS_TEXT)]
        notes = [] if reproduces else ["Coefficient 0 did NOT reproduce the unsteered rerun exactly (see "
                                       "zero_coefficient_check.csv): the steered numbers are suspect."]
        record = {"selection": selection, "layers": layers, "coefficients": sorted(set(options.coefs) | {0.0}),
                  "runs_dir": RUNS_DIR, "steer_config": dataclasses.asdict(config),
                  "model": loaded[2], "zero_coefficient_reproduces_unsteered": reproduces}
        return Analysis("Steering along the suite's direction", "empathy-gap interp steer (interp.steering)",
                        sections, notes,
                        [Table("direction_vectors", "The directions steered, per hook", vectors),
                         Table("steering_rows", "Every prompt's result per steering", rows)], record=record)


STUDY = SteerStudy()
