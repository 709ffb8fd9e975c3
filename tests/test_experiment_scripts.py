"""Every example in experiments/ imports against the current library and answers --help (exit 0) before it does any
work: a script that no longer matches the API it was written for fails here, not in a user's hands. The developer
benchmarks in tests/benchmarks/ answer --help too, imported as modules and run as files."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "experiments").glob("*.py") if "__main__" in p.read_text())
BENCHMARKS = sorted(p for p in (ROOT / "tests" / "benchmarks").glob("*.py") if "__main__" in p.read_text())


def _help(module, name: str, monkeypatch, capsys) -> None:
    """`module.main()` with argv `name --help` exits 0 and prints its usage."""
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_example_imports_and_answers_help(script, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location(f"experiment_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    _help(module, script.name, monkeypatch, capsys)


def test_experiments_holds_examples_and_the_benchmarks_are_found():
    assert EXAMPLES and len(BENCHMARKS) >= 7
    assert not {p.name for p in EXAMPLES} & {p.name for p in BENCHMARKS}


@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_the_benchmark_imports_and_answers_help(script, monkeypatch, capsys):
    module = importlib.import_module(f"tests.benchmarks.{script.stem}")
    _help(module, script.name, monkeypatch, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["file", "module"])
@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_the_benchmark_runs_from_the_repository_root(script, how):
    """`python tests/benchmarks/NAME.py --help` and `python -m tests.benchmarks.NAME --help`, as a developer types
    them (a fresh interpreter: the script puts the repository root on its path itself)."""
    target = [str(script.relative_to(ROOT))] if how == "file" else ["-m", f"tests.benchmarks.{script.stem}"]
    done = subprocess.run([sys.executable, *target, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
