"""Heatmaps of M (Figures 2, 3, 5, 6 of seed 000) and the t-SNE of nationality perceivers (Figure 4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from sklearn.manifold import TSNE

from behavioral.outputs import label_points
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.settings import SETTING_NAMES, setting_label


CMAP = "YlGnBu"
# The authors' tsne.py: TSNE(n_components=2, perplexity=5, random_state=42), sklearn's defaults otherwise.
TSNE_PARAMS = {"n_components": 2, "perplexity": 5, "random_state": 42}


def tsne_settings(**params) -> dict:
    """Every parameter of the t-SNE of Figure 4 (the authors' settings, updated by `params`) and sklearn's version;
    sklearn's defaults have changed between releases, so the manifest records them all."""
    import sklearn

    full = TSNE(**(TSNE_PARAMS | params)).get_params()
    return {"params": {k: v for k, v in full.items() if isinstance(v, (int, float, str, bool, type(None)))},
            "sklearn": sklearn.__version__}


def _draw_heatmap(ax: Axes, a: SettingAnalysis, ticks: bool, masked: bool = True) -> None:
    """M on `ax` with cells failing the t-tests in white (unless `masked` is False) and white lines around the
    "a person" row and column; axes labelled perceiver (rows) and experiencer (columns), with identity names as ticks
    if `ticks`."""
    ax.set_xlabel("experiencer")
    ax.set_ylabel("perceiver")
    names = [a.category.short_label(i) for i in a.identities]
    if ticks and a.M is not None:
        ax.set_xticks(range(len(names)), names, rotation=90)
        ax.set_yticks(range(len(names)), names)
    else:
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
    ax.axhline(0.5, color="white", linewidth=2)
    ax.axvline(0.5, color="white", linewidth=2)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)


def heatmap_grid(analyses: list[SettingAnalysis]) -> Figure:
    """Figure 2: one heatmap of M per category (rows) and setting (columns)."""
    categories = list(dict.fromkeys(a.category.name for a in analyses))
    settings = [s for s in SETTING_NAMES if s in {a.setting for a in analyses}]
    titles = {a.category.name: a.category.title for a in analyses}
    by_key = {(a.category.name, a.setting): a for a in analyses}
    fig = Figure(figsize=(2.8 * len(settings), 2.5 * len(categories)))
    axes = fig.subplots(len(categories), len(settings), squeeze=False)
    for i, cat in enumerate(categories):
        for j, setting in enumerate(settings):
            ax = axes[i, j]
            if (cat, setting) in by_key:
                _draw_heatmap(ax, by_key[cat, setting], ticks=False)
            else:
                ax.axis("off")
            if i == 0:
                ax.set_title(setting_label(setting))
            if j == 0:
                ax.set_ylabel(f"{titles[cat]}\nperceiver")
    if analyses:
        fig.suptitle(f"M of {analyses[0].measure_name}")
    fig.tight_layout()
    return fig


def heatmap(a: SettingAnalysis, masked: bool = True) -> Figure:
    """Figures 3, 5, 6: M of one category and setting with identity labels; a caption says which cells the t-tests
    hide (`masked`) or that none is hidden."""
    size = 3 + 0.3 * len(a.identities)
    fig = Figure(figsize=(size + 1, size + 0.4))
    ax = fig.subplots()
    _draw_heatmap(ax, a, ticks=True, masked=masked)
    ax.set_title(f"{a.category.title}, {setting_label(a.setting)}, {a.measure_name}")
    fig.text(0.01, 0.005, _mask_caption(a, masked), fontsize=7, ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
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


def tsne_nationality(a: SettingAnalysis, **params) -> Figure:
    """Figure 4: t-SNE of the perceiver rows of δ's matrix (countries only, no "a person"), coloured by cultural zone;
    `params` override the authors' t-SNE settings."""
    if a.M_delta is None or a.category.zone_of is None:
        raise ValueError(f"{a.category.name}/{a.setting}: t-SNE needs δ's matrix and cultural zones")
    names = a.category.identities
    points = TSNE(**(TSNE_PARAMS | params)).fit_transform(a.M_delta)
    zones = list(dict.fromkeys(a.category.zone_of[n] for n in names))
    colors = dict(zip(zones, colormaps["tab10"].colors))
    fig = Figure(figsize=(8, 6))
    ax = fig.subplots()
    for zone in zones:
        idx = [k for k, n in enumerate(names) if a.category.zone_of[n] == zone]
        ax.scatter(points[idx, 0], points[idx, 1], color=colors[zone], label=zone, s=40)
    label_points(ax, points, [a.category.short_label(n) for n in names], fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    ax.set_title(f"t-SNE of perceiver rows of M (no \"a person\"), {a.category.title}, {setting_label(a.setting)}"
                 f", {a.measure_name}")
    fig.tight_layout()
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


def delta_by_setting(table2: pd.DataFrame) -> Figure:
    """δ per setting (x) for each run (a marker and line per run), a panel per category, each δ's permutation null
    interval as a bar: the layout of the paper's Figures 2 and 3 for several models."""
    categories = list(dict.fromkeys(table2["category"]))
    settings = [s for s in SETTING_NAMES if s in set(table2["setting"])]
    runs = list(dict.fromkeys(table2["run"]))
    fig = Figure(figsize=(1.2 * len(settings) + 2.5, 2.6 * len(categories)))
    axes = fig.subplots(len(categories), 1, squeeze=False)[:, 0]
    width = 0.6 / max(1, len(runs))
    for ax, category in zip(axes, categories):
        for k, run in enumerate(runs):
            part = table2[(table2["category"] == category) & (table2["run"] == run)].set_index("setting")
            x = np.arange(len(settings)) + (k - (len(runs) - 1) / 2) * width
            delta = part.reindex(settings)
            ax.vlines(x, delta["ci_low"], delta["ci_high"], color=colormaps["tab10"](k), alpha=0.35, linewidth=4)
            measures = "/".join(dict.fromkeys(part["measure"]))
            ax.plot(x, delta["delta"], "o-", color=colormaps["tab10"](k), label=f"{run} ({measures})")
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(settings)), [setting_label(s) for s in settings], rotation=30, fontsize=7)
        ax.set_ylabel(f"δ, {category}")
    axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig
