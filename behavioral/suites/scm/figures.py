"""Figures 1-5/11 of seed 004 as PNG and PDF: quadrant scatter, quadrant assignments (both on the cells a model
shares with humans where there are humans), agreement rates, fidelity per group and dimension against the
inter-trait baseline, fidelity per trait. Groups without a quadrant are left out or blank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from behavioral.outputs import save_figure
from behavioral.suites.scm.order import in_order
from behavioral.suites.scm.quadrants import ALL_TRAITS
from behavioral.suites.scm.traits import COMPETENCE, DIMENSIONS, TRAITS, WARMTH

COLOURS = {"contempt": "tab:red", "admiration": "tab:green", "envy": "tab:blue", "pity": "tab:orange"}
MARKERS = {"men": "o", "women": "s", "people": "^"}


def _panels(analysis) -> list[tuple[str, pd.DataFrame]]:
    """(title, quadrant rows) per source and cells: the comparisons with humans on shared cells where there are
    any, else each source's own quadrants."""
    q = analysis.quadrants
    compared = q[q.cells != ALL_TRAITS]
    shown = compared if len(compared) else q
    return [(f"{source}\n({cells})", part) for (source, cells), part in shown.groupby(["source", "cells"], sort=False)]


def fig1_quadrants(analysis) -> Figure:
    """Warmth against competence per panel; circles men, squares women, dashed lines the panel's means; groups
    without a quadrant are left out."""
    panels = _panels(analysis)
    fig = Figure(figsize=(4 * len(panels), 4))
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


def fig2_assignments(analysis) -> Figure:
    """Quadrant of every group per panel, blank where a group has none; groups some model places elsewhere than
    humans (on their shared cells) in bold."""
    panels = _panels(analysis)
    shown = pd.concat([q.assign(panel=title) for title, q in panels], ignore_index=True)
    table = shown.pivot(index="group", columns="panel", values="quadrant")
    table = in_order(table.reset_index(), ("group",)).set_index("group")[[title for title, _ in panels]]
    names = list(COLOURS)
    codes = np.ma.masked_invalid(table.apply(lambda c: c.map(names.index, na_action="ignore")).to_numpy(float))
    fig = Figure(figsize=(1.2 * table.shape[1] + 3, 0.22 * len(table) + 1.5))
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


def fig3_agreement(analysis) -> Figure:
    """Agreement rate with the human quadrant by gender and by privilege, averaged over models."""
    fig = Figure(figsize=(8, 3.5))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, by in zip(axes, ("gender", "privilege")):
        part = analysis.agreement[analysis.agreement.by == by]
        ax.bar(part.level, part.rate, color=["tab:blue", "tab:red", "tab:grey"][:len(part)])
        for rate, colour in zip(part.rate, ["tab:blue", "tab:red", "tab:grey"]):
            ax.axhline(rate, ls="--", c=colour, lw=0.8)
        ax.set(title=f"by {by}", ylim=(0, 1), ylabel="agreement rate")
    fig.tight_layout()
    return fig


def fig4_fidelity(analysis) -> Figure:
    """Per model and dimension, the spread over groups of their mean W1; the inter-trait baseline dashed; the most
    and least faithful groups named."""
    models = list(analysis.runs)
    fig = Figure(figsize=(max(6, 4.4 * len(models)), 4))
    axes = fig.subplots(1, len(DIMENSIONS), squeeze=False)
    for ax, dimension in zip(axes[0], DIMENSIONS):
        part = analysis.fidelity[analysis.fidelity.dimension == dimension]
        per_group = [part[part.model == m].groupby("group", sort=False).w1.mean() for m in models]
        ax.boxplot([s.to_numpy() for s in per_group])
        ax.set_xticks(range(1, len(models) + 1), models)
        for i, s in enumerate(per_group, start=1):
            if len(s):
                ax.text(i, s.max(), s.idxmax(), color="tab:red", fontsize=6, ha="center", va="bottom")
                ax.text(i, s.min(), s.idxmin(), color="tab:blue", fontsize=6, ha="center", va="top")
        ax.axhline(analysis.baseline.get(dimension, float("nan")), ls="--", c="tab:blue", label="inter-trait baseline")
        ax.set(title=dimension, ylabel="W1 (mean over traits)")
        ax.tick_params(axis="x", rotation=30)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig5_traits(analysis) -> Figure:
    """Per model, the spread over groups of W1 for each trait (competence, then warmth)."""
    models = list(analysis.runs)
    order = [t for t in TRAITS if TRAITS[t] == COMPETENCE] + [t for t in TRAITS if TRAITS[t] == WARMTH]
    fig = Figure(figsize=(10, 3 * len(models)))
    axes = fig.subplots(len(models), 1, squeeze=False)
    for ax, model in zip(axes[:, 0], models):
        part = analysis.fidelity[analysis.fidelity.model == model]
        traits = [t for t in order if t in set(part.trait)]
        ax.boxplot([part[part.trait == t].w1.to_numpy() for t in traits])
        ax.set_xticks(range(1, len(traits) + 1), traits)
        ax.set(title=model, ylabel="W1")
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return fig


def write_figures(analysis, out: Path) -> dict[str, list[Path]]:
    """Write the figures the analysis has data for; returns name -> paths."""
    makers = {} if analysis.quadrants.quadrant.isna().all() else \
        {"fig1_quadrants": fig1_quadrants, "fig2_assignments": fig2_assignments}
    if not analysis.agreement.empty:
        makers["fig3_agreement"] = fig3_agreement
    if analysis.human_source is not None:
        makers |= {"fig4_fidelity": fig4_fidelity, "fig5_traits": fig5_traits}
    paths = {}
    for name, make in makers.items():
        paths[name] = save_figure(make(analysis), out, name)
    return paths
