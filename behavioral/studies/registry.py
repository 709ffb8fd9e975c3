"""The studies by name: each a module of behavioral.studies with a Study object, imported on first use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from behavioral.studies.study import Study

# name -> module holding its STUDY
STUDIES: dict[str, str] = {
    "clusters": "behavioral.studies.clusters",
    "rsa": "behavioral.studies.rsa",
    "probe": "behavioral.studies.probe",
    "steer": "behavioral.studies.steer",
    "patch": "behavioral.studies.patch",
    "attribution": "behavioral.studies.attribution",
    "atlas": "behavioral.studies.atlas",
}


def names() -> list[str]:
    """The registered studies, in CLI order."""
    return list(STUDIES)


def get_study(name: str) -> "Study":
    """The study called `name`; an unknown name is a ValueError listing the known ones."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; expected one of {', '.join(STUDIES)}")
    return importlib.import_module(STUDIES[name]).STUDY
