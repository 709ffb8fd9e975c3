"""Patching that a suite declares by naming its identity slot (``Suite.protocols["patch"] = SlotPatching(...)``):
each item of the run's slice whose slot holds an identity is scored while the slot's residual-stream states at one
layer come from the same item with another value in the slot — mode ``person``: the suite's baseline (no identity,
e.g. "a person"); mode ``swap``: an identity on the other side of the compared one (the compared identity itself for
an out-group item; for an in-group item the next identity, in the run's order, that is out-group with it). The measure
is the gap: per unit (an event), the mean expected answer of the in-group items minus that of the out-group items
(the suite's ``cell_labels``), averaged over the units, before and after patching, with t-intervals over the units
and the gap closed paired by unit (behavioral.analysis.paired)."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from activations.capture import n_layers_of, parse_layers
from behavioral.inference import chat
from behavioral.analysis.paired import CLOSED_COVERAGE, closed, t_interval
from behavioral.analysis.runs import Run, prepared_data
from behavioral.report.blocks import Section, Table
from behavioral.inference.answer_space import AnswerTrie
from behavioral.runner.run import RunConfig
from behavioral.suite.protocol import Item, Suite
from interp.patching.claims import stops_mattering
from interp.patching.spec import PatchError, PatchSpec, encode
from interp.patching.sweep import evaluate

MODES = ("person", "swap")
COLUMNS = ("mode", "layer", "positions", "n_events", "gap_unpatched", "gap_unpatched_low", "gap_unpatched_high",
           "gap_patched", "gap_patched_low", "gap_patched_high", "gap_closed_points", "gap_closed_points_low",
           "gap_closed_points_high", "gap_closed", "gap_closed_low", "gap_closed_high", "interval_note", "n_prompts")


@dataclass(frozen=True)
class SlotPatching:
    """A suite's patching protocol, declared by values: `slot` the prompt slot (and item field) patched, `baseline`
    the value that stands for no identity, `compared` the item field of the identity the slot is compared with,
    `unit` the item field of the sampled unit the intervals are over, `label` the column of ``Suite.cell_labels``
    that is true for an in-group item."""

    slot: str
    baseline: str
    compared: str
    unit: str
    label: str = "ingroup"

    def plan(self, run: Run, suite: Suite, where: Mapping, options) -> str:
        """What the study will patch on `run`, read without the model; bad options are a ValueError here."""
        items, labels = self.items(run, suite, where, options.limit_events)
        units = len({i.fields[self.unit] for i in items})
        return (f"{run.name}: {len(items)} items ({int(labels.sum())} in-group) of {units} {self.unit} values, "
                f"slot {self.slot!r}; {len(options.modes)} modes × those items × the layers of --layers "
                f"{options.layers} (every {options.layer_step}) at {options.positions}.")

    def items(self, run: Run, suite: Suite, where: Mapping, limit_units: int, model=None,
              tokenizer=None) -> tuple[list[Item], np.ndarray]:
        """The patched items (the slice `where`, the slot and the compared field holding identities, a seeded sample
        of `limit_units` units) and whether each is in-group; none left is a ValueError saying why."""
        config = RunConfig.from_run_dir(run.run_dir)
        data = prepared_data(run, config, suite, model, tokenizer)
        items = [item for _, group in suite.groups(data) for item in group]
        fields = set(items[0].fields) if items else set()
        for name in (*where, self.slot, self.compared, self.unit):
            if name not in fields:
                raise ValueError(f"suite {suite.name!r} has no item field {name!r}; its fields: "
                                 f"{', '.join(sorted(fields))}")
        items = [i for i in items if all(str(i.fields[k]) in _values(v) for k, v in where.items())
                 and self.baseline not in (i.fields[self.slot], i.fields[self.compared])]
        units = list(dict.fromkeys(i.fields[self.unit] for i in items))
        if len(units) > limit_units:
            kept = set(random.Random(config.seed).sample(units, limit_units))
            items = [i for i in items if i.fields[self.unit] in kept]
        labels = _labels(suite, [i.fields for i in items], self.label)
        items = [i for i, known in zip(items, ~np.isnan(labels)) if known]
        if not items:
            raise ValueError(f"{run.run_dir}: no item of {where or 'the run'} has identities in both {self.slot!r} "
                             f"and {self.compared!r} with an in-group label; nothing to patch")
        return items, labels[~np.isnan(labels)].astype(bool)

    def source_value(self, suite: Suite, item: Item, ingroup: bool, identities: Sequence[str], mode: str) -> str:
        """The value the slot takes in the source prompt of `item` (see the module docstring)."""
        if mode == "person":
            return self.baseline
        if not ingroup:
            return item.fields[self.compared]
        start = identities.index(item.fields[self.slot])
        for k in range(1, len(identities) + 1):
            other = identities[(start + k) % len(identities)]
            if _labels(suite, [dict(item.fields) | {self.slot: other}], self.label)[0] == 0:
                return other
        raise PatchError(f"no identity of slot {self.slot!r} is out-group with {item.fields[self.compared]!r}: "
                         "nothing to swap in")

    def analyze(self, run: Run, suite: Suite, engine, where: Mapping, options,
                progress: bool) -> tuple[list[Section], list[Table], dict]:
        """The gap by patched layer on `run`'s model (the `engine`): report sections, the per-prompt table, and what
        the manifest records."""
        for mode in options.modes:
            if mode not in MODES:
                raise PatchError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        tokenizer = engine.tokenizer
        items, labels = self.items(run, suite, where, options.limit_events, engine.model, tokenizer)
        specs = {item.answers for item in items}
        if len(specs) != 1 or next(iter(specs)).values is None:
            raise ValueError(f"suite {suite.name!r}: patching reads the expected answer, so the patched items need "
                             "one answer set with numeric values")
        chat_format = run.config.get("chat_format") or chat.detect_format(tokenizer)
        layers = parse_layers(options.layers, n_layers_of(engine.model))[::options.layer_step]
        identities = list(dict.fromkeys(i.fields[self.slot] for i in items))
        targets, sources, meta = [], [], []
        for mode in options.modes:
            for item, ingroup in zip(items, labels):
                value = self.source_value(suite, item, bool(ingroup), identities, mode)
                targets.append(encode(tokenizer, item.prompt(), self.slot, chat_format))
                sources.append(encode(tokenizer, suite.with_identity(item, self.slot, value).prompt(), self.slot,
                                      chat_format))
                meta.append({"mode": mode, self.slot: item.fields[self.slot],
                             self.compared: item.fields[self.compared], "unit": item.fields[self.unit],
                             "ingroup": bool(ingroup), "source_value": value})
        start = time.perf_counter()
        trie = AnswerTrie.build(tokenizer, next(iter(specs)))
        each = [PatchSpec.parse(options.positions, (layer,)) for layer in layers]
        frame = evaluate(engine, targets, sources, [each] * len(targets), trie, meta,
                         "headline" if progress else None)
        table = unit_gap_table(frame)
        text = (f"Each of the {len(items)} items whose `{self.slot}` holds an identity is scored while that slot's "
                f"states at one layer (position group `{options.positions}`) come from the same item with another "
                f"value in the slot (mode `person`: {self.baseline!r}; mode `swap`: an identity of the other side). "
                f"The gap is, per `{self.unit}`, the mean expected answer of the in-group items minus that of the "
                "out-group items, averaged over the units; each interval is a 95% t-interval over the units (the gap "
                f"closed is paired by unit; as a share, Fieller's interval; {CLOSED_COVERAGE}). "
                + _claims(table, options.equivalence_margin))
        sections = [Section("The gap by patched layer", text, (Table("gap_by_layer", "The gap after patching the "
                                                                   f"slot {self.slot!r} at one layer", table,
                                                                   {"n_prompts": "count", "n_events": "count"}),))]
        record = {"protocol": "slot", "slot": self.slot, "baseline": self.baseline, "layers": layers,
                  "modes": list(options.modes), "positions": options.positions, "chat_format": chat_format,
                  "units": sorted({str(i.fields[self.unit]) for i in items}),
                  "seconds": {"headline": round(time.perf_counter() - start, 1)}}
        return sections, [Table("gap_prompts", "Every patched prompt", frame)], record


def unit_gap_table(frame: pd.DataFrame) -> pd.DataFrame:
    """COLUMNS per (mode, layer, position group) from `evaluate`'s rows with meta columns `unit` and `ingroup`: the
    gap before and after patching with t-intervals over the units that have both in-group and out-group items, and
    the gap closed paired by unit."""
    rows = []
    for (mode, layer, positions), part in frame.groupby(["mode", "layer", "positions"], sort=False):
        before, after = (_unit_gaps(part, column) for column in ("expected_clean", "expected"))
        change = closed(before, after)
        rows.append({"mode": mode, "layer": layer, "positions": positions, "n_events": change.n_events,
                     "gap_unpatched": before.mean(), "gap_patched": after.mean(),
                     **dict(zip(("gap_unpatched_low", "gap_unpatched_high"), t_interval(before, 0.95))),
                     **dict(zip(("gap_patched_low", "gap_patched_high"), t_interval(after, 0.95))),
                     "gap_closed_points": change.points, "gap_closed_points_low": change.points_low,
                     "gap_closed_points_high": change.points_high, "gap_closed": change.share,
                     "gap_closed_low": change.share_low, "gap_closed_high": change.share_high,
                     "interval_note": change.note, "n_prompts": len(part)})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _unit_gaps(part: pd.DataFrame, column: str) -> np.ndarray:
    """Per unit with in-group and out-group items: mean `column` of the in-group items minus that of the others."""
    means = part.groupby(["unit", "ingroup"], sort=False)[column].mean().unstack("ingroup")
    if True not in means or False not in means:
        return np.zeros(0)
    return (means[True] - means[False]).dropna().to_numpy(dtype=float)


def _claims(table: pd.DataFrame, margin: float) -> str:
    """Per mode, the first layer from which the gap closed is shown to be within ±margin of none (equivalence)."""
    out = []
    for mode, part in table.groupby("mode", sort=False):
        part = part.sort_values("layer")
        layer = stops_mattering(part["layer"].tolist(), part["gap_closed_low"].tolist(),
                                part["gap_closed_high"].tolist(), margin)
        out.append(f"Mode `{mode}`: " + (f"from layer {layer} on, every patched layer's effect is within "
                                          f"±{margin:g} of none (equivalence test at 0.025 over events)." if layer is not None
                                          else "no layer is shown to stop mattering (an interval that includes 0 "
                                               "is not evidence of no effect)."))
    return " ".join(out)


def _labels(suite: Suite, fields: Sequence[Mapping], column: str) -> np.ndarray:
    """The suite's in-group label of each item's fields as 1.0 / 0.0, NaN where undefined."""
    if not fields:
        return np.zeros(0)
    labels = suite.cell_labels(pd.DataFrame(list(fields)))
    if column not in labels:
        raise ValueError(f"suite {suite.name!r}: its cell_labels give no {column!r} column; patching needs one "
                         "that says which items are in-group")
    return labels[column].astype("float").to_numpy()


def _values(value) -> list[str]:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
