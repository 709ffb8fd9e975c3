"""The report of the gap by patched layer (`interp.patching.gap_by_layer`), built from the run's own numbers: the
headline (what is true by construction, and where the informative result lies), the table as printed, its figure,
and what this can and cannot show."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from activations.capture import EMBED_HOOK, table_layer
from behavioral.analysis.figure_style import GREY, PALETTE, count_range, legend_below, n_text, new_figure, styled
from behavioral.analysis.paired import CLOSED_COVERAGE
from behavioral.report.blocks import Section, scope
from behavioral.report.formats import cell, column, is_missing, literal
from interp.patching.gap_by_layer import ONE_EVENT
from interp.patching.claims import EQUIVALENCE_MARGIN, beyond, stops_mattering, undetermined_from
from interp.patching.spec import SYSTEM_GROUP
from interp.patching.sweep import layer_label

MODE_LABELS = {"person": 'persona ← "a person"', "swap": "in-group ↔ out-group persona"}
# mode -> (gap closed at the earliest layers, why): each cell's persona replaced at every state that differs
BY_CONSTRUCTION = {
    "person": (1.0, "every persona then reads as \"a person\", so each experiencer's column holds one rating and the "
                    "in-group and out-group means coincide"),
    "swap": (2.0, "in-group and out-group personas then trade places, so the gap reverses"),
}
WHOLE_SYSTEM = (SYSTEM_GROUP, "all")  # position groups that replace every persona state up to the system text's end
DODGE = 0.2  # the figure sets the modes' points at a layer this share of the layers' spacing apart
MAX_TICKS = 12  # the figure labels at most this many layers


def with_interval(row: pd.Series, name: str, fmt: str | None = None, digits: int = 2) -> str:
    """A column's value and its `_low`/`_high` interval (` [low, high]`, none where it is undefined), the three at
    one precision."""
    value, low, high = column([row[name], row[f"{name}_low"], row[f"{name}_high"]], fmt, digits)
    return value if is_missing(row[f"{name}_low"]) or is_missing(row[f"{name}_high"]) else f"{value} [{low}, {high}]"


def closed(row: pd.Series) -> str:
    """The gap closed at a row's layer: its share with Fieller's interval, and in points with its t-interval."""
    return (f"{with_interval(row, 'gap_closed', 'percent')} of the gap "
            f"({with_interval(row, 'gap_closed_points', 'signed')} points)")


def _unpatched(row: pd.Series) -> str:
    """The unpatched gap in points with its interval, δ with its event count and noise share, its p, and what the
    intervals are."""
    events = f"{row['n_events']} event{'s' if row['n_events'] != 1 else ''}"
    text = (f"Unpatched, over {events}: the gap in rating points {with_interval(row, 'gap_raw_unpatched', 'signed')}; "
            f"δ = {cell(row['delta_unpatched'])} (z-scored over these {events}; event noise is "
            f"{cell(row['noise_share'], 'percent')} of σ(M⁰)², and δ shrinks as it grows, so it has no interval over "
            "events and compares only with a δ over as many events); one-sided p of δ = "
            f"{cell(row['p_unpatched'], 'p')} ({row['p_test']}, floor {cell(row['p_min'], 'p')}). ")
    if row["interval_note"] == ONE_EVENT:
        return text + f"No interval over events: {row['interval_note']}."
    text += ("Each interval is 95% over the events: the gap in points and the gap closed in points are t-intervals "
             "over the per-event values (paired by event for the gap closed), the gap closed as a share of the "
             "unpatched gap (100%: gone, 200%: reversed) is Fieller's interval for that ratio of means "
             f"({CLOSED_COVERAGE}; docs/BENCHMARKS.md).")
    low, high = row["gap_raw_unpatched_low"], row["gap_raw_unpatched_high"]
    if low <= 0 <= high:
        text += (" The unpatched gap's interval includes 0, so the share closed divides by a gap that may be nothing "
                 "and has no bounded interval: read the gap closed in points.")
    elif high < 0:
        text += (" The unpatched gap's interval lies below 0 (out-group cells rated higher), so the share closed is "
                 "the share of a reversed gap removed.")
    return text


def _construction(row: pd.Series, mode: str) -> str:
    """The earliest tested layer's gap closed, and what of it is true by construction."""
    layer = row["layer"]
    what = f"at layer {layer_label(layer)} the patch closes {closed(row)}"
    if row["positions"] not in WHOLE_SYSTEM or layer > 0 or mode not in BY_CONSTRUCTION:
        return what + "."
    expected, why = BY_CONSTRUCTION[mode]
    states = ("the only states that differ between the two prompts" if layer == table_layer(EMBED_HOOK) else
              "every state that differs at these positions (only the tokens after the system text have read the "
              "target's persona, once, in block 0)")
    text = (f"{what}; about {expected:.0%} is expected by construction: the patch replaces {states}, and {why}. "
            "It checks the patch, not where the gap is computed.")
    if not row["gap_closed_low"] <= expected <= row["gap_closed_high"] and not row["interval_note"]:
        text += (f" Here the interval excludes {expected:.0%}: more than the patched states carries the persona "
                 "(at block 0, the tokens after the system text), or the unpatched gap is too small to divide by.")
    return text


def _informative(part: pd.DataFrame, last_block: int, margin: float) -> str:
    """The first tested layer from which every later layer's gap closed passes the equivalence test within ±margin,
    with its interval, and what the tests say of the layer before; else from where the data cannot tell the effect
    from 0."""
    if part["gap_closed_low"].isna().all():
        note = part["interval_note"].iloc[0] or "the gap closed has no interval"
        return f"Where patching stops mattering cannot be read without intervals ({note})."
    layers, low, high = part["layer"].tolist(), part["gap_closed_low"].tolist(), part["gap_closed_high"].tolist()
    layer = stops_mattering(layers, low, high, margin)
    bound = f"±{cell(margin, 'percent')}"
    if layer is None:
        last = part.iloc[-1]
        text = (f"No layer from which patching is shown to stop mattering among those tested (the gap closed within "
                f"{bound} of the unpatched gap at every layer from it on): the last, layer "
                f"{layer_label(last['layer'])}, closes {closed(last)}.")
        unclear = undetermined_from(layers, low, high)
        if unclear is not None:
            text += (f" From layer {layer_label(unclear)} on every interval includes 0 but reaches beyond {bound}: "
                     "not distinguishable from 0 at this sample size, and not shown to be 0 (more events narrow "
                     "the intervals).")
        return text
    at = layers.index(layer)
    row = part.iloc[at]
    text = (f"The informative result: from layer {layer_label(layer)} on, every patched layer's effect is within "
            f"{bound} of none ({_equivalence(row, margin)}; layer {layer_label(layer)}: {closed(row)}).")
    if at:
        text += " " + _layer_before(part.iloc[at - 1], layer, margin)
    if layer == last_block and row["positions"] != "all":
        text += (f" Layer {layer} is the last block, where a patch before the answer's position changes nothing by "
                 "construction.")
    return text


def _equivalence(row: pd.Series, margin: float) -> str:
    """What the equivalence test showed, at what level and over how many events."""
    events, bound = int(row["n_events"]), cell(margin, "percent")
    return (f"the gap closed within ±{bound} of the unpatched gap: an equivalence test at 0.025 over {events} events, "
            f"both one-sided t-tests ({events - 1} degrees of freedom) of an effect at ±{bound} rejecting, so each "
            f"95% interval lies inside [−{bound}, {bound}]")


def _layer_before(before: pd.Series, layer: int, margin: float) -> str:
    """What the tests say of the tested layer before the one from which patching stops mattering: shown to matter
    (its interval beyond ±margin) or not told either way (it only failed the equivalence test)."""
    name, bound = layer_label(before["layer"]), f"±{cell(margin, 'percent')}"
    if beyond(before["gap_closed_low"], before["gap_closed_high"], margin):
        return (f"Layer {name} before it closes {closed(before)}, beyond {bound} (its 95% interval outside it): the "
                f"persona's states at these positions stop mattering between layers {name} and {layer_label(layer)}.")
    return (f"Layer {name} before it closes {closed(before)}: neither shown within {bound} nor beyond it, so the "
            "tests do not say whether patching still matters there.")


def headline(table: pd.DataFrame, last_block: int, margin: float = EQUIVALENCE_MARGIN) -> str:
    """The headline of the gap-by-layer table (one position group): the unpatched gap, then per mode what is true by
    construction at the earliest layer and the first layer from which patching is shown to stop mattering (within
    ±margin of the unpatched gap)."""
    if table.empty:
        return "No layer was patched."
    lines = [_unpatched(table.iloc[0]), ""]
    for mode, part in table.groupby("mode", sort=False):
        part = part.sort_values("layer", kind="stable")
        lines.append(f"- **{mode}** ({MODE_LABELS.get(mode, mode)}, {part['positions'].iloc[0]} positions): "
                     f"{_construction(part.iloc[0], mode)} {_informative(part, last_block, margin)}")
    return "\n".join(lines)


# The gap-by-layer table as printed (the CSV holds every column): each gap with its interval over events, δ without
# one, the p-values with their correction named.
COLUMNS = {"mode": "mode", "layer": "layer", "n_events": "events", "gap_closed": "gap closed",
           "gap_closed_low": "closed low", "gap_closed_high": "closed high", "gap_closed_points": "closed (points)",
           "gap_closed_points_low": "closed low (points)", "gap_closed_points_high": "closed high (points)",
           "gap_raw_patched": "gap patched (points)", "gap_raw_patched_low": "patched low",
           "gap_raw_patched_high": "patched high", "delta_patched": "δ patched", "p_patched": "p",
           "p_patched_fwe": "p (max-T over layers)"}
FORMATS = {"mode": "text", "layer": "count", "n_events": "count", "gap_closed": "percent",
           "gap_closed_low": "percent", "gap_closed_high": "percent", "gap_closed_points": "signed",
           "gap_closed_points_low": "signed", "gap_closed_points_high": "signed", "gap_raw_patched": "signed",
           "gap_raw_patched_low": "signed", "gap_raw_patched_high": "signed", "p_patched": "p", "p_patched_fwe": "p"}
DEFINITIONS = {
    "layer": "the block whose output is patched (-1: the token embeddings).",
    "gap closed": "the share of the unpatched gap the patch removes; closed low and high: its 95% Fieller interval "
                  "over the events.",
    "closed (points)": "the same in rating points, with its 95% t-interval over the events.",
    "gap patched (points)": "the in-group minus out-group gap after the patch, with its 95% t-interval.",
    "δ patched": "δ after the patch; it gets no interval over events (see the unpatched paragraph).",
    "p": "one-sided p of δ patched against no in-group structure (its test and floor are in the scope section).",
    "p (max-T over layers)": "the same, family-wise over the layers of one mode (the max statistic over the same "
                             "matchings).",
}


def scope_section(table: pd.DataFrame, n_events: int, events_cannot: str, layers: Sequence[int],
                  layer_step: int, last_block: int, chat_format: str) -> Section:
    """What this run of the study can and cannot show, from its settings and table (one row at least): the events
    (`events_cannot`: what the suite's sample of them cannot show), modes, layers, position group, whether intervals
    could be computed."""
    first = table.iloc[0]
    modes = list(dict.fromkeys(table["mode"]))
    labels = ", ".join(layer_label(layer) for layer in layers)
    over = (f"without an interval ({first['interval_note']})" if first["interval_note"] == ONE_EVENT else
            f"with 95% intervals over the {n_events} events (t in points, Fieller as a share)")
    can = [f"Which of the {len(layers)} tested layers ({labels}) carry persona information the gap depends on, "
           "patching "
           f"the {first['positions']} positions in mode{'s' if len(modes) != 1 else ''} {', '.join(modes)}: the gap "
           f"closed at each layer, {over}.",
           f"Whether δ after patching still departs from no in-group structure: one-sided p ({first['p_test']}, floor "
           f"{cell(first['p_min'], 'p')}), and a family-wise p over the {len(layers)} layers of a mode (the max "
           "statistic over the same matchings).",
           "The gap in rating points beside δ, so a change of σ(M⁰) under patching is not read as a change of the "
           "gap."]
    expected = " and ".join(f"about {BY_CONSTRUCTION[m][0]:.0%} in mode {m}" for m in modes
                            if m in BY_CONSTRUCTION)
    cannot = [f"A δ comparable with one over another number of events (δ shrinks with fewer: event noise is "
              f"{cell(first['noise_share'], 'percent')} of σ(M⁰)² here).",
              "Where the gap is computed: a layer whose patch closes it carries persona information that the answer "
              f"reads from there on, at the {first['positions']} positions only.",
              f"Anything from the gap closed at the earliest layers ({expected}: true by construction) or at the last "
              f"block (block {last_block}: nothing after it reads the patched positions).",
              events_cannot,
              f"Other answer scales or prompt formats: one setting's scale, prompts in the {literal(chat_format)} chat "
              "format."]
    if layer_step > 1:
        cannot.append(f"Layers between those tested (every {layer_step}-th of --layers): the layer from which patching "
                      f"stops mattering is known to within {layer_step} layers.")
    return scope(can, cannot)


def result(table: pd.DataFrame, last_block: int, margin: float = EQUIVALENCE_MARGIN) -> dict:
    """The headline in numbers for the manifest: per mode, the earliest layer's gap closed and the first layer from
    which patching is shown to stop mattering within ±margin (None: none among those tested, or no intervals), with
    their intervals."""
    out = {}
    for mode, part in table.groupby("mode", sort=False):
        part = part.sort_values("layer", kind="stable")
        layer = stops_mattering(part["layer"].tolist(), part["gap_closed_low"].tolist(),
                                part["gap_closed_high"].tolist(), margin)
        out[mode] = {"earliest": _closed_numbers(part.iloc[0]), "last_block": last_block, "margin": margin,
                     "stops_mattering": None if layer is None else
                     _closed_numbers(part[part["layer"] == layer].iloc[0])}
    return out


def _closed_numbers(row: pd.Series) -> dict:
    """A row's layer and gap closed (share and points) with their intervals, as the manifest records them (None for
    NaN)."""
    names = [f"{k}{end}" for k in ("gap_closed", "gap_closed_points") for end in ("", "_low", "_high")]
    return {"layer": int(row["layer"]), **{k: None if is_missing(row[k]) else float(row[k]) for k in names}}


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
                    label=MODE_LABELS.get(mode, mode))
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
