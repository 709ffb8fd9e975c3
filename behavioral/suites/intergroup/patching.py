"""Seed 000's patching protocol (`empathy-gap interp patch` on an intergroup run): which layers carry the empathy
gap? For each layer, every perceiver's persona is patched (one layer at a time) with "a person" (mode ``person``) or
with an in-group <-> out-group swap (mode ``swap``), the matrix of expected intensities is rebuilt and the gap and δ
recomputed (the method's `interp.patching.gap_by_layer`: intervals over events, exact and family-wise p;
`interp.patching.gap_report`: the headline, the figure and the report's scope); a layer × position-group sweep follows
on in-group prompts patched from an out-group persona. What is the suite's own: its prompts, the persona slot, the
modes' sources, its events."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import pandas as pd

from activations.capture import Layers, n_layers_of, parse_layers, resolve_layers
from behavioral.inference import chat
from behavioral.analysis import Run
from behavioral.analysis.runs import prepared_data
from behavioral.report.blocks import Figure as ReportFigure
from behavioral.report.blocks import Section, Table
from behavioral.report.formats import literal
from behavioral.inference.answer_space import AnswerTrie
from behavioral.runner.run import RunConfig
from behavioral.suite.protocol import Suite
from behavioral.suites.intergroup import prompts
from behavioral.suites.intergroup.corpus import Event, emotions_drawn
from behavioral.suites.intergroup.groups import UNSPECIFIED, Category, category_of, get_category
from behavioral.suites.intergroup.settings import get_setting
from behavioral.suites.intergroup.steering import block, slice_config
from behavioral.suites.intergroup.strata import covers, emotions_text
from behavioral.analysis.cell_gap import empathy_gap, zscore
from interp import attribution as atp
from interp.patching import gap_report
from interp.patching.gap_by_layer import cell_matrix, gap_by_layer
from interp.patching.spec import SYSTEM_GROUP, PatchError, PatchPrompt, PatchSpec, answer_trie, encode
from interp.patching.sweep import evaluate, summarize, sweep, sweep_section

SLOT = "perceiver"  # the patched slot: the persona
SLOTS = (SLOT, "experiencer")  # the rows and columns of the gap's cell matrix
GAP_MODES = ("person", "swap")  # the persona patched in: "a person", or the in-group <-> out-group swap


# --- prompts ------------------------------------------------------------------------------------------------------

def build(tokenizer, setting: str, perceiver: str, experiencer: str, event: Event,
          chat_format: str | None = None) -> PatchPrompt:
    """The suite's prompt for (setting, perceiver, experiencer, event), encoded for patching its persona."""
    narrative = event.narrative(get_setting(setting).narrative_form)
    prompt = prompts.build(setting, perceiver, experiencer, event.emotion, narrative)
    return encode(tokenizer, prompt, SLOT, chat_format)


def setting_trie(tokenizer, setting: str) -> AnswerTrie:
    """The answer trie of `setting`'s scale for `tokenizer` (cached by the scale's maximum)."""
    return answer_trie(tokenizer, get_setting(setting).max_rating)


def swap_source(category: Category, perceiver: str, experiencer: str) -> str:
    """The persona swapped in for cell (perceiver, experiencer): the experiencer itself (in-group) where the cell is
    out-group; where it is in-group, the first identity after the perceiver (cyclically, in Table 1 order) outside
    the experiencer's group."""
    group = category.group_of
    if group[perceiver] != group[experiencer]:
        return experiencer
    names = category.identities
    start = names.index(perceiver)
    for k in range(1, len(names) + 1):
        other = names[(start + k) % len(names)]
        if group[other] != group[experiencer]:
            return other
    raise PatchError(f"category {category.name!r} has a single group: no out-group persona to swap in")


def check_modes(modes: Sequence[str]) -> None:
    """A PatchError naming the first mode that is not one of GAP_MODES."""
    for mode in modes:
        if mode not in GAP_MODES:
            raise PatchError(f"unknown mode {mode!r}; expected one of {', '.join(GAP_MODES)}")


def patched_gap_prompts(engine, category: str | Category, setting: str, events: Sequence[Event],
                        layers: Layers, positions: str = SYSTEM_GROUP, modes: Sequence[str] = GAP_MODES,
                        chat_format: str | None = None, progress: str | None = None) -> pd.DataFrame:
    """Per-prompt rows of the headline experiment, for every perceiver × experiencer (no "a person") × event:
    mode ``person`` patches the persona with "a person" (same experiencer and event), mode ``swap`` with
    ``swap_source`` (in-group <-> out-group), at each layer alone, position group `positions`.
    Columns: mode, perceiver, experiencer, event_id, source_perceiver and the sweep columns."""
    category = category_of(category)
    check_modes(modes)
    chat_format = chat_format or chat.detect_format(engine.tokenizer)
    layers = resolve_layers(layers, n_layers_of(engine.model))
    targets, sources, specs, meta = [], [], [], []
    for mode in modes:
        for p in category.identities:
            for x in category.identities:
                a = UNSPECIFIED if mode == "person" else swap_source(category, p, x)
                for e in events:
                    targets.append(build(engine.tokenizer, setting, p, x, e, chat_format))
                    sources.append(build(engine.tokenizer, setting, a, x, e, chat_format))
                    specs.append([PatchSpec.parse(positions, (layer,)) for layer in layers])
                    meta.append({"mode": mode, "perceiver": p, "experiencer": x, "event_id": e.event_id,
                                 "source_perceiver": a})
    return evaluate(engine, targets, sources, specs, setting_trie(engine.tokenizer, setting), meta, progress)


def ingroup_sweep_prompts(tokenizer, category: str | Category, setting: str, events: Sequence[Event],
                          chat_format: str | None = None) -> tuple[list[PatchPrompt], list[PatchPrompt], list[dict]]:
    """Targets, sources and meta rows of the sweep: each in-group prompt (X perceives X) patched from the persona
    ``swap_source`` gives it (out-group), per event."""
    category = category_of(category)
    targets, sources, meta = [], [], []
    for x in category.identities:
        a = swap_source(category, x, x)
        for e in events:
            targets.append(build(tokenizer, setting, x, x, e, chat_format))
            sources.append(build(tokenizer, setting, a, x, e, chat_format))
            meta.append({"perceiver": x, "experiencer": x, "event_id": e.event_id, "source_perceiver": a})
    return targets, sources, meta


# --- δ after patching ---------------------------------------------------------------------------------------------

def patched_gap(engine, category: str | Category, setting: str, events: Sequence[Event], layers: Layers,
                positions: str = SYSTEM_GROUP, modes: Sequence[str] = GAP_MODES, chat_format: str | None = None,
                progress: str | None = None) -> pd.DataFrame:
    """The headline: for each layer, patch every perceiver's persona with "a person" (and, separately, swap in-group
    and out-group personas), rebuild M0 and recompute the gap and δ. Columns gap_by_layer.GAP_COLUMNS: one row per
    (mode, layer), intervals over the events."""
    frame = patched_gap_prompts(engine, category, setting, events, layers, positions, modes, chat_format, progress)
    return gap_table(frame, category)


def gap_table(frame: pd.DataFrame, category: str | Category) -> pd.DataFrame:
    """`gap_by_layer` of a category's per-prompt rows (`patched_gap_prompts`): its identities, in-group cells and
    the persona × experiencer slots."""
    category = category_of(category)
    return gap_by_layer(frame, category.identities, category.in_group(), SLOTS)


def run_delta(run: Run, category: str, setting: str) -> float | None:
    """δ of a run's score-mode expected intensities for one category and setting (None if absent or undefined)."""
    rows = run.rows
    rows = rows[(rows["category"] == category) & (rows["setting"] == setting) & rows["expected_intensity"].notna()]
    rows = rows[(rows["perceiver"] != UNSPECIFIED) & (rows["experiencer"] != UNSPECIFIED)]
    if rows.empty:
        return None
    cat = get_category(category)
    try:
        return empathy_gap(zscore(cell_matrix(rows, cat.identities, "expected_intensity", SLOTS)), cat.in_group())
    except ValueError:
        return None


# --- the study's protocol -----------------------------------------------------------------------------------------

GAP_TEXT = (
    "For each layer alone, every perceiver's persona is patched at the position group shown (`system`: from the "
    "persona to the end of the system text) with the states of another prompt: mode `person` takes them from the "
    "same prompt with \"a person\" as the persona, mode `swap` from the prompt whose persona is of the other side "
    "(the experiencer for an out-group cell; for an in-group cell the next identity outside the experiencer's "
    "group). M⁰ is rebuilt from the patched expected intensities and the gap (mean in-group minus mean out-group "
    "cell, in rating points) and δ (the same z-scored, without \"a person\") recomputed; the unpatched values are "
    "the same computation on the unpatched prompts.\n\n{headline}\n\n"
    "The table prints the gap closed (as a share of the unpatched gap and in points) and the patched gap, each with "
    "its 95% interval over the events; δ_patched without one; `p` is the one-sided permutation p of δ_patched > 0 "
    "(exact over every matching where the test enumerates them), `p (max-T over layers)` its family-wise correction "
    "over the layers of the mode (the largest δ of any layer under each matching). The CSV adds the unpatched "
    "values, `delta_removed` (1 − δ ratio, which also moves with σ(M⁰)), `p_min` (the floor of both p), the "
    "unpatched null's 95% interval (`null_ci_*`) and the mean change of the expected intensity.")
SWEEP_TEXT = (
    "Each in-group prompt (X perceives X) is patched from the prompt whose persona is out-group, one layer and one "
    "position group at a time. `frac_closed` is the share of the source-target difference in expected intensity the "
    "patch closes (a ratio of sums over the prompts); `delta_expected` the mean change.")


def study_config(run: Run, selection: Mapping[str, str], limit_events: int) -> RunConfig:
    """The run's configuration narrowed to the patched category, setting and a seeded sample of events."""
    get_category(selection["category"])
    get_setting(selection["setting"])
    return slice_config(RunConfig.from_run_dir(run.run_dir), selection, limit_events)


def _planned(run: Run, suite: Suite, where: Mapping, options) -> tuple[dict, RunConfig, int, int]:
    """What a plan reads without the model: the selection, the sliced configuration, the identities and the events
    of the slice; a bad mode is a ValueError naming --mode."""
    try:
        check_modes(options.modes)
    except PatchError as err:
        raise ValueError(f"--mode: {err}") from None
    selection = block(run.config, where)
    config = study_config(run, selection, options.limit_events)
    return (selection, config, len(get_category(selection["category"]).identities),
            len(suite.dataset(config).events))


class PersonaPatching:
    """Seed 000's patching protocol (Suite.protocols["patch"]): the persona patched by mode, δ and the gap by layer,
    and the in-group sweep; and the persona's pairs for attribution patching."""

    kind = "persona"  # the capture span kind whose slot is patched

    def pairs_plan(self, run: Run, suite: Suite, where: Mapping, options) -> str:
        """The attribution study's pairs on `run`, in words (no model needed); a bad mode is a ValueError."""
        selection, _, n, events = _planned(run, suite, where, options)
        return (f"{selection['category']} {selection['setting']}: {len(options.modes)} modes × {n} in-group "
                f"prompts × {events} events = {len(options.modes) * n * events} pairs")

    def pairs(self, run: Run, suite: Suite, engine, where: Mapping, options,
              chat_format: str) -> tuple[list[atp.Pair], pd.DataFrame, str, str]:
        """Attribution's persona pairs: per mode, identity X and event, the in-group prompt (X perceives X) and the
        one whose persona is "a person" (person) or the swap's out-group persona (swap); the pairs, one meta row each
        (mode, clean, source, unit: the event), what the metric is (the expected intensity) and the slot's name."""
        selection = block(run.config, where)
        category, setting = get_category(selection["category"]), selection["setting"]
        config = study_config(run, selection, options.limit_events)
        events = list(prepared_data(run, config, suite, engine.model, engine.tokenizer).events)
        trie = setting_trie(engine.tokenizer, setting)
        metric = atp.expected_metric(trie)
        pairs, meta = [], []
        for mode in options.modes:
            for x in category.identities:
                source = UNSPECIFIED if mode == "person" else swap_source(category, x, x)
                for e in events:
                    clean, corrupted = (build(engine.tokenizer, setting, p, x, e, chat_format) for p in (x, source))
                    pairs.append(atp.Pair(clean, corrupted, trie, metric))
                    meta.append({"mode": mode, "clean": x, "source": source, "unit": e.event_id})
        return (pairs, pd.DataFrame(meta), f"expected intensity ({setting}, 0..{trie.spec.names[-1]})",
                f"persona ({category.name}, {setting})")

    def plan(self, run: Run, suite: Suite, where: Mapping, options) -> str:
        """What the patching study will compute on `run` (no model needed); bad options are a ValueError here, before
        the model loads."""
        selection, config, n, events = _planned(run, suite, where, options)
        sweep_text = (f"; sweep: {n} in-group prompts × {min(options.sweep_events, events)} events × those layers × "
                      f"{len(options.sweep_groups)} position groups" if options.sweep_events and options.sweep_groups
                      else "")
        return (f"{run.name}: {selection['category']} {selection['setting']}, {events} events of the run's corpus (seed "
                f"{config.seed}); headline: {len(options.modes)} modes × {n}² cells × {events} events × the layers of "
                f"--layers {options.layers} (every {options.layer_step}) at {options.positions}{sweep_text}.")

    def analyze(self, run: Run, suite: Suite, engine, where: Mapping, options,
                progress: bool) -> tuple[list[Section], list[Table], dict]:
        """The headline δ by layer and the in-group sweep on `run`'s model (the `engine`): report sections, tables
        written but not printed, and what the manifest records."""
        selection = block(run.config, where)
        category, setting = get_category(selection["category"]), selection["setting"]
        config = study_config(run, selection, options.limit_events)
        # The sampled events, prepared as the suite's run prepares them (T2 rewrites: the run's cache, extended in a
        # temporary folder where it lacks one).
        data = prepared_data(run, config, suite, engine.model, engine.tokenizer)
        events, corpus_emotions = list(data.events), data.corpus_emotions
        layers = parse_layers(options.layers, n_layers_of(engine.model))[::options.layer_step]
        chat_format = chat.detect_format(engine.tokenizer)
        n = len(category.identities)
        if progress:
            n_prompts = len(options.modes) * n * n * len(events) * len(layers)
            print(f"plan: headline {len(options.modes)} modes × {n}² cells × {len(events)} events × {len(layers)} "
                  f"layers = {n_prompts} patched prompts; answer tree of {len(setting_trie(engine.tokenizer, setting))} "
                  "nodes", flush=True)

        where = f"{run.name} · {category.title} · {setting}"

        seconds: dict[str, float] = {}
        start = time.perf_counter()
        frame = patched_gap_prompts(engine, category, setting, events, layers, options.positions, options.modes,
                                    chat_format, progress="headline" if progress else None)
        table = gap_table(frame, category)
        seconds["headline"] = time.perf_counter() - start
        last_block = n_layers_of(engine.model) - 1
        # the figure's title names the events through its n
        figure = gap_report.gap_figure(table, f"gap by patched layer ({options.positions})\n{where}")
        margin = options.equivalence_margin
        text = GAP_TEXT.format(headline=gap_report.headline(table, last_block, margin))
        sections = [Section("The gap by patched layer", text,
                            (Table("gap_by_layer", "The gap after patching the persona at one layer", table,
                                   gap_report.FORMATS, digits=2, columns=gap_report.COLUMNS,
                                   definitions=gap_report.DEFINITIONS),),
                            (ReportFigure("figures/gap_by_layer", "The gap by patched layer", figure),))]
        files = [Table("gap_prompts", "Every patched prompt of the headline", frame)]
        sweep_events = events[:options.sweep_events] if options.sweep_groups else []
        if sweep_events:
            start = time.perf_counter()
            targets, sources, meta = ingroup_sweep_prompts(engine.tokenizer, category, setting, sweep_events, chat_format)
            rows = sweep(engine, targets, sources, layers, setting_trie(engine.tokenizer, setting),
                         options.sweep_groups, meta, progress="sweep" if progress else None)
            seconds["sweep"] = time.perf_counter() - start
            k = len(sweep_events)
            sections.append(sweep_section(summarize(rows), f"in-group prompt ← out-group persona\n{where} · {k} "
                                                           f"event{'s' * (k != 1)}", SWEEP_TEXT))
            files.append(Table("sweep", "Every prompt of the sweep", rows))
        event_ids = [e.event_id for e in events]
        sections.append(gap_report.scope_section(table, len(events), events_cannot(events, corpus_emotions), layers,
                                                 options.layer_step, last_block, chat_format))
        record = {"category": category.name, "setting": setting, "layers": layers, "modes": list(options.modes),
                  "positions": options.positions, "sweep_groups": list(options.sweep_groups) if sweep_events else [],
                  "events": event_ids, "chat_format": chat_format,
                  "seconds": {k: round(v, 1) for k, v in seconds.items()},
                  "result": _result(run, table, category, setting) | {"gap_closed": gap_report.result(table, last_block,
                                                                                                    margin)}}
        return sections, files, record


def events_cannot(events: Sequence[Event], corpus: Sequence[str]) -> str:
    """What the events cannot show: with one, how the result varies with them; else narratives beyond the corpus
    they were drawn from (beyond their emotions, where they lack some of its) and, where the corpus groups events in
    clusters, the dependence within one (these intervals count each event)."""
    if len(events) == 1:
        return (f"How the result varies with the events: one event ({literal(events[0].event_id)}), no interval; "
                "rerun with --limit-events 2 or more.")
    counts = emotions_drawn(e.emotion for e in events)
    text = (f"Narratives beyond the corpus the {len(events)} events were drawn from: the intervals treat them as a "
            "random sample of it, the permutation p conditions on them." if covers(counts, corpus) else
            f"Narratives of emotions the {len(events)} events lack: they hold {emotions_text(counts, corpus)}, so the "
            "intervals speak of events of these emotions, not of the corpus (rerun with more --limit-events); the "
            "permutation p conditions on the events.")
    clustered = sum(e.cluster is not None for e in events)
    return text + (f" {clustered} of the events belong to clusters of the corpus, which these intervals count as "
                   "independent events (the run's Table 2 counts each cluster once)." if clustered else "")


def _result(run: Run, table: pd.DataFrame, category: Category, setting: str) -> dict:
    """The headline in numbers: δ unpatched and its p, the run's own δ, each mode's layer of the largest change."""
    result = {"delta_unpatched": float(table["delta_unpatched"].iloc[0]) if len(table) else math.nan,
              "p_unpatched": float(table["p_unpatched"].iloc[0]) if len(table) else math.nan,
              "delta_run": run_delta(run, category.name, setting)}
    for mode, part in table.groupby("mode", sort=False):
        best = part.loc[part["delta_change"].abs().idxmax()]
        result[f"{mode}_largest_change"] = {"layer": int(best["layer"]), "delta_patched": float(best["delta_patched"]),
                                            "delta_change": float(best["delta_change"])}
    return result
