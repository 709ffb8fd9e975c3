"""What a study that runs a run's model again needs of the run: the one run it reads and the model as the run
recorded it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from behavioral.core.options import check_bounds, option
from behavioral.inference import models
from behavioral.inference.model_source import check_device
from behavioral.analysis.runs import Run
from behavioral.suite.registry import get_suite, names


@dataclass(frozen=True)
class ModelOptions:
    """How a study that runs the run's model again loads it: the options every such study takes first (its own
    follow, in its subclass)."""

    device: str = option("auto", "device of the model: auto, cpu, cuda, cuda:N, mps or split[:0=70GiB,cpu=200GiB]",
                         metavar="DEVICE")
    dtype: str | None = option(None, "dtype of the model (default: the run's)", metavar="DTYPE")
    trust_remote_code: bool = option(False, "let the model folder run its own code (never taken from a manifest)")

    def __post_init__(self):
        check_bounds(self)
        check_device(self.device)


def load_model(run: Run, device: str = "auto", dtype: str | None = None, trust_remote_code: bool = False,
               loaded: tuple | None = None) -> tuple:
    """(model, tokenizer, info) of the model `run` was made with: `loaded`, an already loaded one, as it is, else its
    recorded path, in its recorded dtype unless `dtype` says otherwise; weights whose hash or revision differ from the
    recorded ones are a ValueError. A model folder's own code runs only with `trust_remote_code`, the caller's (a
    manifest never turns it on)."""
    config = run.config
    if loaded is None:
        loaded = models.load(config["model"], device, dtype or config["dtype"], trust_remote_code)
    info = loaded[2]
    for key in ("model_hash", "revision"):
        if config.get(key) and info[key] and info[key] != config[key]:
            raise ValueError(f"{run.run_dir}: the model {info['model']} is not the one the run was made with "
                             f"({key} {info[key]} loaded, {config[key]} recorded)")
    return loaded


def one_run(runs: Sequence[Run], study: str) -> Run:
    """The one run a study that reruns a model reads; several are a ValueError naming the study."""
    if len(runs) != 1:
        raise ValueError(f"interp {study} reads one run directory, got {len(runs)}; run it once per run")
    return runs[0]


def protocol_of(run: Run, study: str):
    """The protocol `run`'s suite declares for `study` (Suite.protocols); a suite without one is a ValueError naming
    the run, its suite and the suites that declare one."""
    suite = get_suite(run.config["suite"])
    if study not in suite.protocols:
        having = [name for name in names() if study in get_suite(name).protocols]
        raise ValueError(f"{run.run_dir}: a run of suite {suite.name!r}, which declares no {study} protocol; "
                         f"{study} runs on {' or '.join(having) or 'no registered suite'} runs")
    return suite.protocols[study]
