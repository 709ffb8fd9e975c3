"""Every number each suite's analysis printed before the analysis framework (issue 21) is still printed: the pinned
run directories in tests/data/analysis_pins/<suite>/run (mode both, the tiny random model) were analyzed at commit
6f0bbaf into .../before (its CSV and JSON files) with the flags in FLAGS; today's `empathy-gap analyze` of the same
runs with the same flags must write each of those numbers in its own CSV or JSON files."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from behavioral import cli

PINS = Path(__file__).parent / "data" / "analysis_pins"
SUITES = sorted(p.name for p in PINS.iterdir() if p.is_dir())
# Numbers a bug fix changed on purpose, by suite: (file, column) -> why (listed in the closing note of issue 21).
CHANGED: dict[str, dict[tuple[str, str], str]] = {}
# The analysis flags of each pin (intergroup: the expected intensity, as the generated replies of a random model
# hold no number and every δ would be n/a).
FLAGS = {"intergroup": ["--measure", "expected_intensity"]}


def _numbers_of_json(data) -> list[float]:
    if isinstance(data, dict):
        return [x for v in data.values() for x in _numbers_of_json(v)]
    if isinstance(data, list):
        return [x for v in data for x in _numbers_of_json(v)]
    return [float(data)] if isinstance(data, (int, float)) and not isinstance(data, bool) else []


def _numbers(folder: Path, suite: str) -> dict[tuple[str, str], list[float]]:
    """The finite numbers of each (file, column) of an analysis folder's CSV and JSON files (manifest excluded)."""
    found: dict[tuple[str, str], list[float]] = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.suffix == ".csv":
            frame = pd.read_csv(path)
            for column in frame.columns:
                values = pd.to_numeric(frame[column], errors="coerce").dropna()
                if frame[column].dtype != bool and len(values):
                    found[(name, column)] = [float(v) for v in values]
        elif path.suffix == ".json" and path.name != "manifest.json":
            found[(name, "")] = _numbers_of_json(json.loads(path.read_text()))
    return {k: [v for v in vs if math.isfinite(v)] for k, vs in found.items() if (k not in CHANGED.get(suite, {}))}


def _key(value: float) -> str:
    return f"{value:.9g}"


def _decimals(value: float) -> int | None:
    """The decimals `value` was printed with, where it was rounded to at most 6 (else None: compared to 9 digits)."""
    text = repr(value)
    decimals = None if "e" in text else len(text.split(".")[1]) if "." in text else 0
    return decimals if decimals is not None and decimals <= 6 else None


def _written(after: list[float]) -> set[str]:
    """Keys of the numbers an analysis wrote, each also as rounded to 0-6 decimals: until issue 32 some CSVs held
    rounded numbers, which today's full-precision CSVs still write where they round to them."""
    return {f"{d}:{_key(round(v, d) + 0.0)}" for v in after for d in range(7)} | {f"None:{_key(v)}" for v in after}


@pytest.mark.parametrize("suite", SUITES)
def test_every_number_of_the_analysis_before_the_framework_is_still_written(suite, tmp_path):
    run_dir = shutil.copytree(PINS / suite / "run", tmp_path / "run")
    assert cli.main(["analyze", str(run_dir), "--out", str(tmp_path / "after"), *FLAGS.get(suite, [])]) == 0
    after = _written([v for values in _numbers(tmp_path / "after", suite).values() for v in values])
    before = _numbers(PINS / suite / "before", suite)
    assert sum(map(len, before.values())) > 20  # the pin holds numbers to compare
    missing = {k: [v for v in values if f"{_decimals(v)}:{_key(v)}" not in after] for k, values in before.items()}
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, f"numbers no longer written: {missing}"
