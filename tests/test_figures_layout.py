"""Figures as a journal prints them, measured: the clusters study's projections of the toy nationality run (21
countries, 6 events) have no two point labels overlapping (their rendered text boxes), no label on a marker, n in
every title and a width of two columns at most; label_points on adversarial points; heatmap tick labels on a large
grid in one column; every figure written as PNG and PDF. The scm fidelity figures (a run of the tiny model whose
competence trait the humans never rated, and planted outliers around the baseline) and the patch study's gap
figure (the pinned run, two modes): no label on a label, a line or the frame, every outlier named, every panel asked
for holding data or saying why, the modes' error bars apart, n once in a title, no text below MIN_FONT."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox
from PIL import Image

from behavioral.analysis import figure_style
from behavioral.analysis import read_runs
from behavioral.analysis.study import read_study_runs, run_study
from behavioral.analysis.figure_files import LEADER, label_points, place_labels, save_figure
from behavioral.suite.registry import get_suite
from behavioral.analysis.studies import get_study
from behavioral.runner.run import RunConfig, run
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.scm import figures as scm_figures
from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.results import HUMAN, Results, compute
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


# --- the scm fidelity figures and the patch study's gap figure ------------------------------------------------------

def texts_of(fig: Figure) -> list:
    """Every piece of text the figure draws (titles, tick labels, axis labels, legends, captions, labels)."""
    return [t for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
            if t.get_visible() and t.get_text().strip()]


def segments(ax: Axes) -> list[np.ndarray]:
    """Each line drawn on `ax` (reference lines, whiskers, boxes, error bars; not a label's leader) as its points in
    display coordinates."""
    lines = [line.get_transform().transform(np.column_stack(line.get_data(orig=False)).astype(float))
             for line in ax.lines if line.get_linestyle() != "None" and line.get_gid() != LEADER]
    lines += [c.get_transform().transform(np.asarray(seg, dtype=float)) for c in ax.collections
              if hasattr(c, "get_segments") for seg in c.get_segments()]
    return [points for points in lines if len(points) > 1]


def crosses(box: Bbox, points: np.ndarray) -> bool:
    """Whether the polyline through `points` passes through `box` (sampled every tenth of a pixel)."""
    for a, b in zip(points[:-1], points[1:]):
        steps = int(np.hypot(*(b - a)) * 10) + 2
        xy = a + np.linspace(0, 1, steps)[:, None] * (b - a)
        if ((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)).any():
            return True
    return False


def assert_labels_clear(ax: Axes) -> None:
    """No text drawn inside `ax` overlaps another, a line, or the frame (its spine's width included)."""
    fig = ax.figure
    boxes = label_boxes(ax)
    assert overlapping_pairs(boxes) == [], ax.get_title()
    lines = segments(ax)
    on_lines = [(t.get_text(), k) for t, box in zip(ax.texts, boxes) for k, line in enumerate(lines)
                if crosses(box, line)]
    assert on_lines == [], ax.get_title()
    spine = ax.spines["left"].get_linewidth() * fig.dpi / 72
    frame = ax.get_window_extent(figure_style.renderer(fig)).padded(-spine)
    assert [t.get_text() for t, b in zip(ax.texts, boxes)
            if not (frame.x0 < b.x0 and b.x1 < frame.x1 and frame.y0 < b.y0 and b.y1 < frame.y1)] == [], \
        ax.get_title()


def assert_readable(fig: Figure) -> None:
    """At the canvas's and the saved PNG's resolution, every panel's labels are clear (assert_labels_clear) and no
    text is smaller than MIN_FONT."""
    for dpi in (100, 200):
        fig.set_dpi(dpi)
        for ax in fig.axes:
            assert_labels_clear(ax)
    fig.set_dpi(100)
    assert min(t.get_fontsize() for t in texts_of(fig)) >= figure_style.MIN_FONT


@pytest.fixture(scope="module")
def scm_results(tmp_path_factory, long_model_dir) -> Results:
    """A score run of the tiny model on the U.S. Stereotypes groups rating warm and competent (a trait the shipped
    human ratings do not rate), compared with those ratings."""
    suite = get_suite("scm")
    options = suite.Options(groups="us-stereotypes", traits=("warm", "competent"), templates=("f01",))
    run_dir = run(RunConfig("scm", str(long_model_dir), options, mode="score", device="cpu", dtype="fp32"),
                  tmp_path_factory.mktemp("scm") / "run", progress=False)
    return compute(read_runs(suite, [run_dir]))


def planted_scm_results() -> Results:
    """Fidelity of two runs on the seed's 50 groups: a seeded spread of W1 with three high outliers close together
    (run a also a low one), the warmth baseline planted on run b's most faithful group, the end of its lower
    whisker; run b rated a competence trait no human rated (competent), so its competence box is missing."""
    names = [g.name for g in GROUPS["seed"]]
    rng = np.random.default_rng(0)
    rows = []
    for run_name, planted in (("model a", [1.50, 1.52, 1.55, 0.02]), ("model b", [1.50, 1.52, 1.55])):
        for dimension, trait in (("warmth", "warm"), ("competence", "confident")):
            w1 = 0.45 + 0.08 * rng.standard_normal(len(names))
            w1[:len(planted)] = planted  # young men, young women, old men high; old women low
            if run_name == "model a" or dimension == "warmth":
                rows += [{"run": run_name, "group": g, "trait": trait, "dimension": dimension, "attribute": "age",
                          "w1": float(w)} for g, w in zip(names, w1)]
    fidelity = pd.DataFrame(rows)
    b = fidelity[(fidelity.run == "model b") & (fidelity.dimension == "warmth")].w1
    cells = {"groups": len(names), "cells": 2 * len(names)}
    return Results("seed", ["model a", "model b"], {"model a": "score", "model b": "score"},
                   {"source": "planted", "sha256": "0" * 64, "rows": 0}, fidelity, pd.DataFrame(), pd.DataFrame(),
                   pd.DataFrame(), pd.DataFrame(), baseline={"warmth": float(b.min()), "competence": 0.45},
                   rated={HUMAN: cells | {"warmth": ["warm"], "competence": ["confident"]},
                          "model a": cells | {"warmth": ["warm"], "competence": ["confident"]},
                          "model b": cells | {"warmth": ["warm"], "competence": ["competent"]}})


def outliers(ax: Axes) -> list[float]:
    """The W1 of the outliers a box plot draws (its flier markers)."""
    return [float(y) for line in ax.lines if line.get_linestyle() == "None" and line.get_gid() != LEADER
            for y in line.get_ydata()]


def test_the_scm_fidelity_figure_names_every_outlier_clear_of_lines_labels_and_frame() -> None:
    results = planted_scm_results()
    fig = scm_figures.fig4_fidelity(results)
    warmth, competence = fig.axes
    assert_readable(fig)
    for ax, dimension in ((warmth, "warmth"), (competence, "competence")):
        part = results.fidelity[results.fidelity.dimension == dimension]
        named = {t.get_text() for t in ax.texts}
        flagged = set(part[part.w1.isin(outliers(ax))].group)
        assert len(flagged) >= 4 and flagged <= named, dimension  # the three high groups and run a's low one
        for _, s in part.groupby("run"):
            assert {s.loc[s.w1.idxmax(), "group"], s.loc[s.w1.idxmin(), "group"]} <= named
    assert [t.get_text() for t in competence.get_xticklabels()] == ["model a", "model b\n(no W1)"]
    assert min(t.get_fontsize() for t in warmth.texts) >= figure_style.FONT_SIZE  # a legible label, not crowded


def test_a_fidelity_panel_without_w1_says_why_and_every_other_panel_has_data(scm_results) -> None:
    fig = scm_figures.fig4_fidelity(scm_results)
    warmth, competence = fig.axes
    assert_readable(fig)
    assert warmth.get_title() == "warmth\nn=16 groups per run" and len(warmth.lines) > 0
    [why] = [t.get_text().replace("\n", " ") for t in competence.texts]
    assert competence.get_title() == "competence\nn=0 groups per run"
    assert why == ("No W1 on competence: no competence trait is rated both by the humans (confident, competitive) "
                   f"and by the runs ({scm_results.runs[0]}: competent).")
    traits = scm_figures.fig5_traits(scm_results)
    assert_readable(traits)
    [ax] = traits.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["competent", "warm"]
    assert [t.get_text() for t in ax.texts] == ["no human rating"]


@pytest.fixture(scope="module")
def patch_figure(pinned_run, tmp_path_factory) -> Figure:
    """The patch study's gap figure on the pinned run: two modes, both layers, two events."""
    study = get_study("patch")
    options = study.Options(where=("category=religion", "setting=P0S1T0"), limit_events=2, layers="all",
                            layer_step=1, sweep_events=0, device="cpu")
    analysis = study.analyze(read_study_runs([pinned_run]), options, tmp_path_factory.mktemp("patch"),
                             progress=False)
    return {f.name: f.figure for f in analysis.figures()}["figures/gap_by_layer"]


def test_the_patch_figure_names_its_events_once_and_sets_the_modes_error_bars_apart(patch_figure) -> None:
    [ax] = patch_figure.axes
    assert_readable(patch_figure)
    title = ax.get_title()
    assert title.count("events") == 1 and title.endswith("n=2 events, 50 prompts per point")
    bars = [np.column_stack(c.lines[0].get_data()) for c in ax.containers]
    assert len(bars) == 2 and all(len(b) == 2 for b in bars)  # person and swap at layers 0 and 1
    x_person, x_swap = (ax.transData.transform(b)[:, 0] for b in bars)
    caps = 2 * 2 * patch_figure.dpi / 72  # a cap is twice its capsize wide (2 points)
    assert (np.abs(x_person - x_swap) > caps).all()  # no interval hides the other's
    assert [t.get_text() for t in ax.get_xticklabels() if t.get_text()] == ["0", "1"]  # the layers, not offsets
