"""The steering study (`empathy-gap interp steer RUN_DIR`): does moving the final-token states along the direction
that separates a suite's labelled cells (intergroup: in-group minus out-group) move the suite's measure, on events
the direction was not fit on, more than the same procedure does for wrong matchings of the identities and for random
directions the states vary along? The direction comes from the run's capture (a seeded split of its events by
default); the steered reruns of the slice on the held-out events, one run directory per steering, and their measures
come from the suite's steering protocol (only intergroup has one)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from activations.capture import EMBED_HOOK, LAYER_GRAMMAR, hook_layer, select_hooks
from activations.store import ActivationStore, load
from behavioral.report.formats import literal
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Analysis, Figure, Section, Table, scope
from behavioral.core.options import SEED, option
from behavioral.core.selection import field_values
from behavioral.runner.run import RunConfig
from interp.identities import WHERE_HELP, parse_where, suite_of, where_text
from behavioral.analysis.rerun import ModelOptions, load_model, one_run, protocol_of
from behavioral.analysis.study import Study
from interp.matchings import matched_cells, wrong_matchings
from interp.steering.controls import Block, dose_response, matching_control, random_control, summarize
from interp.steering.figure import figures as sweep_figures
from interp.steering.held_out import held_out_control
from interp.steering import (
    Condition, direction_table, hook_row, layer_directions, mean_difference, one_sided, run_conditions,
    span_direction, sweep_conditions, unit_rows, zero_coefficient_check,
)

RUNS_DIR = "runs"  # in the output folder: the steered run directories, kept and resumed
CHECK_DIR = "check"  # in RUNS_DIR: the unsteered and coefficient-0 reruns of the exactness check's events


class SteeringProtocol(Protocol):
    """What a suite declares as its steering protocol (Suite.protocols["steer"]; intergroup: its steering module):
    its cells and their label, the slice it reruns and how it reads and measures the reruns. The summary, the
    controls and the figure are the method's (`interp.steering.controls`, `.held_out`, `.figure`)."""

    LABEL: str  # the cell label (Suite.cell_labels) whose true cells minus false cells is the direction
    SIDES: tuple[str, str]  # what the label's true and false cells are called (one-sided steerings)
    SLOTS: tuple[str, str]  # the columns of a cell's (and a result row's) two identities
    KEY: tuple[str, ...]  # the columns that identify a result row of a rerun (the event id last)
    RESULT_COLUMNS: tuple[str, ...]  # the result columns coefficient 0 must reproduce exactly
    PANELS: tuple[tuple[str, str], ...]  # the summary's (column, title) drawn per steering, the headline first
    CHANGED: tuple[str, ...]  # the measures whose change from the unsteered rerun the summary adds

    def block(self, config: Mapping, where: Mapping) -> dict:
        """The selection (index fields -> one value each) of the direction's cells and the reruns' slice."""

    def final(self, store: ActivationStore, selection: Mapping,
              events: Sequence[str] | None = None) -> tuple[np.ndarray, pd.DataFrame]:
        """The selected final-token cell means (over `events` only, if given) and their index (with `count`)."""

    def identities(self, selection: Mapping) -> Mapping[str, int]:
        """Each identity of the selection -> its group index (what a matching permutes; the label is true where
        the two SLOTS hold identities of one group)."""

    def rerun(self, stored: RunConfig, selection: Mapping, limit_events: int | None,
              exclude_events: Sequence[str] = ()) -> tuple[RunConfig, list[str]]:
        """The run's configuration narrowed to the selection (and a sample of events, less `exclude_events`) and
        the events it draws, before it runs."""

    def read_rows(self, run_dir: Path) -> pd.DataFrame:
        """A rerun's result rows."""

    def identity_tokens(self, run: Run, selection: Mapping,
                        trust_remote_code: bool = False) -> Mapping[str, tuple[int, int]]:
        """Each identity of the selection -> the token counts of its two slots as the run's model read them (the
        held-out control's length covariate)."""

    def measured(self, rows: pd.DataFrame) -> Iterable[Block]:
        """The blocks of the reruns' rows (one per measure of each block of the slice) the controls read."""

    def measures(self, block: Block, condition: str, n_permutations: int, seed: int) -> Mapping[str, object]:
        """The suite's own measures of one condition of a block, with their intervals over events."""


@dataclass(frozen=True)
class Options(ModelOptions):
    """Which cells and events give the direction, which events test it, where and how hard it steers, the controls,
    the statistics, and how the run's model is loaded."""

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
    fit_fraction: float = option(0.5, "share of the run's events the direction is fit on (a seeded split; the rest "
                                      "are rerun); needs the capture's --per-cell-samples at least its events",
                                 metavar="F")
    split_seed: int = option(0, "seed of the split of events", metavar="N", **SEED)
    test_events: int | None = option(None, "fit on all the run's events and test on a new seeded sample of N events "
                                           "of the corpus (the run's seed), the run's own events left out",
                                     metavar="N", minimum=1)
    in_sample: bool = option(False, "fit on all the run's events and rerun the same events (an in-sample effect)")
    matchings: int = option(0, "with --project: also project out the direction of K wrong matchings of the "
                               "identities (all of them where there are fewer), the control of the projection",
                            metavar="K", minimum=0)
    random_directions: int = option(0, "with --project: also project out K random directions within the span of "
                                       "the fit cells' states, of the direction's norm; those that disturb the "
                                       "ratings outside the gap as much as the real projection are the control of "
                                       "its gap closed",
                                    metavar="K", minimum=0)
    held_out_identities: int = option(0, "with --project: also fit the direction without each of the first K "
                                         "identities' cells and project it out (all of them where there are fewer), "
                                         "the control that tells a shared in-group feature from per-identity ones",
                                      metavar="K", minimum=0)
    one_sided: bool = option(False, "also report one-sided steerings: a positive coefficient on the label's false "
                                    "cells only (intergroup: out-group), a negative one on its true cells only, "
                                    "assembled from the whole-grid reruns, and their dose-response (two or more "
                                    "coefficients per side)")
    check_events: int = option(1, "test events the coefficient-0 exactness check reruns (0: all of them)",
                               metavar="N", minimum=0)
    permutations: int = option(10_000, "permutations of the identity matching in δ's test", metavar="N", minimum=1)
    seed: int = option(0, "seed of the permutations and wrong matchings", name="--permutation-seed",
                       metavar="N", **SEED)
    batch_size: int = option(32, "prompts per forward of the reruns", metavar="N", minimum=1)

    def __post_init__(self):
        try:
            coefs = tuple(float(c) for c in self.coefs)
        except ValueError:
            raise ValueError(f"--coef {','.join(map(str, self.coefs))}: expected numbers, e.g. --coef=-4,4") from None
        object.__setattr__(self, "coefs", coefs)
        super().__post_init__()
        if (self.matchings or self.random_directions) and not self.project:
            raise ValueError("--matchings and --random-directions go with --project (they are its controls)")
        if not 0 < self.fit_fraction < 1:
            raise ValueError(f"--fit-fraction {self.fit_fraction}: expected a share between 0 and 1")
        if self.in_sample and self.test_events is not None:
            raise ValueError("--in-sample and --test-events exclude each other (which events are rerun?)")
        if self.one_sided and not any(self.coefs):
            raise ValueError("--one-sided needs a nonzero --coef")
        parse_where(self.where)


def steered_hooks(spec: str, hooks: Sequence[str]) -> list[int]:
    """The decoder layers of the captured `hooks` that --layers names (hook_embed left out); none is a ValueError."""
    layers = [hook_layer(h) for h in select_hooks(spec, hooks, "--layers") if h != EMBED_HOOK]
    if not layers:
        raise ValueError(f"--layers {spec}: names no decoder block (hook_embed is never steered)")
    return layers


@dataclass(frozen=True)
class Split:
    """The events the direction is fit on and those the steered reruns test it on (`limit_events` and `exclude`:
    how the reruns' configuration draws them), and how they were chosen."""

    fit: list[str]
    test: list[str] | None  # None: a new sample drawn by the reruns, known once they ran
    limit_events: int | None
    exclude: list[str]
    how: str

    @property
    def held_out(self) -> bool:
        """Whether no test event was fit on."""
        return bool(self.exclude)


def split_events(events: Sequence[str], options: Options) -> Split:
    """The fit and test events of the run's `events` under the options (see Options): a seeded split by default."""
    events = sorted(events)
    if options.in_sample:
        return Split(events, events, None, [], f"in-sample: fit on and rerun the same {len(events)} events")
    if options.test_events is not None:
        return Split(events, None, options.test_events, events,
                     f"fit on the run's {len(events)} events, tested on a new sample of {options.test_events} events "
                     "of the corpus less those")
    if len(events) < 2:
        raise ValueError(f"the run has {len(events)} event: a split needs 2 (use --test-events N or --in-sample)")
    n_fit = min(max(1, round(options.fit_fraction * len(events))), len(events) - 1)
    order = np.random.default_rng(options.split_seed).permutation(len(events))
    fit = sorted(events[i] for i in order[:n_fit])
    test = sorted(set(events) - set(fit))
    return Split(fit, test, None, fit, f"a seeded split (seed {options.split_seed}) of the run's {len(events)} "
                                      f"events: {len(fit)} fit, {len(test)} held out")


def check_fit_states(kept: int, split: Split) -> None:
    """Refuse, before any work, a fit on some of the run's events where the capture keeps fewer single-prompt
    final-token states per cell (`kept`: its --per-cell-samples, a seeded sample of the cell's one prompt per event)
    than the run has events, so that some fit event's states may be missing."""
    if not split.held_out or split.test is None:
        return  # fit on every event: the cell means, which every capture keeps
    n = len(split.fit) + len(split.test)
    if kept < n:
        fewer = f" (or --limit-events {kept} or fewer)" if kept >= 2 else ""  # a split needs 2 events
        raise ValueError(f"--per-cell-samples is {kept} in the capture; a direction fit on {len(split.fit)} of the "
                         f"run's {n} events needs it at least {n} (one final-token state per event of every cell): "
                         f"rerun the capture with --per-cell-samples {n}{fewer}, or fit on all its events "
                         "(--test-events N or --in-sample)")


@dataclass(frozen=True)
class Direction:
    """The direction of a selection: the raw difference and the one steered (unit rows where asked), [hooks, d]
    float32 in the store's hook order, and the fit cells' means and index it came from."""

    raw: np.ndarray
    used: np.ndarray
    means: np.ndarray
    cells: pd.DataFrame


def labelled_difference(means: np.ndarray, cells: pd.DataFrame, protocol: SteeringProtocol, selection: Mapping,
                        unit: bool, matching: np.ndarray | None = None, without: int | None = None) -> Direction:
    """The count-weighted mean of the cells (`means` [hooks, cells, d], `cells` their index with `count`) whose label
    (the protocol's LABEL under `matching`, None the real one) is true minus that of the cells where it is false
    (cells where it is NA, and with `without` that identity's cells, in neither)."""
    values = matched_cells(cells, protocol.SLOTS, protocol.identities(selection), matching, without)
    raw = mean_difference(means, cells["count"], values.eq(True).fillna(False), values.eq(False).fillna(False))
    return Direction(raw.astype(np.float32), (unit_rows(raw) if unit else raw).astype(np.float32), means, cells)


def direction(store: ActivationStore, protocol: SteeringProtocol, selection: Mapping, unit: bool,
              events: Sequence[str] | None = None, matching: np.ndarray | None = None) -> Direction:
    """The `labelled_difference` of the selected final-token cells, over `events` if given."""
    means, cells = protocol.final(store, selection, events)
    return labelled_difference(means, cells, protocol, selection, unit, matching)


def control_directions(hooks: Sequence[str], protocol: SteeringProtocol, selection: Mapping, options: Options,
                       found: Direction, layers: Sequence[int], matchings: np.ndarray) -> dict[Condition, np.ndarray]:
    """The vector of every control condition: each layer's random directions within the span of the fit cells'
    means (the real direction's norm, seeded by layer and index), each wrong matching's own direction and each
    direction fit without one identity's cells, from the same fit cells (read from the store once)."""
    out = {}
    for layer in layers:
        row = hook_row(hooks, layer)
        norm = float(np.linalg.norm(found.used[row]))
        for k in range(1, options.random_directions + 1):
            out[Condition(layer, None, True, random=k)] = span_direction(found.means[row], norm,
                                                                         seed=1000 * layer + k)
    for m, matching in enumerate(matchings):
        wrong = labelled_difference(found.means, found.cells, protocol, selection, options.unit, matching)
        for layer in layers:
            out[Condition(layer, None, True, matching=m)] = wrong.used[hook_row(hooks, layer)]
    for j in range(held_out_count(protocol, selection, options)):
        without = labelled_difference(found.means, found.cells, protocol, selection, options.unit, None, j)
        for layer in layers:
            out[Condition(layer, None, True, held_out=j)] = without.used[hook_row(hooks, layer)]
    return out


def held_out_count(protocol: SteeringProtocol, selection: Mapping, options: Options) -> int:
    """How many identities the held-out-identity control leaves out of a fit, one at a time (0 without --project)."""
    return min(options.held_out_identities, n_groups(protocol, selection)) if options.project else 0


def n_groups(protocol: SteeringProtocol, selection: Mapping) -> int:
    """How many groups the selection's identities fall into (what a matching permutes)."""
    return len(set(protocol.identities(selection).values()))


DIRECTION_TEXT = (
    "Per captured layer, the direction is the count-weighted mean final-token state of the selected cells the suite "
    "labels `{label}` minus that of the cells it labels otherwise (cells without the label, e.g. intergroup's "
    "\"a person\", in neither), over the fit events only. The table gives its norm beside the norm of the mean state "
    "(`relative_norm`: how far coefficient 1 moves the state) and its cosine with the previous layer's direction; "
    "direction_vectors.csv holds the vectors steered.")
SWEEP_TEXT = (
    "Each steering reruns the slice on the test events with the model's output at one decoder layer moved by "
    "coefficient × the direction at every position of every forward (projection: its component along the direction "
    "removed; `random k`: a random direction within the span of the fit cells' states, of the same norm; `matching "
    "m`: the direction fit the same way for the m-th wrong matching of the identities). Read `gap_points` (in-group "
    "minus out-group cells of M⁰, in rating points) and its change from the unsteered rerun, with 95% t-intervals over "
    "the test events (the change paired by event). δ is z-scored per condition, so it moves with `sigma_M0` "
    "alone; read it beside that column. steering_rows.csv holds every prompt's result.")
ONE_SIDED_TEXT = (
    " One-sided rows (`... {outside} only`, `... {inside} only`) take the steered rerun's results on one side's "
    "prompts and the unsteered rerun's elsewhere: adding one vector to every prompt moves a between-cell difference "
    "only through non-linearity, steering one side moves it directly.")
MATCHING_TEXT = (
    "Projecting out a mean-difference direction makes the two sides' means equal at that layer for any labelling of "
    "the cells, so removing a gap there is partly true by construction. The control does the same for wrong "
    "matchings of the identities: each matching's own direction (fit on the same events) is projected out and the "
    "gap of the cells that matching calls in-group is measured before and after on the test events. `closed_points` "
    "is how far it moved toward 0 in rating points (past 0 counting; for the real matching with the t-interval of "
    "the per-event values, paired by event), `closed_share` = 1 − |after| / |before|, how close to 0 it came; "
    "`p_real` is the share of wrong matchings "
    "closing at least as large a share of their gap as the real one does of its gap (floor `p_floor`, exact where "
    "every wrong matching ran). Ranked by points the real matching would win by construction (a wrong matching's "
    "own gap is a fraction of the real one).")
HELD_OUT_TEXT = (
    "The wrong-matching control cannot tell a feature every in-group cell shares from one feature per identity: "
    "where a shared feature exists, a wrong matching's direction is the real one scaled by (fixed points − 1) / "
    "(n − 1). This control can. For each identity (its group) in turn, the direction is fit again without that "
    "identity's cells and projected out. Each identity is scored on its in-group interaction (`interaction_*`, "
    "rating points): its in-group cell less what its perceiver and experiencer main effects predict, both fit on the "
    "out-group cells (a projection that merely shifts an identity's row or column does not move it), and less what a "
    "term in the identities' token lengths predicts, fit on the same cells: β × the perceiver's persona tokens × the "
    "experiencer's experiencer tokens, as the run's tokenizer reads them (`length_control`: fit, or not needed where "
    "that product is additive over these identities, e.g. all of one length, so the main effects remove it). Without "
    "that term a rating that reads persona length × experiencer length and no in-group feature passed this control "
    "in every synthetic world; with it, in 0.017-0.033 of them (docs/BENCHMARKS.md). "
    "`closed_held_out` is how far the direction fit without the identity lowered its interaction, `closed_real` how "
    "far the real direction, fit with its cells, did. The `pooled` row averages the identities, with t-intervals "
    "over the test events of both, and `transfer` = pooled closed_held_out / pooled closed_real with Fieller's "
    "interval over events: near 1 where one shared feature carries the gap, near 0 where each identity has its own. "
    "Where the real closing's interval includes 0 the ratio is unbounded and is not printed, nor where it lies "
    "below 0 (the real direction raised the interactions: nothing to transfer; `transfer_note`). It "
    "supports \"the direction carries a feature the in-group cells share across identities that the identities' "
    "token lengths (persona × experiencer tokens) do not explain\" where it is printed and near 1. It cannot say "
    "that the feature is group membership rather than something else every in-group cell has and no out-group cell "
    "has (the same identity read twice in one prompt; a length effect of another form, e.g. one on equal lengths). "
    "On synthetic worlds it passed in all with a shared feature alone but in 0.61 where one identity's own feature "
    "dominates beside a shared one (the real direction removes that own feature too, the one fit without the "
    "identity does not), so a failure is not evidence against a shared feature. The wrong-matching control "
    "supports only \"the projection closes more than a labelling of the cells does by construction\".")
RANDOM_TEXT = (
    "Projecting out any direction the states vary along disturbs the ratings; a gap can shrink as a side effect. "
    "Each random direction (within the span of the fit cells' states, of the real direction's norm) is projected out "
    "the same way. `disturbance` is the mean |change| of the ratings of the prompts outside the gap (\"a person\" on "
    "either side) from the unsteered rerun; `matched` marks the random directions that disturbed them at least as "
    "much as the real projection did; `closed_points` is how far each moved the real in-group gap toward 0 (rating "
    "points, paired by event). `p_matched` = (1 + matched directions closing at least as much) / (1 + matched "
    "directions), floor `p_floor`; without a matched direction the real projection disturbed the ratings more than "
    "any random one and this control cannot speak. On synthetic worlds (docs/BENCHMARKS.md) it never passed where "
    "the gap shrinks with any disturbance, and rarely passed with a real shared feature at 39 directions (few match "
    "a direction the rating reads): a pass is evidence, a failure with few matched directions is not.")
DOSE_TEXT = (
    "One-sided steerings per side (a positive coefficient on the out-group prompts only, a negative one on the "
    "in-group prompts only), their coefficients by size and the mean change of the gap in rating points at each; "
    "`slope`: the change per unit of coefficient, least squares through 0 fit per event, with the 95% t-interval of "
    "the per-event slopes; `monotone`: with two or more coefficients, whether the change grows with |coefficient| "
    "and keeps its sign. A gap that moves with the dose on one side is moved by the direction, not by any edit.")
CLAIMS_TEXT = (
    "Each sentence a steering result might support, the control that licenses it, and what that control gave in "
    "this run (`not run`: the sentence is not supported here, whatever the steered numbers say).")


def claims(options: Options, split: Split, n_matchings: int, control: pd.DataFrame, held: pd.DataFrame,
           random: pd.DataFrame, dose: pd.DataFrame) -> pd.DataFrame:
    """Per sentence a steering result might support: the control it needs and that control's result in this run."""
    def values(frame: pd.DataFrame, column: str, where: pd.Series | None = None) -> str:
        """`column`'s values per measure (and layer, side where the frame has them), or why there are none."""
        if not len(frame) or column not in frame:
            return "not run"
        chosen = frame if where is None else frame[where]
        labels = [c for c in ("measure", "layer", "side") if c in chosen]
        shown = [f"{' '.join(str(row[c]) for c in labels)}: {row[column]:.3g}"
                 for _, row in chosen.iterrows() if pd.notna(row[column])]
        return f"{column} " + ("; ".join(shown) if shown else "undefined")

    rows = [
        ("the effect holds on events the direction was not fit on", "a held-out split of events",
         split.how if split.held_out else "not run (in-sample)"),
        ("the projection closes the gap more than projecting out any labelling's direction does by construction",
         f"wrong matchings (--matchings; {n_matchings} here)",
         values(control, "p_real", control["matching"].eq("real") if len(control) else None)),
        ("the direction carries an in-group feature shared across identities that their token lengths do not "
         "explain, not one feature per identity",
         "identities held out of the fit (--held-out-identities)", transfer_text(held)),
        ("the gap closes more than a disturbance of the ratings of the same size closes it",
         "random directions that disturb the ratings as much (--random-directions)",
         values(random, "p_matched", random["random"].eq(0) if len(random) else None)),
        ("the gap moves with the dose when one side alone is steered", "one-sided steering at two or more "
         "coefficients per side (--one-sided)", values(dose, "slope")),
    ]
    return pd.DataFrame(rows, columns=["sentence", "control", "here"])


def transfer_text(held: pd.DataFrame) -> str:
    """The held-out-identity control's transfer per measure and layer with its interval, or why it is not printed."""
    if not len(held):
        return "not run"
    shown = [f"{row.measure} {row.layer}: " + (f"{row.transfer:.3g} [{row.transfer_low:.3g}, {row.transfer_high:.3g}]"
                                              if pd.notna(row.transfer) else f"not printed ({row.transfer_note})")
             for row in held[held["identity"] == "pooled"].itertuples()]
    return "transfer " + "; ".join(shown) + f"; token lengths: {held['length_control'].iloc[0]}"


CHECK_TEXT = (
    "Coefficient 0 runs the steering hook without moving anything, on {checked} of the test events (the hook is the "
    "same code for every prompt) beside an unsteered rerun of the same events (so the batches hold the same "
    "prompts): its rows must equal that rerun's exactly (every result column, NaN equal to NaN). A difference means "
    "the steered path itself changes results. It is not a steering and is left out of the measures above.")


def scope_lines(split: Split, test: Sequence[str], options: Options, n_matchings: int,
                control: pd.DataFrame, held: pd.DataFrame) -> tuple[list[str], list[str]]:
    """What this steering can and cannot show, from its own split, events and controls."""
    can, cannot = [], []
    n = len(test)
    where = (f"on {n} events the direction was not fit on ({split.how})" if split.held_out
             else f"in-sample, on the {n} events the direction was fit on")
    can.append(f"Whether moving the states along the direction changes the measure {where}, with t-intervals over "
               "those events of the gap and of its change from the unsteered rerun (paired by event).")
    if not split.held_out:
        cannot.append("Whether the effect holds beyond the events the direction was fit on (in-sample).")
    if options.project and n_matchings:
        p = control["p_real"].dropna() if "p_real" in control else pd.Series(dtype=float)
        can.append(f"Whether projecting out the real direction closes a larger share of its gap than {n_matchings} "
                   f"wrong matchings' directions close of theirs (p floor {1 / (n_matchings + 1):.3g}"
                   + (f"; p here {', '.join(f'{v:.3g}' for v in p.unique())})." if len(p) else ")."))
    elif options.project:
        cannot.append("Whether the projection's effect exceeds what it does by construction: no wrong-matching "
                      "control ran (--matchings K).")
    if len(held):
        pooled = held[held["identity"] == "pooled"]
        printed = pooled[pooled["transfer"].notna()]
        can.append("Whether the direction carries a feature shared across identities that a persona tokens × "
                   f"experiencer tokens term does not explain (here: {held['length_control'].iloc[0]}): the "
                   "direction fit without an identity's cells lowers that identity's in-group interaction"
                   + (" " + ", ".join(f"{r.transfer:.2f} [{r.transfer_low:.2f}, {r.transfer_high:.2f}]"
                                      for r in printed.itertuples()) + " times as much as the real direction does."
                      if len(printed) else f" (not printed here: {pooled['transfer_note'].iloc[0]})."))
        cannot.append("That the feature the held-out control finds is group membership rather than anything else "
                      "every in-group cell has and no out-group cell has: the same identity read twice in one "
                      "prompt, or a token-length effect of another form than persona tokens × experiencer tokens.")
    elif options.project:
        cannot.append("Whether the direction carries an in-group feature shared across identities rather than one "
                      "per identity: no held-out-identity control ran (--held-out-identities K).")
    if options.project and not options.random_directions:
        cannot.append("Whether the gap closes more than a disturbance of the ratings of the same size closes it: no "
                      "random-direction control ran (--random-directions K).")
    if any(options.coefs) and not options.one_sided:
        cannot.append("Whether the gap moves when one side alone is steered (--one-sided); adding one vector to "
                      "every prompt changes a between-cell difference only through non-linearity.")
    cannot.append("That the model computes its ratings from this direction: moving it is sufficient to change "
                  "them, not necessary; large coefficients push states off their distribution (read the refusal "
                  "and numeric rates).")
    return can, cannot


class SteerStudy(Study):
    """Steering along the direction a suite's cell label gives, fit and tested on different events, with the
    suite's steered reruns and measures and the controls of wrong matchings and random directions."""

    name = "steer"
    keep = (RUNS_DIR,)
    description = ("steering: fit the final-token direction of the suite's label (intergroup: in-group minus "
                   "out-group) on some events, rerun the slice on others with it added or projected out at chosen "
                   "layers; gaps in points with intervals over events, the zero-coefficient check, wrong-matching "
                   "and random-direction controls, one-sided steering")
    Options = Options
    reruns_model = True

    def _setup(self, runs: Sequence[Run], options: Options):
        """The run, its protocol, selection, split of events, wrong matchings, store and steered layers, every
        check that needs no model done (plan calls it first, so bad input stops before any work)."""
        run = one_run(runs, self.name)
        protocol: SteeringProtocol = protocol_of(run, "steer")
        selection = protocol.block(run.config, parse_where(options.where))
        events = field_values(run.rows, protocol.KEY[-1], selection, "the run's rows")
        if not events:
            raise ValueError(f"{run.run_dir}: no result rows of {where_text(selection)}; expected a selection the "
                             "run ran")
        split = split_events(events, options)
        matchings = (wrong_matchings(n_groups(protocol, selection), options.matchings, options.seed)
                     if options.matchings else np.zeros((0, 0), dtype=np.int64))
        store = load(run.run_dir)
        layers = steered_hooks(options.layers, store.hooks)
        check_fit_states(store.meta.get("per_cell_samples", 0), split)
        return run, protocol, selection, split, matchings, store, layers

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        run, protocol, selection, split, matchings, _, layers = self._setup(runs, options)
        n_held = held_out_count(protocol, selection, options)
        steerings = sweep_conditions(layers, sorted(set(options.coefs) | {0.0}), options.project,
                                     options.random_directions, len(matchings), n_held)
        stored = RunConfig.from_run_dir(run.run_dir, trust_remote_code=options.trust_remote_code)
        _, drawn = protocol.rerun(stored, selection, split.limit_events, split.exclude)
        return (f"{run.name}: the direction of {where_text(selection)} from its final-token cells ({protocol.LABEL} "
                f"true minus false{', unit norm' if options.unit else ''}); {split.how}; {len(steerings)} reruns "
                f"on {len(drawn)} test event{'s' if len(drawn) != 1 else ''} (the coefficient-0 check on "
                f"{min(options.check_events or len(drawn), len(drawn))}) "
                f"at layers {layers} into the output folder's {RUNS_DIR}/ (resumed on a rerun with the same options): "
                f"{', '.join(c.label for c in steerings)}; the model {run.config['model']} is loaded as the run "
                "recorded it and one batch is timed first.")

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True,
                model: tuple | None = None) -> Analysis:
        run, protocol, selection, split, matchings, store, layers = self._setup(runs, options)
        fit = split.fit if split.held_out and split.test is not None else None  # else every event: the cell means
        found = direction(store, protocol, selection, options.unit, fit)
        n_held = held_out_count(protocol, selection, options)
        steerings = sweep_conditions(layers, sorted(set(options.coefs) | {0.0}), options.project,
                                     options.random_directions, len(matchings), n_held)
        controls = control_directions(store.hooks, protocol, selection, options, found, layers, matchings)
        loaded = load_model(run, options.device, options.dtype, options.trust_remote_code, model)
        stored = RunConfig.from_run_dir(run.run_dir, trust_remote_code=options.trust_remote_code)

        def rerun(exclude: Sequence[str]) -> tuple[RunConfig, list[str]]:
            config, drawn = protocol.rerun(stored, selection, split.limit_events, exclude)
            return dataclasses.replace(config, device=options.device, batch_size=options.batch_size, capture=(),
                                       per_cell_samples=0, dtype=options.dtype or stored.dtype), drawn

        config, drawn = rerun(split.exclude)
        checked = drawn[:options.check_events] if options.check_events else drawn
        directions = layer_directions(found.used, store.hooks, layers)
        zero = [c for c in steerings if c.coef == 0 and not c.project]
        whole = len(checked) == len(drawn)  # the check reruns every test event: it joins the sweep
        rows = run_conditions(config, out / RUNS_DIR, loaded, directions,
                              steerings if whole else [c for c in steerings if c not in zero], protocol.read_rows,
                              suite_of(run).caches, run.run_dir, progress, controls)
        check_rows = rows if whole else run_conditions(
            rerun(sorted(set(split.exclude) | set(drawn[len(checked):])))[0], out / RUNS_DIR / CHECK_DIR, loaded,
            directions, [Condition(None), *zero], protocol.read_rows, suite_of(run).caches, run.run_dir, progress)
        check = zero_coefficient_check(check_rows, protocol.KEY, protocol.RESULT_COLUMNS)
        rows = rows[~rows["condition"].isin(check["condition"])].assign(one_sided=False)
        if options.one_sided:
            inside = matched_cells(rows, protocol.SLOTS, protocol.identities(selection))
            rows = pd.concat([rows, one_sided(rows, inside, protocol.KEY, protocol.SIDES)], ignore_index=True)
        test = sorted(rows["event_id"].unique())
        blocks = list(protocol.measured(rows))
        summary = summarize(blocks, protocol, options.permutations, options.seed)
        control = matching_control(blocks, matchings) if len(matchings) else pd.DataFrame()
        held = (held_out_control(blocks, protocol.identity_tokens(run, selection, options.trust_remote_code))
                if n_held else pd.DataFrame())
        random = random_control(blocks) if options.random_directions else pd.DataFrame()
        dose = dose_response(blocks, protocol.SIDES) if options.one_sided else pd.DataFrame()
        reproduces = bool(check["identical"].all()) and len(check) == 1
        vectors = pd.DataFrame(found.used, columns=[f"d{i}" for i in range(found.used.shape[1])])
        vectors.insert(0, "hook", store.hooks)
        events = pd.DataFrame({"event_id": split.fit + test,
                               "role": ["fit"] * len(split.fit) + ["test"] * len(test)})
        figures = tuple(Figure(f"figures/{name}", title, fig) for name, title, fig
                        in sweep_figures(summary, tuple(selection), protocol.PANELS, protocol.SIDES[0]))
        sweep_text = SWEEP_TEXT + (ONE_SIDED_TEXT.format(inside=protocol.SIDES[0], outside=protocol.SIDES[1])
                                   if options.one_sided else "")
        sections = [
            Section("Fit and test events", split.how + ".",
                    (Table("events", "Events the direction was fit on and tested on", events),)),
            Section("The direction", DIRECTION_TEXT.format(label=protocol.LABEL),
                    (Table("directions", f"Direction per layer, {literal(where_text(selection))}",
                           direction_table(found.raw, found.means, store.hooks)),)),
            Section("The suite's measures under steering", sweep_text,
                    (Table("steering", "Measures per steering", summary,
                           {"n_prompts": "count", "n_events": "count"}),), figures)]
        optional = [
            (control, "Control: wrong matchings of the identities", MATCHING_TEXT, "matching_control",
             "Gap removed by each matching's own projection", {"p_real": "p", "p_floor": "p"}),
            (held, "Control: each identity held out of the fit", HELD_OUT_TEXT, "held_out_control",
             "Each held-out identity's in-group interaction lowered", {"n_events": "count"}),
            (random, "Control: random directions that disturb the ratings as much", RANDOM_TEXT, "random_control",
             "The real gap closed by matched random directions", {"p_matched": "p", "p_floor": "p"}),
            (dose, "Dose-response of one-sided steering", DOSE_TEXT, "dose_response",
             "The gap's change per unit of coefficient", {})]
        sections += [Section(title, text, (Table(name, caption, frame, formats),))
                     for frame, title, text, name, caption, formats in optional if len(frame)]
        sections.append(Section("Which control supports which sentence", CLAIMS_TEXT,
                                (Table("claims", "Each sentence, the control it needs and what it gave here",
                                       claims(options, split, len(matchings), control, held, random, dose),
                                       dict.fromkeys(("sentence", "control", "here"), "text")),)))
        sections += [
            Section("Coefficient 0 reproduces the unsteered rerun", CHECK_TEXT.format(checked=len(checked)),
                    (Table("zero_coefficient_check", "Coefficient 0 against the unsteered rerun", check,
                           {"n_rows": "count", "differing_rows": "count"}),)),
            scope(*scope_lines(split, test, options, len(matchings), control, held))]
        notes = [] if reproduces else ["Coefficient 0 did NOT reproduce the unsteered rerun exactly (see "
                                       "zero_coefficient_check.csv): the steered numbers are suspect."]
        record = {"selection": selection, "layers": layers, "coefficients": sorted(set(options.coefs) | {0.0}),
                  "fit_events": split.fit, "test_events": test, "held_out": split.held_out,
                  "wrong_matchings": matchings.tolist(), "runs_dir": RUNS_DIR,
                  "steer_config": dataclasses.asdict(config), "model": loaded[2],
                  "zero_coefficient_reproduces_unsteered": reproduces}
        return Analysis("Steering along the suite's direction", "empathy-gap interp steer (interp.steering)",
                        sections, notes,
                        [Table("direction_vectors", "The directions steered, per hook", vectors),
                         Table("steering_rows", "Every prompt's result per steering", rows)], record=record)


STUDY = SteerStudy()
