"""Every script in experiments/ imports against the current library and answers --help (exit 0) before it does any
work: a script that no longer matches the API it was written for fails here, not in a user's hands."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted(p for p in (Path(__file__).resolve().parents[1] / "experiments").glob("*.py")
                 if "__main__" in p.read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_the_script_imports_and_answers_help(script, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location(f"experiment_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", [script.name, "--help"])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out
