"""The patching study (`empathy-gap interp patch RUN_DIR`): which layers carry the suite's measure? The run's model
scores the suite's prompts while one slot's residual-stream states at one layer come from another prompt; the
prompts, the slot and the measure are the suite's patching protocol's (only intergroup has one: its persona, δ)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from activations.capture import LAYER_GRAMMAR
from behavioral.report.formats import literal
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Analysis, Section, Table
from behavioral.inference.engine import Engine
from behavioral.core.options import option
from behavioral.suite.protocol import Suite
from interp.identities import parse_where, suite_of
from behavioral.analysis.rerun import ModelOptions, load_model, one_run, protocol_of
from behavioral.analysis.study import Study
from interp.patching.claims import EQUIVALENCE_MARGIN
from interp.patching.spec import SYSTEM_GROUP, PatchSpec
from interp.patching.sweep import SWEEP_POSITION_GROUPS

class PatchingProtocol(Protocol):
    """What a suite declares as its patching protocol (Suite.protocols["patch"]): interp.patching.slot.SlotPatching
    names the slot, or a suite's own (intergroup's PersonaPatching)."""

    def plan(self, run: Run, suite: Suite, where: Mapping, options: "Options") -> str:
        """What the study will compute on the run, without the model; bad options are a ValueError here."""

    def analyze(self, run: Run, suite: Suite, engine: Engine, where: Mapping, options: "Options",
                progress: bool) -> tuple[list[Section], list[Table], dict]:
        """The report sections, the tables written but not printed, and what the manifest records."""


@dataclass(frozen=True)
class Options(ModelOptions):
    """What is patched (the slice, events, layers, position group, modes), the sweep, and how the run's model is
    loaded."""

    where: tuple[str, ...] = option((), "the slice patched, FIELD=VALUE (intergroup: one category and one setting, "
                                        "any of the suite's; default the run's first)", metavar="FIELD=VALUE")
    limit_events: int = option(4, "events patched: a seeded sample of the run's corpus (the run's seed), stratified "
                                  "by emotion; an interval over events needs 2 or more (its coverage was checked at "
                                  "4 to 12)", metavar="N", minimum=1)
    layers: str = option("all", f"decoder layers patched, one at a time: {LAYER_GRAMMAR}", metavar="LAYERS")
    layer_step: int = option(5, "keep every K-th of --layers", metavar="K", minimum=1)
    positions: str = option(SYSTEM_GROUP, "position group of the headline: persona_end[:N], persona_mean, system or "
                                          "all", metavar="GROUP")
    modes: tuple[str, ...] = option(("person", "swap"), "what the slot is patched with (intergroup: person, the "
                                                        "persona \"a person\"; swap, in-group <-> out-group)",
                                    name="--mode", metavar="MODE")
    equivalence_margin: float = option(EQUIVALENCE_MARGIN, "the gap closed within ±MARGIN (a share of the unpatched "
                                       "gap) counts as none: a layer stops mattering only where its 95% interval "
                                       "lies inside it", metavar="MARGIN", minimum=0)
    sweep_groups: tuple[str, ...] = option(SWEEP_POSITION_GROUPS, "position groups of the layer × group sweep",
                                           name="--sweep-group", metavar="GROUP")
    sweep_events: int = option(1, "events of the sweep (the first N patched; 0: no sweep)", metavar="N", minimum=0)
    batch_size: int = option(32, "prompts per forward", metavar="N", minimum=1)

    def __post_init__(self):
        super().__post_init__()
        for flag, group in (("--positions", self.positions), *(("--sweep-group", g) for g in self.sweep_groups)):
            try:
                PatchSpec.parse(group)
            except ValueError as err:
                raise ValueError(f"{flag}: {err}") from None
        if not self.modes:
            raise ValueError("--mode: none given; expected person, swap or both")
        parse_where(self.where)


class PatchStudy(Study):
    """Patching one slot at one layer at a time, with the suite's prompts and measure."""

    name = "patch"
    description = ("activation patching: at each layer alone, the suite's slot (intergroup: the persona) takes "
                   "another prompt's states; the suite's measure after patching (intergroup: δ by layer) and a "
                   "layer × position-group sweep")
    Options = Options
    reruns_model = True

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        run = one_run(runs, self.name)
        suite = suite_of(run)
        protocol: PatchingProtocol = protocol_of(run, "patch")
        return protocol.plan(run, suite, parse_where(options.where), options)

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True,
                model: tuple | None = None) -> Analysis:
        run = one_run(runs, self.name)
        suite = suite_of(run)
        protocol: PatchingProtocol = protocol_of(run, "patch")
        model, tokenizer, info = load_model(run, options.device, options.dtype, options.trust_remote_code, model)
        engine = Engine(model, tokenizer, options.batch_size)
        sections, files, record = protocol.analyze(run, suite, engine, parse_where(options.where), options, progress)
        method = [f"Patched forwards through interp.patching on {literal(info['model'])} ({literal(info['dtype'])}, "
                  f"{literal(info['device'])}), {options.batch_size} prompts a forward; source states from one forward "
                  "per distinct prefix."]
        return Analysis("Patching: which layers carry the measure", "empathy-gap interp patch (interp.patching)",
                        sections, method, files, record=record | {"model": info})


STUDY = PatchStudy()
