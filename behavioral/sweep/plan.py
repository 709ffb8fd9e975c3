"""A sweep's plan before it runs (`--dry-run`): each run's prompts and state, and from a short calibration (one batch
of each run on its loaded model, in a scratch folder) the estimated time and disk; nothing is written to the sweep."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from activations.capture import decoder_layers, resolve_layers
from activations.store import REDUCTIONS
from behavioral import models
from behavioral.estimate import estimate_run
from behavioral.progress import duration
from behavioral.registry import get_suite
from behavioral.distributed import place
from behavioral.run import load_model, plan
from behavioral.sweep.config import Sweep, SweepRun, check_trust
from behavioral.sweep.folder import is_sweep_folder, progress, read_state
from behavioral.sweep.runner import is_finished

FLOAT16_BYTES = 2


@dataclass(frozen=True)
class PlannedRun:
    """One run in the plan: its rows, its state in the sweep folder, and (once calibrated) seconds and bytes."""

    name: str
    rows: int
    state: str
    seconds: float | None = None
    result_bytes: float | None = None
    capture_bytes: float | None = None


def run_state(folder: Path, run: SweepRun, finished: dict[str, str]) -> str:
    """new, finished, or `k of n work units` of a run started before."""
    if is_finished(folder, run, finished):
        return "finished"
    done = progress(folder / run.run_dir)
    if done is None:
        return "new"
    return f"{done[0]} of {'?' if done[1] is None else done[1]} work units"


def plan_sweep(sweep: Sweep, calibrate: bool = True, trust_remote_code: bool = False,
               load: Callable[..., tuple] = models.load) -> list[PlannedRun]:
    """Every run of `sweep` with its rows and state; with `calibrate`, each model with unfinished runs is loaded once
    and one batch of each such run timed (estimate_run) to estimate its seconds and its result and capture bytes."""
    if calibrate:
        check_trust(sweep, trust_remote_code)
    finished = read_state(sweep.out).finished if is_sweep_folder(sweep.out) else {}
    planned = []
    for model, group in itertools.groupby(sweep.runs, key=lambda r: r.model):
        runs = list(group)
        states = [run_state(sweep.out, r, finished) for r in runs]
        loaded = None
        if calibrate and any(s != "finished" for s in states):
            loaded = load_model(runs[0].config, place(), load)
        for r, state in zip(runs, states):
            suite = get_suite(r.suite)
            data = suite.dataset(r.config)
            rows = plan(r.config, suite, data).rows
            if loaded is None or state == "finished":
                planned.append(PlannedRun(r.name, rows, state))
                continue
            with tempfile.TemporaryDirectory() as scratch:  # the suite prepares its data there, as the run would
                estimate = estimate_run(r.config, loaded, scratch)
            planned.append(PlannedRun(r.name, rows, state, estimate.seconds, estimate.bytes_per_row * rows,
                                      _capture_bytes(r, data, loaded)))
    return planned


def _capture_bytes(run: SweepRun, data, loaded: tuple) -> float:
    """The activations a capture run stores, in float16: a vector per hook for each distinct key of each span kind
    (per reduction) and for each cell's mean and its kept samples."""
    config = run.config
    if not config.capture:
        return 0.0
    model = loaded[0]
    spec = get_suite(run.suite).capture
    hooks = len(resolve_layers(config.layers, len(decoder_layers(model)))) + 1  # hook_embed always
    items = [item for _, group in get_suite(run.suite).groups(data) for item in group]
    vectors = 0
    for kind in config.capture:
        if kind == "final":
            cells = {tuple(item.fields[f] for f in spec.cell) for item in items}
            vectors += len(cells) * (1 + config.per_cell_samples)
        else:
            fields = spec.spans[kind][1]
            vectors += len({tuple(item.fields[f] for f in fields) for item in items}) * len(REDUCTIONS)
    return float(vectors * hooks * model.config.hidden_size * FLOAT16_BYTES)


def describe_plan(sweep: Sweep, planned: list[PlannedRun]) -> str:
    """The plan as the user reads it: one line per run, then the totals of what is left."""
    def size(n: float) -> str:
        return f"{n / 2 ** 10:.0f} KiB" if n < 2 ** 20 else f"{n / 2 ** 20:.1f} MiB"

    lines = [f"sweep {sweep.source} -> {sweep.out}: {len(sweep.models)} models x {len(planned) // len(sweep.models)} "
             f"suite settings = {len(planned)} runs"]
    for p in planned:
        extra = "" if p.seconds is None else \
            f", about {duration(p.seconds)}, results {size(p.result_bytes)}" + \
            (f", activations {size(p.capture_bytes)}" if p.capture_bytes else "")
        lines.append(f"  {p.name}: {p.rows} prompts, {p.state}{extra}")
    left = [p for p in planned if p.state != "finished"]
    timed = [p for p in left if p.seconds is not None]
    total = f"{len(left)} runs left, {sum(p.rows for p in left)} prompts"
    if timed:
        disk = sum(p.result_bytes + p.capture_bytes for p in timed)
        total += f"; estimated {duration(sum(p.seconds for p in timed))} and {size(disk)} (one batch of each timed)"
    return "\n".join(lines + [total])
