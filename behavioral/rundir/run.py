"""A run directory read back: the run as every reader gets it (its name in tables, folder, manifest, rows) and how
much of its plan is on disk."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from behavioral.rundir.manifest import Manifest


@dataclass(frozen=True)
class Completeness:
    """How much of its plan a run directory holds: finished work units and rows, against those planned (None where
    the plan is unknown: `unknown` says why), and whether the plan was derived from the manifest's configuration
    and data rather than recorded (runs made before manifests recorded it), and whether its parts are `sealed`
    (checked against what its run recorded of them) or were read unchecked (runs made before seals)."""

    units: int
    rows: int
    planned_units: int | None
    planned_rows: int | None
    derived: bool = False
    unknown: str = ""
    sealed: bool = True

    @property
    def known(self) -> bool:
        """True where the plan is known (recorded or derived)."""
        return self.planned_units is not None

    @property
    def complete(self) -> bool:
        """True where every planned work unit and row is on disk."""
        return self.known and self.units >= self.planned_units and self.rows >= self.planned_rows

    def describe(self) -> str:
        """One line for reports: complete, or partial with the counts."""
        unchecked = "" if self.sealed else ("; its parts are unchecked (made before runs sealed their parts: an "
                                            "edited part or one copied in from another run cannot be detected)")
        if not self.known:
            return f"completeness unknown: {self.units} work units ({self.rows} rows) on disk; {self.unknown}" \
                + unchecked
        counts = f"{self.units} of {self.planned_units} work units ({self.rows} of {self.planned_rows} rows)"
        derived = " (plan derived from the manifest's configuration and data, which it does not record)" \
            if self.derived else ""
        return (f"complete: {counts}" if self.complete else f"PARTIAL run: {counts} finished") + derived + unchecked


@dataclass(frozen=True, eq=False)
class Run:
    """One run read for analysis: its name in tables, directory, manifest, the suite's view of its rows and how
    much of its plan they are."""

    name: str
    run_dir: Path
    manifest: Manifest
    rows: pd.DataFrame
    completeness: Completeness

    @property
    def config(self) -> dict:
        """The run's configuration as its manifest records it."""
        return self.manifest.config

    @property
    def stem(self) -> str:
        """The run's name as a part of file names (unique among the runs of one analysis)."""
        return file_stem(self.name)

    @property
    def options(self) -> dict:
        """The suite's options the run was made with (empty where it has none)."""
        return self.config.get("options") or {}


def file_stem(name: str) -> str:
    """`name` with every character other than letters, digits and -_. as _, for file names."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
