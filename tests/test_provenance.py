"""Provenance: a result made from a checkout with uncommitted changes says so beside its commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from behavioral.rundir import provenance

ROOT = Path(provenance.__file__).parent


def _git_status() -> str | None:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                         text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def test_dirty_flag_follows_git_status():
    status = _git_status()
    record = provenance.provenance()
    assert record["git_dirty"] == (None if status is None else bool(status))


@pytest.mark.parametrize(("status", "dirty"), [(" M behavioral/inference/engine.py", True), ("", False), (None, None)])
def test_dirty_flag_values(monkeypatch, status, dirty):
    monkeypatch.setattr(provenance, "_git", lambda *args: status)
    assert provenance.git_dirty() is dirty
