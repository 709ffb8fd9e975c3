"""isear's figures, drawn outside pyplot: p(emotion | gender) with CIs per run and mode, and max_diff with its CI
per run against the marks' ranges; panels and series name their measure (the answer read)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from behavioral.analysis import cell, new_figure
from behavioral.suites.isear.metrics import MARK_RANGES, MARKS
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS


def _errors(frame: pd.DataFrame, value: str) -> np.ndarray:
    """Error bar lengths below and above `value` from ci_low and ci_high (none where the CI is missing)."""
    bars = np.vstack([frame[value] - frame["ci_low"], frame["ci_high"] - frame[value]])
    return np.clip(np.nan_to_num(bars), 0, None)


def emotion_figure(emotions: pd.DataFrame, marks: pd.DataFrame) -> Figure:
    """Bars of p(e|g) ± CI per emotion and gender, one panel per run and mode (a row of `marks`)."""
    fig = new_figure(12, 3.6 * len(marks))
    axes = fig.subplots(len(marks), 1, squeeze=False)[:, 0]
    x, width = np.arange(len(EMOTIONS)), 0.27
    for ax, m in zip(axes, marks.itertuples(index=False)):
        panel = emotions[(emotions["run"] == m.run) & (emotions["mode"] == m.mode)].set_index(["gender", "emotion"])
        for i, g in enumerate(GENDERS):
            rows = panel.loc[g].reindex(EMOTIONS)
            ax.bar(x + (i - 1) * width, rows["p"], width, yerr=_errors(rows, "p"), capsize=2, label=g)
        ax.set_xticks(x, EMOTIONS, rotation=30, ha="right")
        ax.set_ylabel("p(emotion | gender)")
        ax.set_title(f"{m.run}, {m.mode} ({m.measure}): max_diff {cell(m.max_diff)} [{cell(m.ci_low)}, "
                     f"{cell(m.ci_high)}], mark {cell(m.mark)}, {m.n_items} items")
        ax.legend()
    fig.tight_layout()
    return fig


def max_diff_figure(marks: pd.DataFrame) -> Figure:
    """max_diff ± CI per run (one series per mode) over the ranges of marks A-D."""
    runs = list(dict.fromkeys(marks["run"]))
    modes = list(dict.fromkeys(marks["mode"]))
    fig = new_figure(max(4.0, 1.2 * len(runs) + 2), 3.6)
    ax = fig.subplots()
    for k, (mark, low, high) in enumerate(zip(MARKS, MARK_RANGES, MARK_RANGES[1:])):
        ax.axhspan(low, high, color="0.93" if k % 2 else "0.85", zorder=0)
        ax.text(len(runs) - 0.5, (low + high) / 2, mark, va="center", ha="right", color="0.4")
    for i, mode in enumerate(modes):
        part = marks[marks["mode"] == mode].set_index("run").reindex(runs)
        x = np.arange(len(runs)) + (i - (len(modes) - 1) / 2) * 0.15
        label = f"{mode} ({', '.join(part['measure'].dropna().unique())})"
        ax.errorbar(x, part["max_diff"], yerr=_errors(part, "max_diff"), fmt="o", capsize=3, label=label)
    ax.set_xticks(np.arange(len(runs)), runs, rotation=20, ha="right")
    ax.set_xlim(-0.5, len(runs) - 0.5)
    ax.set_ylabel("max_diff (CI)")
    ax.legend()
    fig.tight_layout()
    return fig
