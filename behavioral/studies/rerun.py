"""What a study that runs a run's model again needs of the run: its suite's protocol for the study (only some suites
have one) and the model as the run recorded it."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType

from behavioral import models
from behavioral.analysis.runs import Run


def suite_protocol(run: Run, protocols: Mapping[str, str], what: str) -> ModuleType:
    """The module holding the protocol of `run`'s suite in a study's registry (suite -> module); a suite without one
    is a ValueError naming the run, its suite and the suites that have one."""
    suite = run.config["suite"]
    if suite not in protocols:
        raise ValueError(f"{run.run_dir}: a run of suite {suite!r}; {what} needs an {' or '.join(protocols)} run")
    return importlib.import_module(protocols[suite])


def load_model(run: Run, device: str = "auto", dtype: str | None = None, trust_remote_code: bool = False) -> tuple:
    """(model, tokenizer, info) of the model `run` was made with: its recorded path, in its recorded dtype unless
    `dtype` says otherwise; weights whose hash or revision differ from the recorded ones are a ValueError. A model
    folder's own code runs only with `trust_remote_code`, the caller's (a manifest never turns it on)."""
    config = run.config
    loaded = models.load(config["model"], device, dtype or config["dtype"], trust_remote_code)
    info = loaded[2]
    for key in ("model_hash", "revision"):
        if config.get(key) and info[key] and info[key] != config[key]:
            raise ValueError(f"{run.run_dir}: the model at {config['model']} is not the one the run was made with "
                             f"({key} {info[key]} loaded, {config[key]} recorded)")
    return loaded


def one_run(runs: Sequence[Run], study: str) -> Run:
    """The one run a study that reruns a model reads; several are a ValueError naming the study."""
    if len(runs) != 1:
        raise ValueError(f"interp {study} reads one run directory, got {len(runs)}; run it once per run")
    return runs[0]
