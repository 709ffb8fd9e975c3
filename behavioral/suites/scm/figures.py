"""Figures 1-5/11 of seed 004, drawn on matplotlib Figures outside pyplot: quadrant scatter, quadrant assignments
(both on the cells a run shares with humans where there are humans), agreement rates, fidelity per group and
dimension against the inter-trait baseline, fidelity per trait. Groups without a quadrant are left out or blank."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from behavioral.analysis.figure_style import (
    FONT_SIZE, GREY, LABEL_SIZE, PALETTE, caption, count_range, grid_shape, heatmap_ticks, legend_below, n_text,
    new_figure, styled,
)
from behavioral.analysis.figure_files import coinciding, label_points
from behavioral.suites.scm.order import in_order
from behavioral.suites.scm.quadrants import ALL_TRAITS
from behavioral.suites.scm.results import HUMAN, Results
from behavioral.suites.scm.traits import COMPETENCE, DIMENSIONS, TRAITS, WARMTH

COLOURS = {"contempt": PALETTE[3], "admiration": PALETTE[2], "envy": PALETTE[0], "pity": PALETTE[1]}
MARKERS = {"men": "o", "women": "s", "people": "^"}
LEVELS = (PALETTE[0], PALETTE[3], GREY)  # the bars of fig3: men / privileged, women / not, the rest
TOLERANCE = 1e-3  # fig4: groups whose W1 differ by less than this share of the panel's span share one label


def _panels(results: Results) -> list[tuple[str, pd.DataFrame]]:
    """(title, quadrant rows) per source and cells: the comparisons with humans on shared cells where there are
    any, else each source's own quadrants."""
    q = results.quadrants
    compared = q[q.cells != ALL_TRAITS]
    shown = compared if len(compared) else q
    return [(f"{source}\n({cells})", part) for (source, cells), part in shown.groupby(["source", "cells"], sort=False)]


@styled
def fig1_quadrants(results: Results) -> Figure:
    """Warmth against competence per panel (at most two to a row), each titled with the groups it places; circles
    men, squares women, dashed lines the panel's means; groups without a quadrant are left out."""
    panels = _panels(results)
    rows, columns = grid_shape(len(panels))
    fig = new_figure(columns, 2.8 * rows + 0.4)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, (title, q) in zip(axes, panels):
        placed = q.dropna(subset=["quadrant"])
        for gender, marker in MARKERS.items():
            part = placed[placed.gender == gender]
            ax.scatter(part.warmth, part.competence, marker=marker, c=[COLOURS[x] for x in part.quadrant], s=14,
                       edgecolors="black", linewidths=0.3, label=gender if len(part) else None)
        ax.axvline(q.warmth.mean(), ls="--", c=GREY, lw=0.6)
        ax.axhline(q.competence.mean(), ls="--", c=GREY, lw=0.6)
        ax.set(title=f"{title}, {n_text(groups=len(placed))}", xlabel="warmth", ylabel="competence")
        ax.legend(fontsize=LABEL_SIZE)
    for ax in axes[len(panels):]:
        ax.axis("off")
    return fig


@styled
def fig2_assignments(results: Results) -> Figure:
    """Quadrant of every group per panel, blank where a group has none; groups some run places elsewhere than
    humans (on their shared cells) in bold; tick labels sized to the cells, the title carrying the groups."""
    panels = _panels(results)
    shown = pd.concat([q.assign(panel=title) for title, q in panels], ignore_index=True)
    table = shown.pivot(index="group", columns="panel", values="quadrant")
    table = in_order(table.reset_index(), ("group",)).set_index("group")[[title for title, _ in panels]]
    names = list(COLOURS)
    codes = np.ma.masked_invalid(table.apply(lambda c: c.map(names.index, na_action="ignore")).to_numpy(float))
    fig = new_figure(1 if table.shape[1] <= 3 else 2, min(9.0, 0.14 * len(table) + 1.6))
    ax = fig.subplots()
    cmap = ListedColormap(list(COLOURS.values())).with_extremes(bad="white")
    ax.imshow(codes, cmap=cmap, vmin=0, vmax=len(names) - 1, aspect="auto")
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    legend_below(fig, [*handles, Rectangle((0, 0), 1, 1, facecolor="white", edgecolor=GREY)],
                 [*names, "no quadrant"], columns=3)
    ax.set_title(f"Quadrant of every group\n{n_text(groups=len(table))}")
    heatmap_ticks(ax, [c.replace("\n", " ") for c in table.columns], list(table.index))
    misaligned = set(shown.group[shown.agrees.eq(False)])
    for label, group in zip(ax.get_yticklabels(), table.index):
        label.set_fontweight("bold" if group in misaligned else "normal")
    return fig


@styled
def fig3_agreement(results: Results) -> Figure:
    """Agreement rate with the human quadrant by gender and by privilege, averaged over runs; titled with the
    groups and runs compared."""
    rates = results.agreement_rates()
    n = n_text(groups=results.agreement["group"].nunique(), runs=results.agreement["run"].nunique())
    fig = new_figure(1, 2.4)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, by in zip(axes, ("gender", "privilege")):
        part = rates[rates.by == by]
        ax.bar(part.level, part.rate, color=LEVELS[:len(part)])
        for rate, colour in zip(part.rate, LEVELS):
            ax.axhline(rate, ls="--", c=colour, lw=0.6)
        ax.set(title=f"by {by}", ylim=(0, 1), ylabel="agreement rate" if by == "gender" else "")
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(f"Agreement with the human quadrant\n{n}")
    return fig


def _no_w1(results: Results, dimension: str) -> str:
    """Why no run has a W1 on `dimension`: the traits of it that the human ratings and each run rated."""
    def traits(source: str) -> str:
        return ", ".join(results.rated.get(source, {}).get(dimension, [])) or "none"
    runs = "; ".join(f"{name}: {traits(name)}" for name in results.runs)
    return (f"No W1 on {dimension}: no {dimension} trait is rated both by the humans ({traits(HUMAN)}) and by the "
            f"runs ({runs}).")


def _named(box: dict, k: int, groups: pd.Series) -> pd.Series:
    """The groups a box names: its run's least and most faithful and every outlier (box: boxplot's artists; k: the
    box's index)."""
    outliers = set(box["fliers"][k].get_ydata())
    return groups[groups.isin(outliers) | (groups.index == groups.idxmax()) | (groups.index == groups.idxmin())]


@styled
def fig4_fidelity(results: Results) -> Figure:
    """Per run and dimension, the spread over groups of their mean W1; the inter-trait baseline dashed; each run's
    least and most faithful group and every outlier named, clear of the boxes, the baseline and each other; a panel
    without W1 says why; each panel titled with the groups per run."""
    names = results.runs
    fig = new_figure(2, 3.1)
    axes = fig.subplots(1, len(DIMENSIONS), squeeze=False)[0]
    labelled = []
    for ax, dimension in zip(axes, DIMENSIONS):
        part = results.fidelity[results.fidelity.dimension == dimension]
        per_group = {i: s for i, name in enumerate(names, start=1)
                     if len(s := part[part.run == name].groupby("group", sort=False).w1.mean())}
        if not per_group:
            ax.text(0.5, 0.5, textwrap.fill(_no_w1(results, dimension), 50), transform=ax.transAxes, ha="center",
                    va="center", fontsize=FONT_SIZE, color=GREY)
            ax.set(title=f"{dimension}\n{n_text(groups=0)} per run", xticks=[], yticks=[])
            continue
        box = ax.boxplot([s.to_numpy() for s in per_group.values()], positions=list(per_group), widths=0.5,
                         flierprops={"markersize": 2})
        ax.set_xticks(range(1, len(names) + 1), [n if i in per_group else f"{n}\n(no W1)"
                                                 for i, n in enumerate(names, start=1)])
        ax.set_xlim(0.5, len(names) + 0.5)
        ax.axhline(results.baseline.get(dimension, float("nan")), ls="--", c=PALETTE[0], lw=0.8)
        groups = count_range([len(s) for s in per_group.values()])
        ax.set(title=f"{dimension}\n{n_text(groups=groups)} per run", ylabel="W1 (mean over traits)")
        ax.tick_params(axis="x", rotation=30)
        labelled.append((ax, [(i, s, _named(box, k, s)) for k, (i, s) in enumerate(per_group.items())]))
    caption(fig, "Dashed: the humans' inter-trait baseline. Named: each run's least faithful group (highest W1, "
                 "vermilion), its most faithful (lowest, blue) and every outlier beyond 1.5 interquartile ranges.")
    for ax, boxes in labelled:
        named = [(i, group, w, PALETTE[3] if w > s.median() else PALETTE[0]) for i, s, shown in boxes
                 for group, w in shown.items()]
        points = np.array([(i, w) for i, _, w, _ in named])
        texts = label_points(ax, points, [g for _, g, _, _ in named], FONT_SIZE, TOLERANCE, marker=1.5)
        for text, same in zip(texts, coinciding(points, TOLERANCE)):  # one label for groups of equal W1
            text.set_color(named[same[0]][3])
    return fig


@styled
def fig5_traits(results: Results) -> Figure:
    """Per run, the spread over groups of W1 for each trait it rated (competence, then warmth), a trait without W1
    saying why in its place; titled with the groups per trait."""
    order = [t for t in TRAITS if TRAITS[t] == COMPETENCE] + [t for t in TRAITS if TRAITS[t] == WARMTH]
    fig = new_figure(2, 2.3 * len(results.runs) + 0.3)
    axes = fig.subplots(len(results.runs), 1, squeeze=False)
    for ax, name in zip(axes[:, 0], results.runs):
        part = results.fidelity[results.fidelity.run == name]
        asked = {t for d in DIMENSIONS for t in results.rated.get(name, {}).get(d, [])} | set(part.trait)
        traits = [t for t in order if t in asked]
        scored = {i: t for i, t in enumerate(traits, start=1) if t in set(part.trait)}
        ax.boxplot([part[part.trait == t].w1.to_numpy() for t in scored.values()], positions=list(scored),
                   widths=0.5, flierprops={"markersize": 2})
        ax.set_xticks(range(1, len(traits) + 1), traits)
        ax.set_xlim(0.5, len(traits) + 0.5)
        for i in sorted(set(range(1, len(traits) + 1)) - set(scored)):
            ax.text(i, 0.5, "no human rating", transform=ax.get_xaxis_transform(), rotation=90, ha="center",
                    va="center", fontsize=FONT_SIZE, color=GREY)
        groups = count_range(part.groupby("trait").group.nunique()) if len(part) else 0
        ax.set(title=f"{name}, {n_text(groups=groups)} per trait", ylabel="W1")
        ax.tick_params(axis="x", rotation=45)
    return fig
