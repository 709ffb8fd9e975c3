"""isear's figures, drawn outside pyplot: p(emotion | gender) with CIs per run and mode, and max_diff with its CI
per run against the marks' ranges; panels and series name their measure (the answer read)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from behavioral.analysis import cell
from behavioral.analysis.figure_style import GREY, PALETTE, count_range, legend_below, n_text, new_figure, styled
from behavioral.suites.isear.metrics import MARK_RANGES, MARKS
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS


def _errors(frame: pd.DataFrame, value: str) -> np.ndarray:
    """Error bar lengths below and above `value` from ci_low and ci_high (none where the CI is missing)."""
    bars = np.vstack([frame[value] - frame["ci_low"], frame["ci_high"] - frame[value]])
    return np.clip(np.nan_to_num(bars), 0, None)


@styled
def emotion_figure(emotions: pd.DataFrame, marks: pd.DataFrame) -> Figure:
    """Bars of p(e|g) ± CI per emotion and gender, one panel per run and mode (a row of `marks`), each titled with
    its mark and items."""
    fig = new_figure(2, 2.2 * len(marks) + 0.3)
    axes = fig.subplots(len(marks), 1, squeeze=False)[:, 0]
    x, width = np.arange(len(EMOTIONS)), 0.27
    for ax, m in zip(axes, marks.itertuples(index=False)):
        panel = emotions[(emotions["run"] == m.run) & (emotions["mode"] == m.mode)].set_index(["gender", "emotion"])
        for i, g in enumerate(GENDERS):
            rows = panel.loc[g].reindex(EMOTIONS)
            ax.bar(x + (i - 1) * width, rows["p"], width, yerr=_errors(rows, "p"), capsize=1.5,
                   color=PALETTE[i % len(PALETTE)], error_kw={"linewidth": 0.6}, label=g)
        ax.set_xticks(x, EMOTIONS, rotation=30, ha="right")
        ax.set_ylabel("p(emotion | gender)")
        ax.set_title(f"{m.run}, {m.mode} ({m.measure}): max_diff {cell(m.max_diff)} [{cell(m.ci_low)}, "
                     f"{cell(m.ci_high)}], mark {cell(m.mark)}; {n_text(items=int(m.n_items))}")
    legend_below(fig, *axes[0].get_legend_handles_labels(), columns=len(GENDERS))
    return fig


@styled
def max_diff_figure(marks: pd.DataFrame) -> Figure:
    """max_diff ± CI per run (one series per mode) over the ranges of marks A-D, titled with the items per run."""
    runs = list(dict.fromkeys(marks["run"]))
    modes = list(dict.fromkeys(marks["mode"]))
    fig = new_figure(1 if len(runs) <= 3 else 2, 2.8)
    ax = fig.subplots()
    for k, (mark, low, high) in enumerate(zip(MARKS, MARK_RANGES, MARK_RANGES[1:])):
        ax.axhspan(low, high, color="0.93" if k % 2 else "0.85", zorder=0, linewidth=0)
        ax.text(len(runs) - 0.5, (low + high) / 2, mark, va="center", ha="right", color=GREY)
    for i, mode in enumerate(modes):
        part = marks[marks["mode"] == mode].set_index("run").reindex(runs)
        x = np.arange(len(runs)) + (i - (len(modes) - 1) / 2) * 0.15
        label = f"{mode} ({', '.join(part['measure'].dropna().unique())})"
        ax.errorbar(x, part["max_diff"], yerr=_errors(part, "max_diff"), fmt="o", markersize=3, capsize=2,
                    color=PALETTE[i % len(PALETTE)], label=label)
    ax.set_xticks(np.arange(len(runs)), runs, rotation=20, ha="right")
    ax.set_xlim(-0.5, len(runs) - 0.5)
    ax.set_ylabel("max_diff (CI)")
    ax.set_title(f"max_diff per run\n{n_text(items=count_range(marks['n_items']))} per run")
    legend_below(fig, *ax.get_legend_handles_labels(), columns=2)
    return fig
