"""Names of runs side by side in one analysis: unique in tables and in file names, so no run is silently dropped or
overwritten when two runs share a model and a folder name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path


def run_labels(names: Sequence[str], run_dirs: Sequence[str | Path], key: Callable[[str], str] = str) -> list[str]:
    """A label per run: its name (e.g. the model's), followed, where labels would repeat as compared by `key` (e.g. a
    file stem), by the fewest trailing parts of its run directory's path that tell it apart (`m (run)`, else
    `m (a/run)`). A run given twice, or runs that nothing tells apart, are a ValueError naming them."""
    resolved = [Path(d).resolve() for d in run_dirs]
    twice = next((d for d, p in zip(run_dirs, resolved) if resolved.count(p) > 1), None)
    if twice is not None:
        raise ValueError(f"run {twice} is given twice; expected each run once")
    parts = [p.parts for p in resolved]
    depths = [0] * len(names)
    while True:
        labels = [f"{n} ({Path(*p[-k:]).as_posix()})" if k else n for n, p, k in zip(names, parts, depths)]
        keys = [key(label) for label in labels]
        clashing = [i for i, k in enumerate(keys) if keys.count(k) > 1]
        if not clashing:
            return labels
        deeper = [i for i in clashing if depths[i] < len(parts[i])]
        if not deeper:
            i = clashing[0]
            j = keys.index(keys[i], i + 1)
            raise ValueError(f"{run_dirs[i]} and {run_dirs[j]}: runs that cannot be told apart (name {labels[i]!r}, "
                             f"key {keys[i]!r}); expected paths that differ in more than punctuation")
        for i in deeper:
            depths[i] += 1
