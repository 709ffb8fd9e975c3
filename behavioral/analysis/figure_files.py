"""Figures as users read them: saved as PNG and PDF (fonts embedded as TrueType, as journals ask), points labelled
with no two labels overlapping (tables and reports: behavioral.analysis; sizes and palette: behavioral.analysis.figure_style).

Label layout (`place_labels`, deterministic): in display coordinates, each label is a box of its measured text
extent. Labels are placed one at a time, the most crowded anchor first, each at the first free spot of a sequence of
candidates around its anchor (right, left, above, below, the corners, then the angles between, in rings of growing
distance) that stays inside the axes' frame (FRAME_GAP from it) and overlaps no label placed before, no line drawn on
the axes (a reference line, a whisker, an error bar) and no marker; a label placed away from its point gets a leader
line. Where no spot is free of markers the label may cover another point's marker (never its own); where no spot is
free of labels and lines the axes' labels shrink half a point at a time, so labels never overlap a label or a line
unless the axes cannot hold them at figure_style.MIN_FONT."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.text import Text

from behavioral.analysis.figure_style import GREY, LABEL_SIZE, MIN_FONT, freeze_layout, renderer

FIGURE_FORMATS = ("png", "pdf")
DPI = 200  # the PNG's resolution when a caller names none (the tests lower it: they read no pixels)
PAD = 0.02  # inches of margin around a figure's drawn content: a figure laid out within its column width stays in it


def save_figure(fig: Figure, out_dir: str | Path, stem: str, dpi: int | None = None) -> list[Path]:
    """Save `fig` as `stem`.png and `stem`.pdf in `out_dir` (the PNG at `dpi`, default DPI), cropped to what is
    drawn; returns the paths."""
    dpi = DPI if dpi is None else dpi
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.{fmt}" for fmt in FIGURE_FORMATS]
    with mpl.rc_context({"pdf.fonttype": 42, "svg.fonttype": "none"}):  # text stays text, not Type 3 glyphs
        for path in paths:
            fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=PAD)
    return paths


MEASURE_DPI = 600  # labels are measured at this resolution, where font hinting no longer narrows them
_ORDER = np.deg2rad([0, 180, 90, 270, 45, 135, 315, 225, 22.5, 157.5, 337.5, 202.5, 67.5, 112.5, 292.5, 247.5])
_OVERLAPPING = 1e6  # the cost of a label over a label or a line, against 1 per marker covered
FRAME_GAP = 1.5  # points between a label and the axes' frame
LEADER = "leader"  # the gid of the lines that lead a label back to its point


def coinciding(points: np.ndarray, tolerance: float) -> list[list[int]]:
    """Indices of the points grouped where they coincide (closer than `tolerance` of the points' span in every
    coordinate), in order of first appearance."""
    points = np.asarray(points, dtype=float)
    span = float(np.ptp(points, axis=0).max()) if len(points) else 0.0
    groups: list[list[int]] = []
    for i, point in enumerate(points):
        same = next((g for g in groups if np.abs(points[g[0]] - point).max() <= tolerance * span), None)
        if same is None:
            groups.append([i])
        else:
            same.append(i)
    return groups


def _overlaps(boxes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """[len(boxes)]: how many of `others` each box (x0, y0, x1, y1) overlaps."""
    if not len(others):
        return np.zeros(len(boxes))
    b, o = boxes[:, None, :], others[None, :, :]
    hit = (b[..., 0] < o[..., 2]) & (o[..., 0] < b[..., 2]) & (b[..., 1] < o[..., 3]) & (o[..., 1] < b[..., 3])
    return hit.sum(1)


def _crossings(boxes: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """[len(boxes)]: how many of the line segments (x0, y0, x1, y1) each box (x0, y0, x1, y1) meets (Liang-Barsky
    clipping of each segment to each box)."""
    if not len(segments):
        return np.zeros(len(boxes))
    start, delta = segments[None, :, :2], segments[None, :, 2:] - segments[None, :, :2]
    p = np.concatenate([-delta, delta], axis=-1)  # [1, m, 4]: the left, bottom, right and top edges
    q = np.concatenate([start - boxes[:, None, :2], boxes[:, None, 2:] - start], axis=-1)  # [n, m, 4]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = q / p
    parallel_outside = ((p == 0) & (q < 0)).any(-1)
    enter = np.where(p < 0, t, -np.inf).max(-1, initial=0.0)
    leave = np.where(p > 0, t, np.inf).min(-1, initial=1.0)
    return ((enter <= leave) & ~parallel_outside).sum(1)


def line_segments(ax: Axes) -> np.ndarray:
    """[m, 4]: the straight pieces (x0, y0, x1, y1, display coordinates) of the lines drawn on `ax` (Line2D, such as
    reference lines, whiskers and error bar caps, and line collections, such as error bars), leader lines left out."""
    paths = [(line.get_transform(), np.column_stack(line.get_data(orig=False)).astype(float))
             for line in ax.lines if line.get_visible() and line.get_linestyle() not in ("None", "", " ")
             and line.get_gid() != LEADER]
    paths += [(c.get_transform(), np.asarray(segment, dtype=float)) for c in ax.collections
              if isinstance(c, LineCollection) and c.get_visible() for segment in c.get_segments()]
    pieces = [np.hstack([points[:-1], points[1:]]) for transform, xy in paths if len(xy) > 1
              for points in [transform.transform(xy)]]
    pieces = np.vstack(pieces) if pieces else np.zeros((0, 4))
    return pieces[np.isfinite(pieces).all(1)]


def _candidates(anchor: np.ndarray, size: np.ndarray, gap: float, step: float, rings: int) -> np.ndarray:
    """[rings * 16, 4]: boxes of `size` around `anchor`, nearest ring first, each ring in order of preference; the
    box's nearest edge or corner `gap` + ring * `step` from the anchor."""
    distance = gap + step * np.arange(rings)[:, None]
    dx = np.clip(np.sqrt(2) * np.cos(_ORDER), -1, 1) * (size[0] / 2 + distance)
    dy = np.clip(np.sqrt(2) * np.sin(_ORDER), -1, 1) * (size[1] / 2 + distance)
    centres = anchor + np.stack([dx, dy], axis=-1).reshape(-1, 2)
    return np.hstack([centres - size / 2, centres + size / 2])


def place_labels(anchors: np.ndarray, sizes: np.ndarray, bounds: tuple[float, float, float, float],
                 marker: float, gap: float, lines: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Boxes (x0, y0, x1, y1) for labels of `sizes` [n, 2] near `anchors` [n, 2] inside `bounds` (x0, y0, x1, y1),
    clear of each other, of the `lines` (segments x0, y0, x1, y1) and of the markers (squares of half-side `marker`
    at the anchors) where any spot allows; returns them and how many labels overlap one placed before or a line (0
    unless the bounds cannot hold them)."""
    lines = np.zeros((0, 4)) if lines is None else np.asarray(lines, dtype=float)
    anchors, sizes = np.asarray(anchors, dtype=float), np.asarray(sizes, dtype=float)
    markers = np.hstack([anchors - marker, anchors + marker])
    x0, y0, x1, y1 = bounds
    step = max(1.0, float(sizes[:, 1].min(initial=1.0)) / 2)
    rings = int(np.hypot(x1 - x0, y1 - y0) / step) + 1
    crowd = (np.abs(anchors[:, None] - anchors[None]) < 2 * sizes.max(0, initial=0)).all(-1).sum(1)
    boxes, done, overlapping = np.zeros((len(anchors), 4)), [], 0
    for i in np.argsort(-crowd, kind="stable"):  # the most crowded first: they have the fewest free spots
        options = _candidates(anchors[i], sizes[i], marker + gap, step, rings)
        inside = (options[:, 0] >= x0) & (options[:, 1] >= y0) & (options[:, 2] <= x1) & (options[:, 3] <= y1)
        options = options[inside] if inside.any() else options
        on_labels = _overlaps(options, boxes[done]) + _crossings(options, lines)
        others = np.delete(markers, i, axis=0)
        cost = _OVERLAPPING * on_labels + _overlaps(options, others) + _OVERLAPPING * _overlaps(options, markers[[i]])
        best = int(np.argmin(cost))  # the first of the cheapest, in order of preference
        boxes[i] = options[best]
        overlapping += int(on_labels[best] > 0)
        done.append(i)
    return boxes, overlapping


def _text_sizes(texts: Sequence[Text]) -> np.ndarray:
    """[n, 2]: the texts' widths and heights at MEASURE_DPI (in its pixels): hinting at a screen's resolution
    draws them narrower or wider than the PDF prints them; at MEASURE_DPI they are within a point of it."""
    measure = RendererAgg(1, 1, MEASURE_DPI)
    return np.array([[b.width, b.height] for b in (t.get_window_extent(measure, dpi=MEASURE_DPI) for t in texts)])


def _leader(ax: Axes, anchor: np.ndarray, box: np.ndarray, marker: float, gap: float) -> None:
    """A thin line from the point at `anchor` to its label's `box` (display coordinates) where the label sits away
    from the point."""
    nearest = np.clip(anchor, box[:2], box[2:])
    distance = float(np.hypot(*(nearest - anchor)))
    if distance <= 1.5 * (marker + gap):  # beside the marker: the nearest ring of spots needs no line
        return
    start = anchor + (nearest - anchor) * marker / distance
    (x, y) = ax.transData.inverted().transform(np.vstack([start, nearest])).T
    ax.plot(x, y, color=GREY, linewidth=0.4, zorder=0.5, scalex=False, scaley=False, gid=LEADER)


def label_points(ax: Axes, points: np.ndarray, names: Sequence[str], fontsize: float = LABEL_SIZE,
                 tolerance: float = 1e-3, marker: float = 3.5) -> list[Text]:
    """Label 2-D points with their names, no label overlapping another or a line drawn on the axes (see the module's
    text; `marker`: the markers' half-width in points). Points that coincide (closer than `tolerance` of the plot's
    span, as identical rows do after t-SNE or UMAP) get one label listing every name. Lays the figure out and keeps
    that layout and the axes' limits; call it last. Returns the labels."""
    points = np.asarray(points, dtype=float)
    fig = ax.figure
    freeze_layout(fig)
    ax.set_xlim(ax.get_xlim())  # the labels' display positions hold only while the limits do
    ax.set_ylim(ax.get_ylim())
    groups = coinciding(points, tolerance)
    anchors = ax.transData.transform(points[[g[0] for g in groups]])
    texts = [ax.text(*points[g[0]], ", ".join(names[i] for i in g), fontsize=fontsize, ha="center", va="center",
                     zorder=3) for g in groups]
    px = fig.dpi / 72
    frame = ax.get_window_extent(renderer(fig)).padded(-FRAME_GAP * px)
    lines = line_segments(ax)
    size = fontsize
    while True:
        for text in texts:
            text.set_fontsize(size)
        sizes = _text_sizes(texts) * fig.dpi / MEASURE_DPI + 2 * px
        boxes, overlapping = place_labels(anchors, sizes, frame.extents, marker * px, px, lines)
        if not overlapping or size <= MIN_FONT:
            break
        size = max(MIN_FONT, size - 0.5)
    for text, anchor, box in zip(texts, anchors, boxes):
        text.set_position(ax.transData.inverted().transform((box[:2] + box[2:]) / 2))
        _leader(ax, anchor, box, marker * px, px)
    return texts
