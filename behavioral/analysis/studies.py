"""What a study is (Study) and the studies by name: where each built-in study's object lives, imported on first use
(`run_study("patch", ...)` and `empathy-gap interp` take a study's name); light, so the command line lists them
without importing the analysis."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from behavioral.report.blocks import Analysis
    from behavioral.rundir.run import Run

class Study:
    """A study: subclasses set `name`, `description` and `Options` (a frozen dataclass whose fields carry their
    flags, behavioral.core.options) and implement `plan` and `analyze`."""

    name: str = ""
    description: str = ""
    Options: type | None = None
    keep: tuple[str, ...] = ()  # sub-folders of the output folder the study makes and resumes (e.g. reruns)
    reruns_model: bool = False  # runs the run's model again: its `analyze` takes `model`, a loaded one to use

    def plan(self, runs: Sequence[Run], options: Any) -> str:
        """What the study will compute, in one paragraph (counts, forwards, an estimate): printed before the work."""
        raise NotImplementedError

    def analyze(self, runs: Sequence[Run], options: Any, out: Path, progress: bool = True) -> Analysis:
        """The study's tables, figures and report sections for the runs (`out`: the output folder, where the
        sub-folders in `keep` go); bad input raises ValueError naming it. A study that `reruns_model` also takes
        `model`: an already loaded (model, tokenizer, info) used instead of loading the run's (rerun.load_model)."""
        raise NotImplementedError


# name -> module holding its STUDY, in the order `empathy-gap interp` lists them
STUDIES: dict[str, str] = {
    "clusters": "interp.clusters.study",
    "rsa": "interp.rsa.study",
    "probe": "interp.probes.study",
    "steer": "interp.steering.study",
    "patch": "interp.patching.study",
    "attribution": "interp.attribution.study",
    "atlas": "interp.atlas.study",
}


def study_names() -> list[str]:
    """The registered studies, in CLI order."""
    return list(STUDIES)


def get_study(name: str) -> Study:
    """The study called `name`; an unknown name is a ValueError listing the known ones."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; expected one of {', '.join(STUDIES)}")
    return importlib.import_module(STUDIES[name]).STUDY
