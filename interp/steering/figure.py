"""The steering study's figure: the suite's measures against the coefficient per layer, the projections and
their controls at the right."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from behavioral.analysis.figure_style import GREY, PALETTE, count_range, legend_below, n_text, new_figure, styled


@styled
def sweep_figure(summary: pd.DataFrame, selection: Mapping[str, str], panels: Sequence[tuple[str, str]],
                 direction: str = "in-group") -> Figure:
    """The summary's (`interp.steering.controls.summarize`) columns of `panels` ((column, title), the suite's
    headline measure first: intergroup's δ beside the refusal rate, the non-numeric mass and the mean rating) vs the
    coefficient per layer (projection at the right) for one `selection` of the block fields, two panels to a row,
    the title carrying the events; a layer without a coefficient-0 run takes the unsteered point there (see
    interp.steering.sweep_conditions), the headline's null interval (``ci_low``, ``ci_high``) of the unsteered
    rerun is a band, and an undefined headline value (its note: why) is a triangle at the foot of its panel; one
    legend for every panel, below them."""
    part = summary[np.logical_and.reduce([summary[field] == value for field, value in selection.items()])]
    measures = list(dict.fromkeys(part["measure"]))
    headline, symbol = panels[0][0], panels[0][1].split(" (")[0]
    fig = new_figure(2, 2.0 * 2 * len(measures) + 0.9)
    axes = fig.subplots(2 * len(measures), 2, squeeze=False).reshape(len(measures), len(panels))
    steered = part[part["layer"] >= 0]
    coefs = sorted(steered.loc[~steered["project"].astype(bool), "coef"].dropna().unique())
    span = (max(coefs) - min(coefs)) if len(coefs) > 1 else 1.0
    x_project = (max(coefs) if coefs else 0.0) + 0.35 * span
    ticks = sorted(set(coefs) | ({0.0} if (part["layer"] < 0).any() else set()))  # 0: the unsteered rerun
    colors = {layer: PALETTE[i % len(PALETTE)] for i, layer in enumerate(sorted(steered["layer"].unique()))}
    for i, measure in enumerate(measures):
        rows = part[part["measure"] == measure]
        base = rows[rows["layer"] < 0]
        for j, (column, title) in enumerate(panels):
            ax = axes[i, j]
            if len(base) and np.isfinite(base[column].iloc[0]):
                ax.axhline(base[column].iloc[0], color="black", linestyle="--", linewidth=0.8, label="unsteered")
            if column == headline and len(base) and np.isfinite(base["ci_low"].iloc[0]):
                ax.axhspan(base["ci_low"].iloc[0], base["ci_high"].iloc[0], color="0.85", label="null 95% (unsteered)")
            for layer, sub in rows[rows["layer"] >= 0].groupby("layer"):
                random = sub["random"].astype(int) > 0
                wrong = sub["matching"].astype(int) >= 0 if "matching" in sub else random & False
                lone = sub["one_sided"].astype(bool) if "one_sided" in sub else random & False
                held = sub["held_out"].astype(int) >= 0 if "held_out" in sub else random & False  # own table
                added = sub[~sub["project"] & ~lone]
                if len(base) and not (added["coef"] == 0).any():
                    added = pd.concat([added, base.assign(coef=0.0)])  # coefficient 0 is the unsteered run
                added = added.sort_values("coef")
                ax.plot(added["coef"], added[column], marker="o", markersize=3, color=colors[layer],
                        label=f"layer {layer}")
                undefined = added.loc[~np.isfinite(added[column]), "coef"]
                if column == headline and len(undefined):  # e.g. every cell the same greedy answer
                    ax.scatter(undefined, [0.04] * len(undefined), marker="v", s=20, color=colors[layer],
                               transform=ax.get_xaxis_transform(), clip_on=False, label=f"{symbol} undefined")
                projected = sub[sub["project"] & ~random & ~wrong & ~held]
                if len(projected):
                    ax.scatter([x_project] * len(projected), projected[column], marker="x", s=30, color=colors[layer],
                               label="projection of the direction")
                matchings = sub[sub["project"] & wrong]
                if len(matchings):
                    ax.scatter([x_project] * len(matchings), matchings[column], marker=".", s=10, color=GREY,
                               label="projections of wrong matchings")
                control = sub[sub["project"] & random]
                if len(control):
                    ax.scatter([x_project] * len(control), control[column], marker="o", s=30, facecolors="none",
                               edgecolors=colors[layer], label="projection of a random direction")
            if (steered["project"]).any():
                ax.set_xticks(ticks + [x_project], [f"{c:g}" for c in ticks] + ["proj."])
            if column == headline and not np.isfinite(rows[headline]).any():
                note = next((n for n in rows["note"] if n), "undefined")
                ax.text(0.5, 0.5, f"{symbol} n/a:\n" + note[:120], ha="center", va="center", wrap=True,
                        transform=ax.transAxes)
            ax.set_xlabel("coefficient")
            ax.set_title(f"{title}, {measure}" if len(measures) > 1 else title)
    entries = {label: handle for ax in axes.flat for handle, label in zip(*ax.get_legend_handles_labels())}
    legend_below(fig, list(entries.values()), list(entries), columns=2)
    fig.suptitle(f"Steering along the {direction} direction: {' '.join(selection.values())}\n"
                 f"{n_text(events=count_range(part['n_events']))}")
    return fig


def figures(summary: pd.DataFrame, fields: Sequence[str], panels: Sequence[tuple[str, str]],
            direction: str = "in-group") -> list[tuple[str, str, Figure]]:
    """(name, title, figure) of `sweep_figure` for each block (the values of `fields`) of the summary."""
    blocks = [dict(zip(fields, values)) for values in summary[list(fields)].drop_duplicates().itertuples(index=False)]
    return [(f"steering_{'_'.join(block.values())}", f"The measures under steering, {' '.join(block.values())}",
             sweep_figure(summary, block, panels, direction)) for block in blocks]
