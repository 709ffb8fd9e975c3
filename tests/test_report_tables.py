"""Report tables a person reads: every suite's printed tables hold one quantity per column in report.md and
report.html alike (the CSV's own columns, no cell packing a value with its interval and p), the numbers of a column
at one precision, each caption is one short sentence and the column definitions stand in "How to read the tables";
each suite's headline rows carry the warnings the suite declares (behavioral.analysis.caveats); and no page prints a
raw Python value, an option left unset without what that means, or a file's name where the paper's title belongs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from behavioral.analysis import analyze, read_runs
from behavioral.analysis.caveats import few_parsed, joined, low_mass, one_answer, refused
from behavioral.report.formats import pipe_table
from behavioral.analysis.report import unset_meanings
from behavioral.suite.registry import get_suite
from tests.test_html_report import Page, markdown_tables
from tests.test_readable_pages import mixed_columns, raw_values

PINS = Path(__file__).parent / "data" / "analysis_pins"
SUITES = ("giebench", "intergroup", "isear", "jaem", "scm")
FLAGS = {"intergroup": {"measure": "expected_intensity", "permutations": 200}}
# A number standing alone in a cell (not a digit inside a name such as P0S1T0 or smollm2-135m).
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w])")
MAX_CAPTION_WORDS = 25


@pytest.fixture(scope="module", params=SUITES)
def written(request, tmp_path_factory):
    """(suite, its Analysis, the report folder) of the suite's pinned run analyzed twice, as runs a and b."""
    suite, tmp = request.param, tmp_path_factory.mktemp(request.param)
    dirs = [shutil.copytree(PINS / suite / "run", tmp / name) for name in ("a", "b")]
    declared = get_suite(suite)
    options = declared.AnalyzeOptions(**FLAGS.get(suite, {}))
    report = analyze(dirs, tmp / "analysis", options, names=["a", "b"])
    return suite, declared.analyze(read_runs(declared, dirs, names=["a", "b"]), options), report.parent


def _printed(analysis) -> list:
    return [t for section in analysis.sections for t in section.tables]


def test_every_printed_column_holds_one_quantity_in_markdown_and_html(written):
    suite, analysis, folder = written
    tables = _printed(analysis)
    markdown, html = markdown_tables((folder / "report.md").read_text()), Page((folder / "report.html").read_text())
    assert len(markdown) == len(html.tables) == len(tables) > 0
    for table, md, page in zip(tables, markdown, html.tables):
        headers, rows = table.printed()
        assert md == page == [headers, *rows], table.name  # the page prints the Markdown's cells
        if table.columns:  # a chosen column is one of the CSV's, under its header
            assert set(table.columns) <= set(table.frame.columns), table.name
        text = {table.columns.get(c, c) for c, f in table.formats.items() if f == "text"}
        for k, header in enumerate(headers):
            if header in text:
                continue
            packed = [row[k] for row in rows if len(NUMBER.findall(row[k])) > 1]
            assert not packed, f"{suite} {table.name} column {header!r} packs several numbers: {packed[:2]}"


def test_each_caption_is_one_short_sentence_and_its_definitions_are_under_how_to_read(written):
    suite, analysis, folder = written
    report = (folder / "report.md").read_text()
    for table in _printed(analysis):
        caption = f"{table.title} {table.note}".strip()
        assert len(caption.split()) <= MAX_CAPTION_WORDS and ";" not in caption, (suite, table.name, caption)
        assert not re.search(r"\.\s+\S", caption), (suite, table.name, caption)  # a second sentence
        for header, text in table.definitions.items():
            assert f"- `{header}`: {text}" in report, (suite, table.name, header)
    if any(t.definitions for t in _printed(analysis)):
        how = report.index("## How to read the tables")
        assert report.index("## Headline") < how < report.index("## Files")


def test_no_suite_page_prints_a_raw_python_value(written):
    suite, _, folder = written
    for page in ("report.md", "report.html"):
        assert raw_values((folder / page).read_text()) == [], (suite, page)


def test_the_numbers_of_every_printed_column_share_one_format(written):
    suite, analysis, _ = written
    assert {table.name: found for table in analysis.tables() if (found := mixed_columns(table))} == {}, suite


def test_an_option_left_unset_is_printed_with_what_that_means(written):
    suite, _, folder = written
    report = (folder / "report.md").read_text()
    options = get_suite(suite).AnalyzeOptions(**FLAGS.get(suite, {}))
    unset = {name: meaning for name, meaning in unset_meanings(options).items() if getattr(options, name) is None}
    assert unset or suite not in ("intergroup", "jaem", "scm")  # round_cells, vad_lexicon and era_model, human
    for name, meaning in unset.items():
        assert f"{name.replace('_', ' ')}: none ({meaning})" in report, (suite, name)


def test_the_source_names_the_seed_paper_not_its_file(written):
    suite, analysis, folder = written
    source = (folder / "report.md").read_text().splitlines()[2]
    assert source == analysis.source and source.startswith("Seed 00"), suite
    assert not re.search(r"\d{3}_[0-9a-f]{16}\.txt", source), suite


def test_intergroup_table2_prints_delta_its_null_interval_and_the_gap_each_in_its_own_column(tmp_path):
    dirs = [shutil.copytree(PINS / "intergroup" / "run", tmp_path / "a")]
    report = analyze(dirs, tmp_path / "analysis", get_suite("intergroup").AnalyzeOptions(**FLAGS["intergroup"]))
    csv = pd.read_csv(report.parent / "table2_delta.csv")
    table = next(t for t in markdown_tables(report.read_text()) if "δ" in t[0])
    header = table[0]
    assert header[:8] == ["run", "category", "setting", "measure", "events", "δ", "null low", "null high"]
    for row, (_, expected) in zip(table[1:], csv.iterrows()):
        got = dict(zip(header, row))
        assert float(got["δ"]) == pytest.approx(expected["delta"], abs=5e-4)
        assert float(got["null low"]) == pytest.approx(expected["ci_low"], abs=5e-4)
        assert float(got["gap (points)"]) == pytest.approx(expected["gap_points"], abs=5e-4)
        assert int(got["events"]) == expected["n_events"]


def test_the_caveats_warn_at_their_declared_thresholds_with_their_numbers():
    assert low_mass(0.094, 0.0, "numbers") == \
        "low answer mass: 9.4% of the first answer token's probability on numbers (0.0% of prompts above one half)"
    assert low_mass(0.5, None, "numbers") == "" and low_mass(float("nan"), None, "numbers") == ""
    assert few_parsed(0.3, "a rating") == "few parsable replies: 30.0% hold a rating" and few_parsed(0.5, "x") == ""
    assert refused(0.25, "events") == "many refusals: 25.0% of events refused or excluded" and refused(0.2, "x") == ""
    assert one_answer(["A"] * 16, "CE samples") == "one answer: 'A' for 16 of 16 CE samples"
    assert one_answer(["A"] * 9 + ["B"], "items") == "one answer: 'A' for 9 of 10 items"
    assert one_answer(["A"] * 8 + ["B", "C"]) == ""  # 80%: below the threshold
    assert one_answer(["A"] * 4) == ""  # too few items to call it every item's answer
    assert one_answer(["A"] * 5 + [None] * 10) == "one answer: 'A' for 5 of 5 items"  # missing answers not counted
    assert joined(["", "a", "", "b"]) == "a; b"


def test_a_table_cell_cannot_split_or_end_a_markdown_row():
    text = pipe_table(["a|b", "c"], [["x\ny | z", "1"]])
    assert text.splitlines() == ["| `a\\|b` | c |", "|---|---|", "| `x\\x0ay \\| z` | 1 |"]


def test_a_partial_runs_headline_rows_say_so_before_the_suites_own_warning():
    from types import SimpleNamespace

    from behavioral.analysis.headline import Headline, headline_section
    from behavioral.rundir.run import Completeness

    rows = [Headline("a", "gap", 1.0, 0.5, 1.5, "t", 3, "events", warning="low answer mass: 9.4%"),
            Headline("b", "gap", 1.0, 0.5, 1.5, "t", 3, "events")]
    runs = [SimpleNamespace(name="a", completeness=Completeness(3, 30, 8, 80)),
            SimpleNamespace(name="b", completeness=Completeness(8, 80, 8, 80))]
    frame = headline_section(rows, runs).tables[0].frame
    assert frame["warning"].tolist() == [
        "PARTIAL run: 3 of 8 work units (30 of 80 rows) finished; low answer mass: 9.4%", ""]
