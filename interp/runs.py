"""Behavioral run directories as the interp experiments reuse them: the configuration a run was made with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from behavioral.run import RunConfig
from behavioral.store import read_manifest
from behavioral.suites.intergroup import Options


def stored_config(run_dir: str | Path, **changes) -> RunConfig:
    """The RunConfig of an intergroup run directory, from its manifest, with `changes` applied (device and batch
    size are not stored: they come back as RunConfig's defaults unless changed)."""
    stored = read_manifest(run_dir)["config"]
    if stored.get("suite") != "intergroup":
        raise ValueError(f"{run_dir} holds a run of suite {stored.get('suite')!r}; expected an intergroup run")
    known = {f.name for f in dataclasses.fields(RunConfig)}
    fields = {k: v for k, v in stored.items() if k in known}
    fields.update(options=Options(**stored["options"]), capture=tuple(stored.get("capture", ())))
    return dataclasses.replace(RunConfig(**fields), **changes)
