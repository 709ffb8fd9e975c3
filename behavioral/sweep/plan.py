"""A sweep's plan before it runs (`--dry-run`): each run's prompts and state, and from a short calibration (each model
with runs left loaded once, a warm-up, then a few prompts of each run timed in a scratch folder) the estimated time
and disk; nothing is written to the sweep."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from activations.capture import decoder_layers, resolve_layers
from activations.store import REDUCTIONS
from behavioral.inference import models
from behavioral.runner.estimate import sample_run, sampled_items, step_cost
from behavioral.runner.progress import counted, duration
from behavioral.suite.registry import get_suite
from behavioral.core.distributed import place
from behavioral.rundir.manifest import read_manifest
from behavioral.runner.plan import plan, survey
from behavioral.runner.run import load_model
from behavioral.sweep.config import Sweep, SweepRun, check_trust
from behavioral.sweep.folder import is_sweep_folder, progress, read_state
from behavioral.sweep.runner import is_finished

FLOAT16_BYTES = 2
SAMPLE = 4  # prompts timed of each run left (a run of N samples an item: max(1, SAMPLE // N) items, N prompts each)
WARM_UP = 1  # prompts of a model's first run left, run once before anything is timed


@dataclass(frozen=True)
class PlannedRun:
    """One run in the plan: its rows, its state in the sweep folder, and (once calibrated) seconds and bytes, with
    how the estimate was made."""

    name: str
    rows: int
    state: str
    seconds: float | None = None
    result_bytes: float | None = None
    capture_bytes: float | None = None
    how: str = ""


def run_state(folder: Path, run: SweepRun, finished: dict[str, str]) -> str:
    """new, finished, or `k of n work units` of a run started before."""
    if is_finished(folder, run, finished):
        return "finished"
    done = progress(folder / run.run_dir)
    if done is None:
        return "new"
    return f"{done[0]} of {'?' if done[1] is None else done[1]} work units"


def plan_sweep(sweep: Sweep, calibrate: bool = True, trust_remote_code: bool = False,
               load: Callable[..., tuple] = models.load, sample: int = SAMPLE,
               say: Callable[[str], None] = print) -> list[PlannedRun]:
    """Every run of `sweep` with its rows and state (a model table asking for remote code refused without
    `trust_remote_code`, as the run refuses it); with `calibrate`, first `say` what the calibration will cost
    (describe_cost), then load each model with runs left once and time `sample` prompts of each such run
    (calibrated) to estimate its seconds and its result and capture bytes."""
    check_trust(sweep, trust_remote_code)
    finished = read_state(sweep.out).finished if is_sweep_folder(sweep.out) else {}
    states = [run_state(sweep.out, r, finished) for r in sweep.runs]
    planned = [PlannedRun(r.name, _rows(sweep.out, r, state), state) for r, state in zip(sweep.runs, states)]
    if not calibrate:
        return planned
    say(describe_cost(sweep, planned, sample))
    left = [(r, p) for r, p in zip(sweep.runs, planned) if p.state != "finished"]
    estimated = {}
    for _, group in itertools.groupby(left, key=lambda pair: pair[0].model):
        runs, plans = zip(*group)
        estimated.update((p.name, p) for p in calibrated(list(runs), list(plans), load, sample))
    return [estimated.get(p.name, p) for p in planned]


def _rows(folder: Path, run: SweepRun, state: str) -> int:
    """The result rows of the whole run: a finished run's from its manifest, any other's from its items."""
    if state == "finished":
        return read_manifest(folder / run.run_dir).plan.rows
    suite = get_suite(run.suite)
    return plan(run.config, survey(suite, suite.dataset(run.config))[0]).rows


def calibrated(runs: list[SweepRun], planned: list[PlannedRun], load: Callable[..., tuple],
               sample: int) -> list[PlannedRun]:
    """The runs of one model with their estimates: the model loaded once, WARM_UP prompts of its first run run
    untimed, its decode step priced at 1 and at its largest batch (step_cost), then `sample` prompts of each run
    timed (sample_run), each run's data prepared in its own scratch folder."""
    loaded = load_model(runs[0].config, place(), load)
    out = []
    with tempfile.TemporaryDirectory() as scratch:
        folders = [Path(scratch) / str(k) for k in range(len(runs))]
        sample_run(runs[0].config, loaded, folders[0], WARM_UP)
        step = step_cost(loaded[0], max(r.config.batch_size for r in runs))
        for r, p, folder in zip(runs, planned, folders):
            sampled = sample_run(r.config, loaded, folder, sample)
            out.append(replace(p, seconds=sampled.seconds(step), result_bytes=sampled.result_bytes,
                               capture_bytes=_capture_bytes(r, loaded), how=sampled.describe()))
    return out  # the model goes with this frame, before the next one loads


def _capture_bytes(run: SweepRun, loaded: tuple) -> float:
    """The activations a capture run stores, in float16: a vector per hook for each distinct key of each span kind
    (per reduction) and for each cell's mean and its kept samples."""
    config = run.config
    if not config.capture:
        return 0.0
    model = loaded[0]
    suite = get_suite(run.suite)
    spec = suite.capture
    hooks = len(resolve_layers(config.layers, len(decoder_layers(model)))) + 1  # hook_embed always
    items = [item for _, group in suite.groups(suite.dataset(config)) for item in group]
    vectors = 0
    for kind in config.capture:
        if kind == "final":
            cells = {tuple(item.fields[f] for f in spec.cell) for item in items}
            vectors += len(cells) * (1 + config.per_cell_samples)
        else:
            fields = spec.spans[kind][1]
            vectors += len({tuple(item.fields[f] for f in fields) for item in items}) * len(REDUCTIONS)
    return float(vectors * hooks * model.config.hidden_size * FLOAT16_BYTES)


def describe_cost(sweep: Sweep, planned: list[PlannedRun], sample: int) -> str:
    """The dry run's own cost, said before it starts: the models it loads and the prompts it times, against the
    sweep's prompts left."""
    left = [(r, p) for r, p in zip(sweep.runs, planned) if p.state != "finished"]
    names = list(dict.fromkeys(r.model.name for r, _ in left))
    if not names:
        return "dry run: every run is finished; nothing to load or time"
    timed = sum(sampled_items(p.rows // r.config.samples, r.config.samples, sample) * r.config.samples
                for r, p in left)
    prompts = sum(p.rows for _, p in left)
    each = " each" if len(names) > 1 else ""
    return (f"dry run: loads {', '.join(names)} once{each}, warms {'them' if each else 'it'} up on {WARM_UP} prompt"
            f"{'s' if WARM_UP > 1 else ''}, then times {timed} of the {prompts} prompts left ({sample} of each of "
            f"{len(left)} runs, {timed / prompts:.1%}): roughly that share of the sweep's time, more where its "
            f"batches are fuller than the sample's, plus the load{'s' if each else ''}")


def describe_plan(sweep: Sweep, planned: list[PlannedRun]) -> str:
    """The plan as the user reads it: one line per run, then the totals of what is left."""
    def size(n: float) -> str:
        return f"{n / 2 ** 10:.0f} KiB" if n < 2 ** 20 else f"{n / 2 ** 20:.1f} MiB"

    settings = counted(len(planned) // len(sweep.models), "suite setting")
    lines = [f"sweep {sweep.source} -> {sweep.out}: {counted(len(sweep.models), 'model')} x {settings} = "
             f"{counted(len(planned), 'run')}"]
    for p in planned:
        extra = "" if p.seconds is None else \
            f", about {duration(p.seconds)} ({p.how}), results {size(p.result_bytes)}" + \
            (f", activations {size(p.capture_bytes)}" if p.capture_bytes else "")
        lines.append(f"  {p.name}: {p.rows} prompts, {p.state}{extra}")
    left = [p for p in planned if p.state != "finished"]
    timed = [p for p in left if p.seconds is not None]
    total = f"{counted(len(left), 'run')} left, {counted(sum(p.rows for p in left), 'prompt')}"
    if timed:
        disk = sum(p.result_bytes + p.capture_bytes for p in timed)
        total += (f"; estimated {duration(sum(p.seconds for p in timed))} and {size(disk)} (from a few prompts of "
                  f"each run timed, capture passes aside)")
    return "\n".join(lines + [total])
