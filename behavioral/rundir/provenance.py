"""Where an output came from: package versions, git commit, machine and time, for every manifest."""

from __future__ import annotations

import datetime
import hashlib
import platform
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

PACKAGES = ("empathy-gap", "torch", "transformers", "accelerate", "numpy", "scipy", "pandas", "pyarrow", "gguf")


def files_sha256(paths: Iterable[str | Path]) -> str:
    """One sha256 over the bytes of `paths`, in order (what a manifest records of a run's data files)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that shape results (None where one is absent)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _git(*args: str) -> str | None:
    """The output of a git command in the checkout this code runs from (None outside one)."""
    try:
        out = subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str | None:
    """The commit of the checkout this code runs from, if it runs from one."""
    return _git("rev-parse", "HEAD")


def git_dirty() -> bool | None:
    """Whether tracked files differ from that commit (the code that ran is then not the commit's); None outside a
    checkout."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def provenance() -> dict:
    """Versions, commit, host and UTC time, to record beside any result."""
    return {
        "package_versions": package_versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
