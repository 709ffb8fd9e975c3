"""Figures as a journal prints them, measured: the clusters study's projections of the toy nationality run (21
countries, 6 events) have no two point labels overlapping (their rendered text boxes), no label on a marker, n in
every title and a width of two columns at most; label_points on adversarial points; heatmap tick labels on a large
grid in one column; every figure written as PNG and PDF."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox
from PIL import Image

from behavioral import figure_style
from behavioral.analysis.study import read_study_runs, run_study
from behavioral.outputs import label_points, place_labels, save_figure
from behavioral.registry import get_study
from behavioral.suites.intergroup.groups import get_category
from tests.test_analysis import N_EVENTS
from tests.test_clusters import synthetic_capture_run

NATIONS = len(get_category("nationality").identities)  # 21
ZONES = len(set(get_category("nationality").zone_of.values()))  # 8
WHERE = ("category=nationality", "setting=P0S1T0")


@pytest.fixture(scope="module")
def toy_figures(tmp_path_factory) -> dict[str, Figure]:
    """The clusters study's figures of the toy nationality run (t-SNE and UMAP at layers 0 and 1 and of behaviour),
    by name."""
    run_dir = tmp_path_factory.mktemp("toy") / "run"
    synthetic_capture_run(run_dir)
    study = get_study("clusters")
    options = study.Options(where=WHERE, permutations=20, project="first,last", methods=("tsne", "umap"))
    analysis = study.analyze(read_study_runs([run_dir]), options, tmp_path_factory.mktemp("out"), progress=False)
    return {f.name: f.figure for f in analysis.figures()}


def overlap(a: Bbox, b: Bbox) -> float:
    """The area two boxes share (0 where they only touch)."""
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def label_boxes(ax: Axes) -> list[Bbox]:
    """The rendered boxes of the point labels of `ax`."""
    return [t.get_window_extent(figure_style.renderer(ax.figure)) for t in ax.texts]


def marker_boxes(ax: Axes) -> list[Bbox]:
    """The boxes of the scatter markers of `ax` in display coordinates."""
    boxes = []
    for collection in ax.collections:
        half = np.sqrt(collection.get_sizes()[0]) / 2 * ax.figure.dpi / 72
        for x, y in ax.transData.transform(collection.get_offsets()):
            boxes.append(Bbox.from_extents(x - half, y - half, x + half, y + half))
    return boxes


def overlapping_pairs(boxes: list[Bbox]) -> list[tuple[int, int]]:
    return [(i, j) for (i, a), (j, b) in combinations(enumerate(boxes), 2) if overlap(a, b) > 0]


@pytest.mark.parametrize("dpi", [100, 200])  # the canvas's and the saved PNG's resolution
def test_no_two_labels_of_the_toy_nationality_projections_overlap(toy_figures, dpi: int) -> None:
    fig = toy_figures["figures/projections"]
    fig.set_dpi(dpi)
    panels = [ax for ax in fig.axes if ax.texts]
    assert len(panels) == 6  # t-SNE and UMAP of layers 0 and 1 and of behaviour
    for ax in panels:
        boxes = label_boxes(ax)
        assert len(boxes) == NATIONS  # t-SNE separates every country: one label each
        assert overlapping_pairs(boxes) == [], ax.get_title()
        frame = ax.get_window_extent(figure_style.renderer(fig))
        assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
        markers = marker_boxes(ax)
        assert len(markers) == NATIONS
        assert [(i, j) for i, b in enumerate(boxes) for j, m in enumerate(markers) if overlap(b, m) > 0] == []
    fig.set_dpi(100)


def test_every_projection_title_names_its_method_layer_and_n(toy_figures) -> None:
    fig = toy_figures["figures/projections"]
    titles = [ax.get_title() for ax in fig.axes if ax.texts]
    n = f"n={NATIONS} identities, {N_EVENTS} events"
    assert titles == [f"{method}, {source}\n{n}" for method in ("t-SNE", "UMAP")
                      for source in ("persona, layer 0", "persona, layer 1", "behaviour")]
    (legend,) = fig.legends  # one, below the grid (six panels leave no spare cell)
    assert [t.get_text() for t in legend.get_texts()] == list(dict.fromkeys(
        get_category("nationality").zone_of.values()))


def test_the_projections_fit_two_columns_and_the_stats_carry_n(toy_figures, tmp_path: Path) -> None:
    projections, stats = toy_figures["figures/projections"], toy_figures["figures/cluster_stats"]
    for fig in (projections, stats):
        assert fig.get_figwidth() <= figure_style.DOUBLE_COLUMN
        png, pdf = save_figure(fig, tmp_path, "figure", dpi=100)
        assert Image.open(png).size[0] <= figure_style.DOUBLE_COLUMN * 100 and pdf.read_bytes()[:4] == b"%PDF"
    assert projections.get_figheight() <= 9.5  # three rows of two panels and a title: one page
    assert (f"n={NATIONS} identities, {ZONES} groups, {N_EVENTS} events, 20 permutations"
            in stats.get_suptitle())


def test_the_study_writes_every_figure_as_png_and_pdf(tmp_path: Path) -> None:
    synthetic_capture_run(tmp_path / "run")
    out = run_study("clusters", [tmp_path / "run"], out=tmp_path / "out", where=WHERE, permutations=10,
                    project="last", progress=False).report.parent
    assert sorted(p.name for p in (out / "figures").iterdir()) == [
        "cluster_stats.pdf", "cluster_stats.png", "projections.pdf", "projections.png"]


def test_label_points_separates_a_crowd_and_merges_coinciding_points() -> None:
    fig = figure_style.new_figure(1, 3)
    ax = fig.subplots()
    crowd = np.stack(np.meshgrid(np.arange(6), np.arange(5)), -1).reshape(-1, 2) * 0.01  # 30 points in a speck
    points = np.vstack([crowd, [[0.025, 0.045]] * 3, [[-1.0, -1.0], [1.0, 1.0]]])
    ax.scatter(points[:, 0], points[:, 1], s=20)
    names = [f"country {i}" for i in range(30)] + ["Japan", "Egypt", "Peru", "low", "high"]
    texts = label_points(ax, points, names)
    assert len(texts) == 33 and "Japan, Egypt, Peru" in [t.get_text() for t in texts]
    assert overlapping_pairs(label_boxes(ax)) == []
    positions = [t.get_position() for t in texts]
    again = figure_style.new_figure(1, 3).subplots()
    again.scatter(points[:, 0], points[:, 1], s=20)
    assert [t.get_position() for t in label_points(again, points, names)] == positions  # deterministic
    assert len(ax.lines) > 0  # labels moved away from the crowd are led back to their points


def test_place_labels_keeps_clear_of_labels_and_markers_and_says_when_it_cannot() -> None:
    anchors = np.array([[50.0, 50.0]] * 1 + [[50.0 + i, 50.0] for i in range(1, 10)])
    sizes = np.tile([30.0, 8.0], (10, 1))
    boxes, overlapping = place_labels(anchors, sizes, (0, 0, 200, 200), marker=3, gap=1)
    assert overlapping == 0
    assert all(not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]) for a, b in combinations(boxes, 2))
    markers = np.hstack([anchors - 3, anchors + 3])
    assert not any(b[0] < m[2] and m[0] < b[2] and b[1] < m[3] and m[1] < b[3] for b in boxes for m in markers)
    _, overlapping = place_labels(anchors, sizes, (0, 0, 40, 20), marker=3, gap=1)
    assert overlapping > 0  # ten labels cannot fit a box that holds one


def test_heatmap_tick_labels_of_a_large_grid_never_overlap() -> None:
    fig = figure_style.new_figure(1, 3.5)
    ax = fig.subplots()
    names = [f"a person from country {i}" for i in range(40)]
    ax.imshow(np.arange(1600.0).reshape(40, 40))
    size = figure_style.heatmap_ticks(ax, names, names)
    assert figure_style.MIN_FONT <= size < figure_style.TICK_SIZE
    fig.draw_without_rendering()
    for axis in (ax.xaxis, ax.yaxis):
        shown = [t for t in axis.get_ticklabels() if t.get_text()]
        assert len(shown) >= 20
        boxes = [t.get_window_extent(figure_style.renderer(fig)) for t in shown]
        assert overlapping_pairs(boxes) == []


def test_n_text_counts_in_words() -> None:
    assert figure_style.n_text(identities=21, events=3) == "n=21 identities, 3 events"
    assert figure_style.n_text(identities=1, events=None, prompt_pairs=1) == "n=1 identity, 1 prompt pair"
    assert figure_style.grid_shape(3) == (2, 2) and figure_style.grid_shape(1) == (1, 1)
