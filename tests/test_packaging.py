"""The built wheel holds every package and every suite's card and data (package discovery, package data)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_every_suite_with_its_card_and_data(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    [wheel] = tmp_path.glob("empathy_gap-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    suites = [p for p in (ROOT / "behavioral" / "suites").iterdir() if (p / "__init__.py").is_file()]
    assert suites
    for suite in (*suites, ROOT / "interp"):
        for path in suite.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                assert str(path.relative_to(ROOT)) in names, path
    for package in ("behavioral/__init__.py", "activations/__init__.py", "interp/__init__.py",
                    "behavioral/suites/__init__.py", "interp/patching/__init__.py", "interp/atlas/identity_map.csv",
                    "interp/rsa/continents.csv"):
        assert package in names
    assert not any(n.startswith(("tests/", "experiments/", "docs/")) for n in names)
