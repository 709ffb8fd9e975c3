"""Seed 000's patching protocol (`empathy-gap interp patch` on an intergroup run): which layers carry the empathy
gap? For each layer, every perceiver's persona is patched (one layer at a time) with "a person" (mode ``person``) or
with an in-group <-> out-group swap (mode ``swap``), the matrix of expected intensities is rebuilt and the gap and δ
recomputed (``patch_gap``: intervals over events, exact and family-wise p; ``patch_report``: the headline and the
report's scope); a layer × position-group sweep follows on in-group prompts patched from an out-group persona."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from activations.capture import Layers, n_layers_of, parse_layers, resolve_layers
from behavioral.inference import chat
from behavioral.analysis import Run
from behavioral.analysis.runs import prepared_data
from behavioral.report.blocks import Figure as ReportFigure
from behavioral.report.blocks import Section, Table
from behavioral.inference.answer_space import AnswerTrie
from behavioral.analysis.figure_style import GREY, PALETTE, count_range, legend_below, n_text, new_figure, styled
from behavioral.runner.run import RunConfig
from behavioral.suite.protocol import Suite
from behavioral.suites.intergroup import patch_report, prompts
from behavioral.suites.intergroup.corpus import Event
from behavioral.suites.intergroup.groups import UNSPECIFIED, Category, get_category
from behavioral.suites.intergroup.settings import get_setting
from behavioral.suites.intergroup.patch_gap import category_of, cell_matrix, gap_table
from behavioral.analysis.cell_gap import empathy_gap, zscore
from behavioral.suites.intergroup.steering import block, slice_config
from interp import attribution as atp
from interp.patching.spec import SYSTEM_GROUP, PatchError, PatchPrompt, PatchSpec, answer_trie, encode
from interp.patching.sweep import evaluate, heatmap_figure, layer_label, summarize, sweep

SLOT = "perceiver"  # the patched slot: the persona
GAP_MODES = ("person", "swap")  # the persona patched in: "a person", or the in-group <-> out-group swap
DODGE = 0.2  # the gap figure sets the modes' points at a layer this share of the layers' spacing apart
MAX_TICKS = 12  # the gap figure labels at most this many layers


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
    and out-group personas), rebuild M0 and recompute the gap and δ. Columns patch_gap.GAP_COLUMNS: one row per
    (mode, layer), intervals over the events."""
    frame = patched_gap_prompts(engine, category, setting, events, layers, positions, modes, chat_format, progress)
    return gap_table(frame, category)


def run_delta(run: Run, category: str, setting: str) -> float | None:
    """δ of a run's score-mode expected intensities for one category and setting (None if absent or undefined)."""
    rows = run.rows
    rows = rows[(rows["category"] == category) & (rows["setting"] == setting) & rows["expected_intensity"].notna()]
    rows = rows[(rows["perceiver"] != UNSPECIFIED) & (rows["experiencer"] != UNSPECIFIED)]
    if rows.empty:
        return None
    cat = get_category(category)
    try:
        return empathy_gap(zscore(cell_matrix(rows, cat, "expected_intensity")), cat.in_group())
    except ValueError:
        return None


@styled
def gap_figure(table: pd.DataFrame, title: str | None = None) -> Figure:
    """The patched gap in rating points against layer, one line per mode with its 95% interval over events as error
    bars (the modes set side by side at each layer, so no interval hides another), the unpatched gap dashed with its
    interval shaded; the title ends with the events and prompts per point."""
    fig = new_figure(1, 2.8)
    ax = fig.add_subplot()
    modes = table.groupby("mode", sort=False)
    layers = np.unique(table["layer"].to_numpy(dtype=float))
    pitch = float(np.diff(layers).min()) if len(layers) > 1 else 1.0
    for k, (mode, part) in enumerate(modes):
        part = part.sort_values("layer")
        gap = part["gap_raw_patched"].to_numpy(dtype=float)
        errors = np.abs(part[["gap_raw_patched_low", "gap_raw_patched_high"]].to_numpy(dtype=float).T - gap)
        dodge = DODGE * pitch * (k - (modes.ngroups - 1) / 2)
        ax.errorbar(part["layer"] + dodge, gap, yerr=None if np.isnan(errors).all() else errors, marker="o",
                    markersize=3, capsize=2, color=PALETTE[k % len(PALETTE)],
                    label=patch_report.MODE_LABELS.get(mode, mode))
    shown = layers[::-(-len(layers) // MAX_TICKS)]  # the layers, not the modes' offsets
    ax.set_xticks(shown, [layer_label(int(layer)) for layer in shown])
    title = title or "the gap after patching the persona at one layer"
    if len(table):
        first = table.iloc[0]
        ax.axhline(float(first["gap_raw_unpatched"]), color="black", ls="--", lw=0.8, label="unpatched")
        if np.isfinite(first["gap_raw_unpatched_low"]):
            ax.axhspan(float(first["gap_raw_unpatched_low"]), float(first["gap_raw_unpatched_high"]), color=GREY,
                       alpha=0.15, linewidth=0, label="unpatched, 95% over events")
        n = n_text(events=count_range(table["n_events"]), prompts=count_range(table["n_prompts"]))
        title = f"{title}\n{n} per point"
    ax.axhline(0, color=GREY, lw=0.5)
    ax.set_xlabel("patched layer (resid_post)")
    ax.set_ylabel("gap, in-group − out-group (points)")
    legend_below(fig, *ax.get_legend_handles_labels(), columns=2)
    ax.set_title(title)
    return fig


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
        figure = gap_figure(table, f"gap by patched layer ({options.positions})\n{where}")  # its n names the events
        margin = options.equivalence_margin
        text = GAP_TEXT.format(headline=patch_report.headline(table, last_block, margin))
        sections = [Section("The gap by patched layer", text,
                            (Table("gap_by_layer", "The gap after patching the persona at one layer", table,
                                   patch_report.FORMATS, digits=2, columns=patch_report.COLUMNS,
                                   definitions=patch_report.DEFINITIONS),),
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
            sections.append(_sweep_section(summarize(rows), f"in-group prompt ← out-group persona\n{where} · {k} "
                                                            f"event{'s' * (k != 1)}"))
            files.append(Table("sweep", "Every prompt of the sweep", rows))
        event_ids = [e.event_id for e in events]
        sections.append(patch_report.scope_section(table, events, corpus_emotions, layers, options.layer_step,
                                                   last_block, chat_format))
        record = {"category": category.name, "setting": setting, "layers": layers, "modes": list(options.modes),
                  "positions": options.positions, "sweep_groups": list(options.sweep_groups) if sweep_events else [],
                  "events": event_ids, "chat_format": chat_format,
                  "seconds": {k: round(v, 1) for k, v in seconds.items()},
                  "result": _result(run, table, category, setting) | {"gap_closed": patch_report.result(table, last_block,
                                                                                                    margin)}}
        return sections, files, record


def _sweep_section(summary: pd.DataFrame, subtitle: str) -> Section:
    """The sweep's section: its summary table and the two heatmaps."""
    frac = heatmap_figure(summary, "frac_closed", f"fraction of in/out-group difference closed\n{subtitle}")
    delta = heatmap_figure(summary, "delta_expected", f"Δ expected intensity\n{subtitle}")
    return Section("In-group prompts patched from an out-group persona", SWEEP_TEXT,
                   (Table("sweep_summary", "Layer × position group", summary, {"n": "count"}),),
                   (ReportFigure("figures/sweep_frac_closed", "Fraction of the difference closed", frac),
                    ReportFigure("figures/sweep_delta_expected", "Change of the expected intensity", delta)))


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
