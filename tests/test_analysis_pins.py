"""Every number each suite's analysis printed before the analysis framework is still printed, in its own cell: the
pinned run directories in tests/data/analysis_pins/<suite>/run (mode both, the tiny random model) were analyzed at
commit 6f0bbaf into .../before (its CSV and JSON files) with the flags in FLAGS; today's `empathy-gap analyze` of the
same runs with the same flags must write each of those numbers at the same place: in a table, the cell (table file,
row key, column) named by TABLES; in a JSON file, the value at the path named by JSONS."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from behavioral.cli import commands as cli
from behavioral.report.formats import finite_number

PINS = Path(__file__).parent / "data" / "analysis_pins"
SUITES = sorted(p.name for p in PINS.iterdir() if p.is_dir())
# The analysis flags of each pin (intergroup: the expected intensity, as the generated replies of a random model
# hold no number and every δ would be n/a).
FLAGS = {"intergroup": ["--measure", "expected_intensity"]}
# Where each table of the analysis before the framework is written today: before file -> (today's file, the columns
# that name a row). Each before row is the one today's row with the same key (a new column such as `measure` or the
# run's label, `run` today and `model` or `run` before, is not part of it); every other column is compared cell by cell.
TABLES: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "giebench": {
        "accuracy.csv": ("accuracy.csv", ("mode", "prompt_type")),
        "accuracy_paper.csv": ("accuracy_paper.csv", ("mode", "prompt_type")),
        "shift.csv": ("shift.csv", ("mode", "prompt_type", "category")),
        "swap.csv": ("swap.csv", ("mode", "s_i", "s_j")),
    },
    "intergroup": {
        "matrices/religion_P0S0T0.csv": ("matrices/religion_P0S0T0.csv", ("perceiver", "experiencer")),
        "matrices/religion_P0S1T0.csv": ("matrices/religion_P0S1T0.csv", ("perceiver", "experiencer")),
        "numeric_rate.csv": ("numeric_rate.csv", ("category", "setting")),
        "table2_delta.csv": ("table2_delta.csv", ("category", "setting")),
        "table3_mean_std.csv": ("table3_mean_std.csv", ("category", "setting")),
        "table6_refusal.csv": ("table6_refusal.csv", ("category", "setting")),
        "table7_min_max.csv": ("table7_min_max.csv", ("category", "setting")),
    },
    "isear": {
        "emotion_by_gender.csv": ("emotion_by_gender.csv", ("mode", "emotion", "gender")),
    },
    "jaem": {
        "attributes_model.csv": ("attributes.csv", ("metric", "attribute", "value")),
        "comparisons.csv": ("template_pairs.csv", ("a", "b", "metric")),  # every before row is kind templates
        "omnibus_model.csv": ("omnibus.csv", ("metric", "attribute")),
        "samples_model.csv": ("samples.csv", ("sample_id",)),
        "table1.csv": ("table1.csv", ("template",)),
    },
    "scm": {
        "agreement.csv": ("agreement.csv", ("by", "level")),
        "fidelity.csv": ("fidelity.csv", ("group", "trait", "dimension", "attribute")),
        "fpr.csv": ("fpr.csv", ("attribute",)),
        "parse_rates.csv": ("parse_rates.csv", ("group",)),
        "quadrants.csv": ("quadrants.csv", ("source", "cells", "group")),
        "table3_fpr.csv": ("table3_fpr.csv", ("attribute",)),
    },
}
# JSON files: before file -> (today's file, the path today of a value's path before). Today's JSON files key each
# run's part by the run's label.
JSONS: dict[str, dict[str, tuple[str, Callable[[tuple], tuple]]]] = {
    "isear": {"metrics.json": ("metrics.json", lambda path: ("model", *path))},
    "scm": {"summary.json": ("summary.json",
                             lambda path: ("runs", *path[1:]) if path[:1] == ("models",) else path)},
}
# Cells a bug fix changed on purpose, by suite: (before file, row key, column) -> why. None today.
CHANGED: dict[str, dict[tuple[str, tuple, str], str]] = {}




def _decimals(value: float) -> int | None:
    """The decimals `value` was printed with, where it was rounded to at most 6 (else None: compared to 9 digits)."""
    text = repr(value)
    decimals = None if "e" in text else len(text.split(".")[1]) if "." in text else 0
    return decimals if decimals is not None and decimals <= 6 else None


def _same(pinned: float, written: float | None, decimals: int | None) -> bool:
    """`written` is `pinned` to 9 significant digits, after rounding to `decimals` where the pin was printed rounded
    (some CSVs before held rounded numbers; today's full-precision cell must round to them)."""
    if written is None:
        return False
    if decimals is not None:
        written = round(written, decimals) + 0.0
    return f"{written:.9g}" == f"{pinned:.9g}"


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _table_cells(suite: str, before: Path, after: Path) -> Iterator[tuple[tuple, float, float | None, int | None]]:
    """((before file, row key, column), pinned value, the value in today's cell, the decimals it was printed with) of
    every finite number of the suite's pinned tables."""
    for name, (today, keys) in TABLES.get(suite, {}).items():
        pinned, written = _read(before / name), _read(after / today)
        assert set(keys) <= set(pinned.columns) and set(keys) <= set(written.columns), (name, keys)
        rows: dict[tuple, list[int]] = {}
        for i, key in enumerate(zip(*(written[k] for k in keys))):
            rows.setdefault(key, []).append(i)
        for column in pinned.columns.difference(keys, sort=False):
            numbers = [finite_number(v) for v in pinned[column]]
            printed = [_decimals(v) for v in numbers if v is not None]
            # the column's precision: the most decimals any of its numbers has, or 9 digits if one was not rounded
            decimals = None if None in printed else max(printed, default=None)
            for (_, row), value in zip(pinned.iterrows(), numbers):
                if value is None:
                    continue
                key = tuple(row[k] for k in keys)
                assert column in written.columns, f"{today} has no column {column!r} (pinned in {name})"
                matches = rows.get(key, [])
                assert len(matches) == 1, f"{today}: {len(matches)} rows of key {key} (pinned in {name})"
                yield (name, key, column), value, finite_number(written[column].iloc[matches[0]]), decimals


def _leaves(data, path: tuple = ()) -> Iterator[tuple[tuple, object]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _leaves(value, (*path, i))
    else:
        yield path, data


def _json_cells(suite: str, before: Path, after: Path) -> Iterator[tuple[tuple, float, float | None, int | None]]:
    """((before file, path, ""), pinned value, the value at today's path, the decimals it was printed with) of every
    finite number of the suite's pinned JSON files."""
    for name, (today, moved) in JSONS.get(suite, {}).items():
        written = dict(_leaves(json.loads((after / today).read_text())))
        for path, value in _leaves(json.loads((before / name).read_text())):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                there = written.get(moved(path))
                there = float(there) if isinstance(there, (int, float)) and not isinstance(there, bool) else None
                yield (name, path, ""), float(value), there, _decimals(float(value))


def test_every_pinned_table_and_json_file_is_mapped():
    for suite in SUITES:
        files = {p.relative_to(PINS / suite / "before").as_posix() for p in (PINS / suite / "before").rglob("*.*")}
        assert files == set(TABLES.get(suite, {})) | set(JSONS.get(suite, {})), suite


@pytest.mark.parametrize("suite", SUITES)
def test_every_number_of_the_analysis_before_the_framework_is_still_written_in_its_cell(suite, tmp_path):
    run_dir = shutil.copytree(PINS / suite / "run", tmp_path / "run")
    assert cli.main(["analyze", str(run_dir), "--out", str(tmp_path / "after"), *FLAGS.get(suite, [])]) == 0
    before, after = PINS / suite / "before", tmp_path / "after"
    cells = [*_table_cells(suite, before, after), *_json_cells(suite, before, after)]
    assert len(cells) > 20  # the pin holds numbers to compare
    changed = CHANGED.get(suite, {})
    wrong = {cell: (pinned, written) for cell, pinned, written, decimals in cells
             if cell not in changed and not _same(pinned, written, decimals)}
    assert not wrong, f"cells (file, row key, column) -> (pinned, written today): {wrong}"
