"""Pages a reader of a paper reads: no raw Python value (None, True, False standing for a value) on any study's
report, the options line in words ("trust remote code: no", "dtype: none (the run's)"), the numbers of one printed
column (or a value and its interval) at one precision, and no "what this can show" heading with nothing under it.
The suites' pages are checked in tests/test_report_tables.py with these same rules."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from behavioral.analysis import Analysis, Table
from behavioral.report.formats import cell, cells, column, is_missing
from behavioral.analysis.report import render, unset_meanings
from behavioral.report.blocks import scope
from behavioral.analysis.study import StudyResult, run_study
from behavioral.analysis.studies import get_study, study_names
from interp.patching import gap_report
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.patching import gap_table
from tests.synthetic_worlds import patched_rows

RAW = re.compile(r"\b(?:None|True|False)\b")
# A printed number: its sign, digits (with thousands commas), decimals, exponent and percent sign.
NUMBER = re.compile(r"[-+−]?\d[\d,]*(?:\.(?P<decimals>\d+))?(?P<exponent>e[-+]\d+)?(?P<percent>%?)")
# Each study on the pinned tiny run at its smallest: the options a test of the study already uses.
STUDIES = {
    "clusters": {"where": ("category=race", "setting=P0S0T0"), "permutations": 5, "project": "last"},
    "rsa": {"where": ("category=race",), "split_by": "category", "permutations": 10, "no_lexical": True,
            "control": "none", "layers": "last"},
    "probe": {"where": ("category=religion",), "targets": ("ingroup",), "splits": ("cell",), "layers": "last",
              "cv": 2, "n_shuffles": 0, "matchings": 5},
    "atlas": {"permutations": 5},
    "attribution": {"where": ("category=religion",), "modes": ("swap",), "positions": "slot", "validate": 1,
                    "device": "cpu"},
    "steer": {"where": ("category=religion", "setting=P0S0T0"), "layers": "last", "coefs": (0.0, 8.0),
              "unit": True, "test_events": 5, "permutations": 50, "device": "cpu"},
    "patch": {"where": ("category=religion", "setting=P0S0T0"), "limit_events": 4, "layers": "all",
              "layer_step": 1, "device": "cpu"},
}


def raw_values(text: str) -> list[str]:
    """Each raw Python value in `text`, with the words around it."""
    return [text[max(0, m.start() - 40):m.end() + 20] for m in RAW.finditer(text)]


def shape(text: str) -> tuple[str, int, str] | None:
    """How a printed number is written (fixed or exponent notation, its decimals, a percent sign), or None where
    `text` is no number."""
    m = NUMBER.fullmatch(text)
    if m is None:
        return None
    return ("exponent" if m["exponent"] else "fixed", len(m["decimals"] or ""), m["percent"])


def mixed_columns(table: Table) -> dict[str, set]:
    """The printed columns of `table` whose numbers are written in more than one way (p-values, printed in three
    significant digits, and text columns left out), with the ways."""
    headers, rows = table.printed()
    shown = table.shown()
    formats = {table.columns.get(c, c): f for c, f in table.formats.items()}
    mixed = {}
    for k, header in enumerate(headers):
        if formats.get(header) in ("p", "text"):
            continue
        numbers = [row[k] for row, value in zip(rows, shown.iloc[:, k])
                   if isinstance(value, (int, float)) and not isinstance(value, bool) and not is_missing(value)]
        shapes = {shape(text) for text in numbers}
        if len(shapes) > 1:
            mixed[header] = shapes
    return mixed


@pytest.fixture(scope="module", params=list(STUDIES))
def study_page(request, pinned_run, tmp_path_factory) -> StudyResult:
    """A study's output on the pinned tiny run (its report.md, report.html and printed tables)."""
    return run_study(request.param, [pinned_run], out=tmp_path_factory.mktemp(request.param) / "out",
                     progress=False, **STUDIES[request.param])


def test_every_study_is_read_here() -> None:
    assert set(STUDIES) == set(study_names())


def test_no_study_page_prints_a_raw_python_value(study_page) -> None:
    for page in ("report.md", "report.html"):
        assert raw_values((study_page.report.parent / page).read_text()) == [], page


def test_a_study_page_prints_its_options_in_words_an_unset_one_with_its_meaning(study_page) -> None:
    study = get_study(study_page.manifest["study"])
    line = next(line for line in study_page.report.read_text().splitlines() if line.startswith("Analysis options:"))
    options = study_page.manifest["options"]
    meanings = unset_meanings(study.Options(**{k: v for k, v in STUDIES[study.name].items()}))
    for name, value in options.items():
        words = name.replace("_", " ")
        if isinstance(value, bool):
            assert f"{words}: {'yes' if value else 'no'}" in line, name
        elif value is None:
            assert f"{words}: none" + (f" ({meanings[name]})" if name in meanings else "") in line, name
    if "dtype" in options:
        assert "dtype: none (the run's)" in line


def test_the_numbers_of_every_printed_column_of_a_study_share_one_format(study_page) -> None:
    mixed = {name: found for name, table in study_page.printed.items() if (found := mixed_columns(table))}
    assert mixed == {}


def test_a_column_is_printed_at_one_precision() -> None:
    frame = pd.DataFrame({"gap": [-9.1e-06, 0.0123, 0.5], "tiny": [2.91e-05, 0.000195, -0.00071],
                          "zero": [0.0, 1.78e-16, -4.2e-05], "share": [0.5, 0.000012, 1.0]})
    assert cells(frame, {"gap": "signed", "share": "percent"}, digits=2) == [
        ["-0.00", "2.9e-05", "0.0e+00", "50.0%"],
        ["+0.01", "1.9e-04", "1.8e-16", "0.0%"],
        ["+0.50", "-7.1e-04", "-4.2e-05", "100.0%"]]
    assert column([0.25, None, 1e-05]) == ["0.250", "—", "0.000"]
    assert column([1e-05, float("nan"), -2e-04]) == ["1.00e-05", "—", "-2.00e-04"]
    assert cell(0.00002) == "2e-05" and cell(True) == "yes" and cell(False, "text") == "no"


def test_a_value_and_its_interval_are_printed_at_one_precision() -> None:
    row = pd.Series({"gap": -2.0e-04, "gap_low": -3.1e-04, "gap_high": -9.7e-05, "share": 0.25,
                     "share_low": -0.00001, "share_high": 0.5})
    assert gap_report.with_interval(row, "gap", "signed") == "-2.0e-04 [-3.1e-04, -9.7e-05]"
    assert gap_report.with_interval(row, "share", "signed") == "+0.25 [-0.00, +0.50]"


def test_the_gap_table_prints_each_column_at_one_precision() -> None:
    religion = get_category("religion")
    rows = patched_rows({0: 1.0, 1: 0.0}, n_events=4)
    tiny = rows.assign(expected=rows.expected * 1e-05, expected_clean=rows.expected_clean * 1e-05)
    table = gap_table(pd.concat([tiny, tiny.assign(mode="swap")], ignore_index=True), religion)
    table.loc[table["layer"] == 1, "gap_closed_points"] = 0.0123  # one number too large for significant digits
    printed = Table("gap_by_layer", "", table, gap_report.FORMATS, digits=2, columns=gap_report.COLUMNS)
    assert mixed_columns(printed) == {}
    headers, rows = printed.printed()
    closed = [row[headers.index("closed (points)")] for row in rows]
    assert all(shape(text) == ("fixed", 2, "") for text in closed), closed


def test_a_scope_heading_with_nothing_under_it_is_left_out() -> None:
    assert scope([], ["what the run cannot show"]).text == "**Cannot show:**\n- what the run cannot show"
    assert scope(["a reading"], []).text == "**Can show:**\n- a reading"
    assert scope(["a"], ["b"]).text == "**Can show:**\n- a\n\n**Cannot show:**\n- b"


def test_the_options_line_reads_as_words() -> None:
    page = render(Analysis("A title", "A source", unset={"human": "the shipped ratings"}), [],
                  {"allow_partial": False, "human": None, "measure": None, "modes": ("person", "swap"),
                   "trust": True, "bootstrap": 20})
    assert ("Analysis options: allow partial: no; human: none (the shipped ratings); measure: none; modes: person, "
            "swap; trust: yes; bootstrap: 20.") in page
    assert raw_values(page) == []


def test_an_unset_options_meaning_comes_from_its_flags_help() -> None:
    assert unset_meanings(get_study("patch").Options())["dtype"] == "the run's"
    assert unset_meanings(get_study("clusters").Options())["kind"] == "the first span kind of each run's suite"
    assert unset_meanings(None) == {}
