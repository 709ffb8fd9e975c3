"""The mechanistic studies on run directories with capture (`empathy-gap interp STUDY`), by name: each a module here
with a Study object, imported on first use."""

from __future__ import annotations

from behavioral.studies.registry import STUDIES, get_study, names


def __getattr__(name: str):
    """`Study`, `StudyResult` and `run_study`, imported on first use so that the CLI's parser does not load the
    analysis stack."""
    if name in ("Study", "StudyResult", "run_study"):
        from behavioral.studies import study

        return getattr(study, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["STUDIES", "Study", "StudyResult", "get_study", "names", "run_study"]
