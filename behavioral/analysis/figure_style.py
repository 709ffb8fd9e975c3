"""One style for every figure of the toolkit, as a journal prints it: widths of one and two columns, font sizes, a
colour-blind-safe palette (Okabe & Ito) with distinct markers, and the helpers the figure modules share (a figure of
column width, panel grids, a legend below the panels, tick labels that fit a heatmap's cells, "n=" in titles).

Figures are drawn outside pyplot. A drawing function decorated with `styled` creates its artists under the style's
rcParams, so its text takes the sizes below whatever the process's defaults are."""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Callable, Sequence

import matplotlib as mpl
import numpy as np
from cycler import cycler
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import PlaceHolderLayoutEngine

SINGLE_COLUMN = 3.5  # inches: one column of a two-column journal page
DOUBLE_COLUMN = 7.2  # inches: the whole text width
PANEL_HEIGHT = 2.9  # inches: one row of projection-like panels
MAX_COLUMNS = 2  # panels per row of a grid

FONT_SIZE = 7.0  # points: axis labels, legends, annotations
TITLE_SIZE = 8.0  # points: panel titles
SUPTITLE_SIZE = 8.5  # points: a figure's title
TICK_SIZE = 6.5  # points: tick labels
LABEL_SIZE = 6.0  # points: point labels of scatter plots
MIN_FONT = 4.5  # points: the smallest text a figure shrinks to (tick labels of large grids, crowded point labels)

# Okabe & Ito (2008), "Color universal design": distinguishable under the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
GREY = "0.45"  # reference lines, null bands, leader lines

RC = {
    "font.size": FONT_SIZE,
    "axes.titlesize": TITLE_SIZE,
    "axes.labelsize": FONT_SIZE,
    "xtick.labelsize": TICK_SIZE,
    "ytick.labelsize": TICK_SIZE,
    "legend.fontsize": FONT_SIZE,
    "legend.title_fontsize": FONT_SIZE,
    "legend.frameon": False,
    "figure.titlesize": SUPTITLE_SIZE,
    "axes.prop_cycle": cycler(color=PALETTE),
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.0,
    "lines.markersize": 4.0,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "figure.constrained_layout.h_pad": 0.03,
    "figure.constrained_layout.w_pad": 0.03,
}


def styled(draw: Callable[..., Figure | None]) -> Callable[..., Figure | None]:
    """Decorate a function returning a Figure (or None): it draws under the style's rcParams, and its figure's
    ticks are made before they are left (ticks made later copy the first one's size)."""

    @functools.wraps(draw)
    def drawn(*args, **kwargs) -> Figure | None:
        with mpl.rc_context(RC):
            fig = draw(*args, **kwargs)
            if fig is not None:
                fig.draw_without_rendering()
        return fig

    return drawn


def column_width(columns: int) -> float:
    """The width in inches of a figure spanning 1 or 2 columns."""
    if columns not in (1, 2):
        raise ValueError(f"a figure spans 1 or 2 columns, got {columns}")
    return SINGLE_COLUMN if columns == 1 else DOUBLE_COLUMN


def new_figure(columns: int, height: float) -> Figure:
    """A Figure one or two columns wide and `height` inches high, laid out by constrained layout."""
    return Figure(figsize=(column_width(columns), height), layout="constrained")


def grid_shape(panels: int, max_columns: int = MAX_COLUMNS) -> tuple[int, int]:
    """(rows, columns) of a grid holding `panels` panels at most `max_columns` to a row."""
    columns = max(1, min(max_columns, panels))
    return -(-max(1, panels) // columns), columns


def renderer(fig: Figure) -> RendererBase:
    """The renderer that measures `fig`'s text (an Agg canvas is attached to a figure made outside pyplot)."""
    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    return fig.canvas.get_renderer()


def freeze_layout(fig: Figure) -> None:
    """Lay `fig` out now and keep that layout, so that display coordinates measured from here on stay true when
    the figure is saved."""
    if not isinstance(fig.get_layout_engine(), (type(None), PlaceHolderLayoutEngine)):
        renderer(fig)
        fig.draw_without_rendering()
        fig.set_layout_engine("none")


def legend_below(fig: Figure, handles: Sequence, labels: Sequence[str], columns: int = 4) -> None:
    """One legend for every panel, centred below them in rows of `columns` entries (constrained layout makes
    room)."""
    fig.legend(handles, labels, loc="outside lower center", ncols=min(columns, max(1, len(labels))),
               handletextpad=0.3, columnspacing=1.0, borderaxespad=0.2)


def label_styles(labels: Sequence[str]) -> dict[str, tuple[str, str]]:
    """A (colour, marker) per distinct label, in order of first appearance: the palette's colours and a distinct
    marker each, so labels stay apart in grey print too."""
    distinct = list(dict.fromkeys(labels))
    return {lab: (PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)]) for i, lab in enumerate(distinct)}


def scatter_by_label(ax: Axes, points: np.ndarray, labels: Sequence[str], area: float) -> None:
    """2-D points coloured and shaped by label (one legend entry per label), markers of `area` points² edged in
    black, no ticks (a projection's axes have no units)."""
    points = np.asarray(points)
    if points.shape != (len(labels), 2):
        raise ValueError(f"points of shape {points.shape} for {len(labels)} labels; expected [n, 2]")
    for lab, (color, marker) in label_styles(labels).items():
        idx = [i for i, l in enumerate(labels) if l == lab]
        ax.scatter(points[idx, 0], points[idx, 1], color=color, marker=marker, s=area, label=lab,
                   edgecolors="black", linewidths=0.3)
    ax.margins(0.08)
    ax.set_xticks([])
    ax.set_yticks([])


def caption(fig: Figure, text: str) -> None:
    """A note under the panels in small type, wrapped to the figure's width (constrained layout makes room)."""
    chars = int(fig.get_figwidth() * 72 / (0.56 * LABEL_SIZE)) - 4  # about 0.5 em a character, a margin kept
    fig.supxlabel(textwrap.fill(text, chars), fontsize=LABEL_SIZE, x=0.01, ha="left", multialignment="left")


def _noun(noun: str, count: int | str) -> str:
    """`noun` (a plural) for `count`: singular for one."""
    if count != 1:
        return noun
    return noun[:-3] + "y" if noun.endswith("ies") else noun.removesuffix("s")


def count_range(counts: Sequence[int]) -> int | str:
    """Counts that differ between panels or series as one: the count where all agree, else "min–max"."""
    values = sorted({int(c) for c in counts})
    if not values:
        raise ValueError("count_range needs at least one count")
    return values[0] if len(values) == 1 else f"{values[0]}–{values[-1]}"


def n_text(**counts: int | str | None) -> str:
    """The sample sizes a title carries: ``n_text(identities=21, events=3)`` is "n=21 identities, 3 events" (counts
    of None left out; a count may be a range from `count_range`)."""
    parts = [f"{count} {_noun(noun.replace('_', ' '), count)}" for noun, count in counts.items() if count is not None]
    if not parts:
        raise ValueError("n_text needs at least one count")
    return "n=" + ", ".join(parts)


def _widest(ax: Axes, labels: Sequence[str], fontsize: float) -> float:
    """The widest of `labels` at `fontsize`, in points."""
    fig = ax.figure
    probe = fig.text(0, 0, "", fontsize=fontsize)
    widths = []
    for label in labels:
        probe.set_text(str(label))
        widths.append(probe.get_window_extent(renderer(fig)).width)
    probe.remove()
    return max(widths, default=0.0) * 72 / fig.dpi


def _fit_ticks(ax: Axes, xlabels: Sequence[str], ylabels: Sequence[str], fontsize: float) -> float:
    """Set the heatmap's tick labels at the size the axes' present cells allow; returns that size."""
    box = ax.get_window_extent(renderer(ax.figure))
    pitch_x = box.width * 72 / ax.figure.dpi / max(1, len(xlabels))  # points per cell
    pitch_y = box.height * 72 / ax.figure.dpi / max(1, len(ylabels))
    size = float(np.clip(min(pitch_x, pitch_y) / 1.3, MIN_FONT, fontsize))
    for axis, labels, pitch in ((ax.xaxis, xlabels, pitch_x), (ax.yaxis, ylabels, pitch_y)):
        every = max(1, int(np.ceil(1.3 * size / pitch)))  # where even MIN_FONT is taller than a cell
        axis.set_ticks(range(len(labels)), [str(l) if i % every == 0 else "" for i, l in enumerate(labels)],
                       fontsize=size)
    ax.tick_params(axis="x", labelrotation=90 if _widest(ax, xlabels, size) > 0.9 * pitch_x else 0)
    return size


def heatmap_ticks(ax: Axes, xlabels: Sequence[str], ylabels: Sequence[str], fontsize: float = TICK_SIZE) -> float:
    """Label a heatmap's columns and rows (cells at 0, 1, ...) so that no two tick labels overlap: the font shrunk
    to the cells (from `fontsize` down to MIN_FONT, then every other label shown), the columns' labels turned
    upright where they are wider than a cell. The figure is laid out again until the size holds; returns it."""
    size = None
    for _ in range(4):  # the labels take room from the cells: a few passes settle the size
        ax.figure.draw_without_rendering()
        size, previous = _fit_ticks(ax, xlabels, ylabels, fontsize), size
        if size == previous:
            break
    return size
