"""Figures 1-5/11 of seed 004, drawn on matplotlib Figures outside pyplot: quadrant scatter, quadrant assignments
(both on the cells a run shares with humans where there are humans), agreement rates, fidelity per group and
dimension against the inter-trait baseline, fidelity per trait. Groups without a quadrant are left out or blank."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from behavioral.analysis import new_figure
from behavioral.suites.scm.order import in_order
from behavioral.suites.scm.quadrants import ALL_TRAITS
from behavioral.suites.scm.results import Results
from behavioral.suites.scm.traits import COMPETENCE, DIMENSIONS, TRAITS, WARMTH

COLOURS = {"contempt": "tab:red", "admiration": "tab:green", "envy": "tab:blue", "pity": "tab:orange"}
MARKERS = {"men": "o", "women": "s", "people": "^"}


def _panels(results: Results) -> list[tuple[str, pd.DataFrame]]:
    """(title, quadrant rows) per source and cells: the comparisons with humans on shared cells where there are
    any, else each source's own quadrants."""
    q = results.quadrants
    compared = q[q.cells != ALL_TRAITS]
    shown = compared if len(compared) else q
    return [(f"{source}\n({cells})", part) for (source, cells), part in shown.groupby(["source", "cells"], sort=False)]


def fig1_quadrants(results: Results) -> Figure:
    """Warmth against competence per panel; circles men, squares women, dashed lines the panel's means; groups
    without a quadrant are left out."""
    panels = _panels(results)
    fig = new_figure(4 * len(panels), 4)
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (title, q) in zip(axes[0], panels):
        placed = q.dropna(subset=["quadrant"])
        for gender, marker in MARKERS.items():
            part = placed[placed.gender == gender]
            ax.scatter(part.warmth, part.competence, marker=marker, c=[COLOURS[x] for x in part.quadrant], s=30,
                       label=gender if len(part) else None)
        ax.axvline(q.warmth.mean(), ls="--", c="grey")
        ax.axhline(q.competence.mean(), ls="--", c="grey")
        ax.set(title=title, xlabel="warmth", ylabel="competence")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig2_assignments(results: Results) -> Figure:
    """Quadrant of every group per panel, blank where a group has none; groups some run places elsewhere than
    humans (on their shared cells) in bold."""
    panels = _panels(results)
    shown = pd.concat([q.assign(panel=title) for title, q in panels], ignore_index=True)
    table = shown.pivot(index="group", columns="panel", values="quadrant")
    table = in_order(table.reset_index(), ("group",)).set_index("group")[[title for title, _ in panels]]
    names = list(COLOURS)
    codes = np.ma.masked_invalid(table.apply(lambda c: c.map(names.index, na_action="ignore")).to_numpy(float))
    fig = new_figure(1.2 * table.shape[1] + 3, 0.22 * len(table) + 1.5)
    ax = fig.subplots()
    cmap = ListedColormap(list(COLOURS.values())).with_extremes(bad="white")
    ax.imshow(codes, cmap=cmap, vmin=0, vmax=len(names) - 1, aspect="auto")
    ax.set_xticks(range(table.shape[1]), table.columns, rotation=30, ha="right")
    ax.set_yticks(range(len(table)), table.index, fontsize=7)
    misaligned = set(shown.group[shown.agrees.eq(False)])
    for label, group in zip(ax.get_yticklabels(), table.index):
        label.set_fontweight("bold" if group in misaligned else "normal")
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles=[*handles, Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="grey")],
              labels=[*names, "no quadrant"], bbox_to_anchor=(1.02, 1), loc="upper left", fontsize=7)
    fig.tight_layout()
    return fig


def fig3_agreement(results: Results) -> Figure:
    """Agreement rate with the human quadrant by gender and by privilege, averaged over runs."""
    rates = results.agreement_rates()
    fig = new_figure(8, 3.5)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, by in zip(axes, ("gender", "privilege")):
        part = rates[rates.by == by]
        ax.bar(part.level, part.rate, color=["tab:blue", "tab:red", "tab:grey"][:len(part)])
        for rate, colour in zip(part.rate, ["tab:blue", "tab:red", "tab:grey"]):
            ax.axhline(rate, ls="--", c=colour, lw=0.8)
        ax.set(title=f"by {by}", ylim=(0, 1), ylabel="agreement rate")
    fig.tight_layout()
    return fig


def fig4_fidelity(results: Results) -> Figure:
    """Per run and dimension, the spread over groups of their mean W1; the inter-trait baseline dashed; the most
    and least faithful groups named."""
    names = results.runs
    fig = new_figure(max(6, 4.4 * len(names)), 4)
    axes = fig.subplots(1, len(DIMENSIONS), squeeze=False)
    for ax, dimension in zip(axes[0], DIMENSIONS):
        part = results.fidelity[results.fidelity.dimension == dimension]
        per_group = [part[part.run == name].groupby("group", sort=False).w1.mean() for name in names]
        ax.boxplot([s.to_numpy() for s in per_group])
        ax.set_xticks(range(1, len(names) + 1), names)
        for i, s in enumerate(per_group, start=1):
            if len(s):
                ax.text(i, s.max(), s.idxmax(), color="tab:red", fontsize=6, ha="center", va="bottom")
                ax.text(i, s.min(), s.idxmin(), color="tab:blue", fontsize=6, ha="center", va="top")
        ax.axhline(results.baseline.get(dimension, float("nan")), ls="--", c="tab:blue", label="inter-trait baseline")
        ax.set(title=dimension, ylabel="W1 (mean over traits)")
        ax.tick_params(axis="x", rotation=30)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig5_traits(results: Results) -> Figure:
    """Per run, the spread over groups of W1 for each trait (competence, then warmth)."""
    order = [t for t in TRAITS if TRAITS[t] == COMPETENCE] + [t for t in TRAITS if TRAITS[t] == WARMTH]
    fig = new_figure(10, 3 * len(results.runs))
    axes = fig.subplots(len(results.runs), 1, squeeze=False)
    for ax, name in zip(axes[:, 0], results.runs):
        part = results.fidelity[results.fidelity.run == name]
        traits = [t for t in order if t in set(part.trait)]
        ax.boxplot([part[part.trait == t].w1.to_numpy() for t in traits])
        ax.set_xticks(range(1, len(traits) + 1), traits)
        ax.set(title=name, ylabel="W1")
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return fig

