"""The analysis framework every suite shares (behavioral.analysis, behavioral.core.options): one number format, flags
derived from typed options, run naming, and the written files, report and manifest of a declared analysis."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from behavioral.rundir.manifest import MANIFEST, SCHEMA_VERSION
from behavioral.core.files import write_json_atomic
from behavioral.rundir import parts as store
from behavioral.analysis import Analysis, Figure, Section, Table, analyze, cell, markdown, sized_figure
from behavioral.core.options import add_flags, check_bounds, from_flags, option
from behavioral.analysis.output_folder import OutputFolderError
from behavioral.suite.protocol import Suite
from behavioral.suite.registry import get_suite, names, registered

FIELDS = ("group",)


# --- one number format -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, fmt, text", [
    (0.12345, None, "0.123"), (float("nan"), None, "—"), (None, "percent", "—"), (pd.NA, None, "—"),
    (0.4567, "percent", "45.7%"), (-0.031, "points", "-3.1"), (0.031, "points", "+3.1"), (0.000123, "p", "0.000123"),
    (0.0412, "p", "0.0412"), (12345.0, "count", "12,345"), (0.25, "signed", "+0.250"), (0.00002, None, "2e-05"),
    (7, None, "7"), (True, None, "yes"), (False, "text", "no"), ("a Jew", None, "a Jew"),
])
def test_every_number_is_printed_one_way(value, fmt, text):
    assert cell(value, fmt) == text


def test_markdown_prints_each_column_by_its_format_and_rejects_an_unknown_one():
    frame = pd.DataFrame({"run": ["a", "b"], "accuracy": [0.5, np.nan], "p": [0.01, 0.2]})
    assert markdown(frame, {"accuracy": "percent", "p": "p"}).splitlines() == [
        "| run | accuracy | p |", "|---|---|---|", "| a | 50.0% | 0.01 |", "| b | — | 0.2 |"]
    with pytest.raises(ValueError, match="unknown column format 'percentage'; expected one of percent"):
        markdown(frame, {"accuracy": "percentage"})


# --- options declared once ----------------------------------------------------------------------------------------

def _read_upper(text: str) -> str:
    return text.upper()


@dataclasses.dataclass(frozen=True)
class Toy:
    groups: tuple[str, ...] = option(("a", "b", "c"), "groups", name="--group", choices=("a", "b", "c"))
    tags: tuple[str, ...] | None = option(None, "free tags")
    limit: int | None = option(None, "at most N", metavar="N")
    rate: float = option(0.5, "a rate")
    word: str = option("x", "a word read by a function", read=_read_upper)
    strict: bool = option(False, "be strict")
    internal: int = 3  # no flag: set from Python only


def _parse(*argv: str) -> Toy:
    parser = argparse.ArgumentParser()
    add_flags(parser, Toy)
    return from_flags(Toy, parser.parse_args(list(argv)))


def test_flags_come_from_the_dataclass_and_a_flag_left_out_keeps_the_fields_default():
    assert _parse() == Toy()
    got = _parse("--group", "c,a", "--group", "c", "--tags", "p,q", "--limit", "4", "--rate", "0.25", "--word", "hi",
                 "--strict")
    assert got == Toy(groups=("c", "a"), tags=("p", "q"), limit=4, rate=0.25, word="HI", strict=True)
    assert _parse("--group", "all").groups == ("a", "b", "c")
    with pytest.raises(ValueError, match="unknown --group 'd'; expected one of a, b, c or all"):
        _parse("--group", "d")
    parser = argparse.ArgumentParser()
    add_flags(parser, Toy)
    text = parser.format_help()
    assert "a rate (default: 0.5)" in text and "(default: all)" in text and "--internal" not in text


def test_every_suites_run_flags_build_its_default_options():
    from behavioral.cli import commands as cli

    for name in names():
        args = cli._parser(["run", name]).parse_args(["run", name, "--model", "m", "--out", "o"])
        assert get_suite(name).options(args) == get_suite(name).Options()


# --- a declared analysis, written by the framework ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CountOptions:
    scale: float = option(1.0, "multiplies every mean")


class Counting(Suite):
    """A suite whose analysis is a mean per group and run, a comparison table, a figure and a JSON file."""

    name, description, fields = "counting", "test suite", FIELDS
    AnalyzeOptions = CountOptions

    def view(self, rows, config):
        return rows.assign(measure=rows["value"] * 2)

    def analyze(self, runs, options):
        means = pd.concat([r.rows.groupby("group", as_index=False)["measure"].mean().assign(run=r.name)
                           for r in runs])[["run", "group", "measure"]]
        means["measure"] *= options.scale
        fig = sized_figure(2, 2)
        fig.subplots().bar(range(len(means)), means["measure"])
        return Analysis("Counting", "A test suite.", [
            Section("Means", "per group", (Table("means", "Mean per run and group", means, {"measure": "percent"}),),
                    (Figure("figures/means", "means", fig),))], notes=["a note"], json={"totals.json": {"n": 3}},
            record={"extra": 1})


def _run(run_dir: Path, values: list[float], model: str = "/models/alpha") -> Path:
    rows = [{"unit_id": f"g|{i}", "item_id": str(i), "sample": 0, "response": "x", "answer": "1", "value": v,
             "refused": False, "truncated": False, "score_answer": None, "score_value": np.nan, "expected": np.nan,
             "valid_mass": np.nan, "start_mass": np.nan, "probs": None, "group": "g" if i % 2 else "h"}
            for i, v in enumerate(values)]
    store.write_part(run_dir, "part", rows, store.result_schema(FIELDS))
    config = {"suite": "counting", "schema": SCHEMA_VERSION, "model": model, "mode": "generate",
              "items_sha256": "cafe"}
    write_json_atomic(run_dir / MANIFEST, {"config": config, "plan": {"units": len(rows),
                                                                                "rows": len(rows)},
                                                       "provenance": {"git_commit": "abc", "device": "cpu"},
                                                       "seals": 1})  # its part is sealed, as a run's are
    return run_dir


def test_a_declared_analysis_is_written_with_its_report_and_manifest(tmp_path):
    a = _run(tmp_path / "a", [0.1, 0.2, 0.3, 0.4])
    b = _run(tmp_path / "b", [0.5, 0.5, 0.5, 0.5])
    with registered(Counting()):
        report = analyze([a, b], tmp_path / "out", CountOptions(scale=10.0))
    out = tmp_path / "out"
    means = pd.read_csv(out / "means.csv")
    assert list(means.run) == ["alpha (a)", "alpha (a)", "alpha (b)", "alpha (b)"] and list(means.group) == list("ghgh")
    assert means.measure.tolist() == pytest.approx([6.0, 4.0, 10.0, 10.0])  # the view doubled, the option scaled
    text = report.read_text()
    assert "| alpha (a) | g | 600.0% |" in text and "- a note" in text and "![means](figures/means.png)" in text
    assert "**alpha (a)**" in text and "items_sha256 `cafe`" in text and "scale: 10.0" in text
    assert "created" not in text and "None" not in text  # a date the run did not record is left out, never "None"
    assert (out / "figures" / "means.png").stat().st_size > 0 and json.loads((out / "totals.json").read_text()) == \
        {"n": 3}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["suite"] == "counting" and manifest["analysis"] == {"scale": 10.0, "allow_partial": False}
    assert manifest["extra"] == 1 and set(manifest["runs"]) == {"alpha (a)", "alpha (b)"}
    assert manifest["runs"]["alpha (b)"]["config"]["model"] == "/models/alpha"
    assert sorted(manifest["output"]["files"]) == sorted(
        ["means.csv", "means.md", "figures/means.png", "figures/means.pdf", "totals.json", "report.md", "report.html"])
    assert "counting" not in names()  # the test's suite did not outlive the test


def test_runs_are_named_by_their_models_or_by_names_and_a_bad_out_is_refused(tmp_path):
    a = _run(tmp_path / "a", [0.1, 0.2], model="/models/alpha")
    b = _run(tmp_path / "b", [0.3, 0.4], model="org/beta")
    with registered(Counting()):
        analyze([a, b], tmp_path / "out")
        assert set(pd.read_csv(tmp_path / "out" / "means.csv")["run"]) == {"alpha", "org/beta"}
        analyze([a, b], tmp_path / "out", names=["first", "second"])  # replaces its own earlier output
        assert set(pd.read_csv(tmp_path / "out" / "means.csv")["run"]) == {"first", "second"}
        with pytest.raises(ValueError, match="run .* is given twice"):
            analyze([a, a], tmp_path / "twice")
        with pytest.raises(OutputFolderError):
            analyze([a], a)  # a run directory is never an output folder
    assert not (tmp_path / "twice").exists()


@dataclasses.dataclass(frozen=True)
class _Counted:
    resamples: int = option(100, "resamples", minimum=0)
    limit: int | None = option(None, "limit", minimum=1)

    def __post_init__(self):
        check_bounds(self)


def test_a_declared_minimum_is_checked_with_the_flag_name():
    assert _Counted(resamples=0).resamples == 0 and _Counted(limit=None).limit is None  # None: the option is unset
    with pytest.raises(ValueError, match=r"^--resamples must be at least 0, got -1$"):
        _Counted(resamples=-1)
    with pytest.raises(ValueError, match=r"^--limit must be at least 1, got 0$"):
        _Counted(limit=0)
