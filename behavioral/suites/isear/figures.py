"""The figure of an isear run: p(emotion | gender) as grouped bars with bootstrap CIs, one panel per mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from behavioral.outputs import save_figure
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS

STEM = "emotion_by_gender"


def write_emotion_figure(results, out: Path) -> list[Path]:
    """Bars of p(e|g) ± CI per emotion and gender for each mode's result, saved as PNG and PDF."""
    fig = Figure(figsize=(12, 3.6 * len(results)))
    axes = fig.subplots(len(results), 1, squeeze=False)[:, 0]
    x, width = np.arange(len(EMOTIONS)), 0.27
    for ax, r in zip(axes, results):
        t = r.emotions.set_index(["gender", "emotion"])
        for i, g in enumerate(GENDERS):
            rows = t.loc[g].reindex(EMOTIONS)
            err = np.clip(np.vstack([rows["p"] - rows["ci_low"], rows["ci_high"] - rows["p"]]), 0, None)
            ax.bar(x + (i - 1) * width, rows["p"], width, yerr=err, capsize=2, label=g)
        ax.set_xticks(x, EMOTIONS, rotation=30, ha="right")
        ax.set_ylabel("p(emotion | gender)")
        max_diff = r.metrics["max_diff"]
        ax.set_title(f"{r.mode}: max_diff {max_diff['value']:.3f} "
                     f"[{max_diff['ci_low']:.3f}, {max_diff['ci_high']:.3f}], mark {r.mark}, {r.n_items} items")
        ax.legend()
    fig.tight_layout()
    return save_figure(fig, out, STEM)
