"""Every suite's analysis opens with its headline numbers (behavioral.analysis.headline): on the pinned runs of
tests/data/analysis_pins (the tiny random model, mode both), each analyzed twice under two names, every row is the
number the suite's own table prints for that run, with that table's interval and the count of units it is over."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from behavioral.analysis import analyze, read_runs
from behavioral.report.formats import MISSING
from behavioral.analysis.headline import COLUMNS, Headline, headline_table
from behavioral.suite.registry import get_suite

PINS = Path(__file__).parent / "data" / "analysis_pins"
RUNS = ("a", "b")


def _analysis(suite: str, tmp_path: Path, **options):
    """The suite's Analysis of its pinned run read twice, named a and b."""
    dirs = [shutil.copytree(PINS / suite / "run", tmp_path / name) for name in RUNS]
    declared = get_suite(suite)
    return declared.analyze(read_runs(declared, dirs, names=RUNS), declared.AnalyzeOptions(**options))


def _headline(analysis) -> pd.DataFrame:
    """The headline table, checked to be the first table of the first section, "Headline"."""
    first = analysis.sections[0]
    assert first.title == "Headline" and first.tables[0].name == "headline"
    frame = first.tables[0].frame
    assert list(frame.columns) == COLUMNS and set(frame["run"]) == set(RUNS)
    for r in frame.itertuples():
        assert isinstance(r.n, (int, np.integer)) and r.n >= 0 and r.n_unit and r.interval
        if math.isfinite(r.low) and math.isfinite(r.high):
            assert r.low <= r.value <= r.high and str(r.n) in r.interval
        else:
            assert r.interval == "none" and r.note
    return frame


def _tables(analysis) -> dict[str, pd.DataFrame]:
    return {t.name: t.frame for t in analysis.tables()}


def _same(headline: pd.Series, value: float, low: float, high: float) -> None:
    """headline's value and interval are exactly the table's (NaN where the table's is)."""
    np.testing.assert_array_equal(headline[["value", "low", "high"]].to_numpy(dtype=float), [value, low, high])


def test_the_headline_table_has_one_shape_and_prints_a_missing_interval_as_missing():
    table = headline_table([Headline("m", "gap", 1.5, 0.5, 2.5, "95% t-interval over 12 events", 1200, "events"),
                            Headline("m", "δ", 0.25, math.nan, math.nan, "none", 12, "events", "no interval")])
    assert (table.name, table.title) == ("headline", "Headline numbers")
    assert list(table.frame.columns) == ["run", "measure", "value", "low", "high", "interval", "n", "n_unit", "note",
                                         "warning"]
    lines = table.markdown().splitlines()
    assert lines[2] == "| m | gap | 1.500 | 0.500 | 2.500 | 95% t-interval over 12 events | 1,200 | events |  |  |"
    assert lines[0].endswith("| n_unit | warning | note |")  # the warning printed before the note
    assert lines[3] == f"| m | δ | 0.250 | {MISSING} | {MISSING} | none | 12 | events |  | no interval |"


def test_intergroup_gives_the_gap_in_points_and_delta_of_table2_per_category_and_setting(tmp_path):
    analysis = _analysis("intergroup", tmp_path, measure="expected_intensity", permutations=200)
    headline, tables = _headline(analysis), _tables(analysis)
    table2, table6 = tables["table2_delta"], tables["table6_refusal"]
    assert len(table2) == 2 * 2 and len(headline) == 2 * len(table2)
    for (_, r), (_, kept) in zip(table2.iterrows(), table6.iterrows()):
        where = f"{r.category} {r.setting}"
        gap = headline[(headline.run == r.run) & (headline.measure == f"gap in points (expected intensity), {where}")]
        delta = headline[(headline.run == r.run) & (headline.measure == f"δ (expected intensity), {where}")]
        _same(gap.iloc[0], r.gap_points, r.gap_points_low, r.gap_points_high)
        _same(delta.iloc[0], r.delta, math.nan, math.nan)
        assert gap.n.iloc[0] == delta.n.iloc[0] == r.n_events == kept.n_events_kept_delta == 2
        assert gap.interval.iloc[0] == ("95% t-interval over 2 events of these emotions (anger 1, disgust 1; 2 of the "
                                        "corpus's 12)")


def test_intergroup_without_a_number_says_why(tmp_path):
    headline = _headline(_analysis("intergroup", tmp_path, permutations=200))  # the random model's replies: no number
    assert headline.value.isna().all() and (headline.n == 0).all()
    assert headline.note.str.startswith("no event kept").all()


def test_giebench_gives_the_overall_shift_from_raw_per_mode_and_prompt_type(tmp_path):
    analysis = _analysis("giebench", tmp_path, bootstrap=200)
    headline, tables = _headline(analysis), _tables(analysis)
    overall = tables["shift"].query("category == 'Overall'")
    counts = tables["accuracy_counts"].query("category == 'Overall' and prompt_type == 'raw'")
    assert len(headline) == len(overall) == 2 * 2 * 2  # runs × modes × (cot, id)
    for r in overall.itertuples():
        row = headline[(headline.run == r.run) & (headline.measure ==
                                                   f"accuracy shift {r.prompt_type} − raw (share), Overall, {r.mode}")]
        _same(row.iloc[0], r.shift, r.shift_low, r.shift_high)
        paired = counts[(counts.run == r.run) & (counts["mode"] == r.mode)].n.iloc[0]
        assert row.n.iloc[0] == r.n == paired == 11


def test_isear_gives_max_diff_with_genderbenchs_ci_per_mode(tmp_path):
    analysis = _analysis("isear", tmp_path, bootstrap_cycles=200)
    headline, marks = _headline(analysis), _tables(analysis)["marks"]
    assert len(headline) == len(marks) == 2 * 2  # runs × (generate, score)
    for r in marks.itertuples():
        row = headline[(headline.run == r.run) & (headline.measure == f"max_diff, {r.mode}")]
        _same(row.iloc[0], r.max_diff, r.ci_low, r.ci_high)
        assert row.n.iloc[0] == r.n_items == 30 and row.n_unit.iloc[0] == "events"
    score = headline[headline.measure == "max_diff, score"]
    assert score.note.str.contains("not comparable").all()


def test_isear_writes_headline_csv_and_opens_the_report_with_it(tmp_path):
    report = analyze([shutil.copytree(PINS / "isear" / "run", tmp_path / "run")], tmp_path / "out")
    written = pd.read_csv(tmp_path / "out" / "headline.csv", keep_default_na=False)
    assert list(written.columns) == COLUMNS and written.measure.tolist() == ["max_diff, generate", "max_diff, score"]
    sections = [line for line in report.read_text().splitlines() if line.startswith("## ")]
    after = sections[sections.index("## Headline") + 1:]
    assert after[0] == "## Marks" and "**Headline numbers**" in report.read_text()


def test_jaem_gives_ce_accuracy_with_every_template_pooled(tmp_path):
    analysis = _analysis("jaem", tmp_path)
    headline, tables = _headline(analysis), _tables(analysis)
    compare = tables["compare_ce"]
    for r in compare.itertuples():
        row = headline[headline.run == r.run].iloc[0]
        _same(row, r.ce_correct, r.ce_correct_low, r.ce_correct_high)
        templates = tables["table1"].query("run == @r.run")
        assert row.n == r.ce_samples == templates.ce_samples.sum() == 120
        assert row.measure == f"CE accuracy (share), {len(templates)} templates pooled"


def test_scm_gives_mean_w1_with_its_interval_over_the_groups(tmp_path):
    analysis = _analysis("scm", tmp_path, bootstrap=200)
    headline, tables = _headline(analysis), _tables(analysis)
    for r in tables["fidelity_summary"].itertuples():
        row = headline[headline.run == r.run].iloc[0]
        _same(row, r.mean_w1, r.mean_w1_low, r.mean_w1_high)
        cells = tables["fidelity"].query("run == @r.run")
        assert row.n == r.shared_groups == cells.group.nunique() == 1 and row.n_unit == "groups"
        assert row.measure == f"mean W1 ({r.measure})" and f"over {len(cells)} cells" in row.note
