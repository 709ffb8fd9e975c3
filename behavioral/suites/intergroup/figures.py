"""Heatmaps of M (Figures 2, 3, 5, 6 of seed 000) and the t-SNE of nationality perceivers (Figure 4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from sklearn.manifold import TSNE

from behavioral.analysis.figure_style import (
    GREY, PALETTE, TICK_SIZE, caption, column_width, count_range, heatmap_ticks, legend_below, n_text, new_figure,
    scatter_by_label, styled,
)
from behavioral.analysis.figure_files import label_points
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.settings import SETTING_NAMES, setting_label


CMAP = "YlGnBu"
MARKER_AREA = 20.0  # points²: the t-SNE's markers
# The authors' tsne.py: TSNE(n_components=2, perplexity=5, random_state=42), sklearn's defaults otherwise.
TSNE_PARAMS = {"n_components": 2, "perplexity": 5, "random_state": 42}


def tsne_settings(**params) -> dict:
    """Every parameter of the t-SNE of Figure 4 (the authors' settings, updated by `params`) and sklearn's version;
    sklearn's defaults have changed between releases, so the manifest records them all."""
    import sklearn

    full = TSNE(**(TSNE_PARAMS | params)).get_params()
    return {"params": {k: v for k, v in full.items() if isinstance(v, (int, float, str, bool, type(None)))},
            "sklearn": sklearn.__version__}


def _events(a: SettingAnalysis) -> int:
    """The events M averages (the full exclusion set's)."""
    return int(a.keep.sum()) if a.keep is not None else 0


def _draw_heatmap(ax: Axes, a: SettingAnalysis, masked: bool = True) -> None:
    """M on `ax` with cells failing the t-tests in white (unless `masked` is False) and white lines around the
    "a person" row and column, no ticks; axes labelled perceiver (rows) and experiencer (columns)."""
    ax.set_xlabel("experiencer")
    ax.set_ylabel("perceiver")
    ax.set_xticks([])
    ax.set_yticks([])
    if a.M is None:
        ax.text(0.5, 0.5, "n/a", ha="center", va="center", transform=ax.transAxes)
        return
    cmap = colormaps[CMAP].with_extremes(bad="white")
    shown = np.ones_like(a.M, dtype=bool) if a.shown is None or not masked else a.shown
    # The colour scale spans the whole M, masked cells included (as the authors' heatmap.py), not the shown cells.
    image = ax.imshow(np.ma.masked_where(~shown, a.M), cmap=cmap, interpolation="nearest",
                      vmin=float(a.M.min()), vmax=float(a.M.max()))
    ax.axhline(0.5, color="white", linewidth=1.5)
    ax.axvline(0.5, color="white", linewidth=1.5)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)


@styled
def heatmap_grid(analyses: list[SettingAnalysis]) -> Figure:
    """Figure 2: one heatmap of M per category (rows) and setting (columns), each titled with its setting and the
    events M averages."""
    categories = list(dict.fromkeys(a.category.name for a in analyses))
    settings = [s for s in SETTING_NAMES if s in {a.setting for a in analyses}]
    titles = {a.category.name: a.category.title for a in analyses}
    by_key = {(a.category.name, a.setting): a for a in analyses}
    columns = 1 if len(settings) <= 2 else 2
    panel = column_width(columns) / max(1, len(settings))
    fig = new_figure(columns, len(categories) * (0.85 * panel + 0.4) + 0.3)
    axes = fig.subplots(len(categories), len(settings), squeeze=False)
    for i, cat in enumerate(categories):
        for j, setting in enumerate(settings):
            ax = axes[i, j]
            if (cat, setting) in by_key:
                _draw_heatmap(ax, by_key[cat, setting])
                ax.set_title(f"{setting_label(setting)}\n{n_text(events=_events(by_key[cat, setting]))}",
                             fontsize=TICK_SIZE)
            else:
                ax.axis("off")
            if i < len(categories) - 1:
                ax.set_xlabel("")
            if j > 0:
                ax.set_ylabel("")
        axes[i, 0].set_ylabel(f"{titles[cat]}\nperceiver")
    if analyses:
        fig.suptitle(f"M of {analyses[0].measure_name}")
    return fig


@styled
def heatmap(a: SettingAnalysis, masked: bool = True) -> Figure:
    """Figures 3, 5, 6: M of one category and setting with identity labels (sized to the cells), one column wide
    for a few identities, two for many; the title carries the events M averages, a caption says which cells the
    t-tests hide (`masked`) or that none is hidden."""
    columns = 1 if len(a.identities) <= 8 else 2
    fig = new_figure(columns, 0.95 * column_width(columns) + 0.4)
    ax = fig.subplots()
    _draw_heatmap(ax, a, masked=masked)
    ax.set_title(f"{a.category.title}, {setting_label(a.setting)}, {a.measure_name}\n{n_text(events=_events(a))}")
    caption(fig, _mask_caption(a, masked))
    if a.M is not None:
        names = [a.category.short_label(i) for i in a.identities]
        heatmap_ticks(ax, names, names)
    return fig


def _mask_caption(a: SettingAnalysis, masked: bool) -> str:
    """What the white cells of a heatmap mean, with the counts a reader needs to judge them."""
    events = int(a.keep.sum()) if a.keep is not None else 0
    if a.shown is None or not masked:
        return f"M, all cells shown ({events} events per cell)."
    n = len(a.identities)
    hidden = int((~a.shown).sum())
    return (f"White: {hidden} of {(n - 1) * (n - 2)} off-diagonal cells not significantly different from both diagonal "
            f"cells (paired t-tests over {events} events, p < 0.05/{n}²); the unmasked M is in the _unmasked figure.")


@styled
def tsne_nationality(a: SettingAnalysis, **params) -> Figure:
    """Figure 4: t-SNE of the perceiver rows of δ's matrix (countries only, no "a person"), coloured and shaped by
    cultural zone, every country named (no two names overlapping); `params` override the authors' t-SNE settings."""
    if a.M_delta is None or a.category.zone_of is None:
        raise ValueError(f"{a.category.name}/{a.setting}: t-SNE needs δ's matrix and cultural zones")
    names = a.category.identities
    points = TSNE(**(TSNE_PARAMS | params)).fit_transform(a.M_delta)
    fig = new_figure(1, 3.9)
    ax = fig.subplots()
    scatter_by_label(ax, points, [a.category.zone_of[n] for n in names], MARKER_AREA)
    ax.set_title(f"t-SNE of perceiver rows of M (no \"a person\")\n{a.category.title}, {setting_label(a.setting)}, "
                 f"{a.measure_name}\n{n_text(countries=len(names), events=int(a.keep_delta.sum()))}")
    legend_below(fig, *ax.get_legend_handles_labels(), columns=2)
    label_points(ax, points, [a.category.short_label(n) for n in names], marker=np.sqrt(MARKER_AREA) / 2 + 0.5)
    return fig


def figures(analyses: list[SettingAnalysis]) -> list[tuple[str, str, Figure]]:
    """(name, title, figure): the heatmap grid, a heatmap per category and setting (and its unmasked twin where the
    t-tests hide cells), a t-SNE per nationality setting."""
    out = [("heatmap_grid", "M per category and setting", heatmap_grid(analyses))]
    for a in analyses:
        key, where = f"{a.category.name}_{a.setting}", f"{a.category.title}, {setting_label(a.setting)}"
        out.append((f"heatmap_{key}", f"M, {where}", heatmap(a)))
        if a.shown is not None and not a.shown.all():
            out.append((f"heatmap_{key}_unmasked", f"M, {where}, every cell", heatmap(a, masked=False)))
        if a.category.zone_of is not None and a.M_delta is not None:
            out.append((f"tsne_{key}", f"t-SNE of perceivers, {where}", tsne_nationality(a)))
    return out


@styled
def delta_by_setting(table2: pd.DataFrame) -> Figure:
    """δ per setting (x) for each run (a marker and line per run), a panel per category titled with the events
    behind its δs, each δ's permutation null interval as a bar: the layout of the paper's Figures 2 and 3 for
    several models."""
    categories = list(dict.fromkeys(table2["category"]))
    settings = [s for s in SETTING_NAMES if s in set(table2["setting"])]
    runs = list(dict.fromkeys(table2["run"]))
    fig = new_figure(1 if len(settings) <= 3 else 2, 1.7 * len(categories) + 0.5)
    axes = fig.subplots(len(categories), 1, squeeze=False)[:, 0]
    width = 0.6 / max(1, len(runs))
    for ax, category in zip(axes, categories):
        for k, run in enumerate(runs):
            part = table2[(table2["category"] == category) & (table2["run"] == run)].set_index("setting")
            x = np.arange(len(settings)) + (k - (len(runs) - 1) / 2) * width
            delta = part.reindex(settings)
            color = PALETTE[k % len(PALETTE)]
            ax.vlines(x, delta["ci_low"], delta["ci_high"], color=color, alpha=0.35, linewidth=3)
            measures = "/".join(dict.fromkeys(part["measure"]))
            ax.plot(x, delta["delta"], "o-", color=color, markersize=3, label=f"{run} ({measures})")
        ax.axhline(0, color=GREY, linewidth=0.6)
        ax.set_xticks(range(len(settings)), [setting_label(s) for s in settings],
                      rotation=30 if len(settings) > 3 else 0, ha="right" if len(settings) > 3 else "center")
        ax.set_ylabel("δ")
        events = table2.loc[table2["category"] == category, "n_events"]
        ax.set_title(f"{category}, {n_text(events=count_range(events))} per δ")
    legend_below(fig, *axes[0].get_legend_handles_labels(), columns=2)
    return fig
