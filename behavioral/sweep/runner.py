"""Run a sweep: every run an ordinary run directory made by behavioral.runner.run.run (resume, locks, refusal of changed
settings, sharding over the launcher's processes), each model loaded once for all its runs, finished runs skipped."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from behavioral.inference import models
from behavioral.core.distributed import Place, barrier, place, start
from behavioral.rundir.manifest import MANIFEST, RunDirError, read_manifest
from behavioral.runner.progress import counted
from behavioral.runner.run import check_resumable, load_model, run, run_identity
from behavioral.rundir.parts import RunLock, finished_units
from behavioral.sweep.config import Sweep, SweepModel, SweepRun, check_trust
from behavioral.sweep.folder import check_sweep_folder, is_complete, is_sweep_folder, read_state, write_state


@dataclass
class SweepOutcome:
    """What one invocation did: runs it ran to the end, runs found finished, and failures (run or model -> reason)."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def describe(self, total: int) -> str:
        """A line of counts for the user, then a line per run skipped or failed (a run in use by another process
        among them)."""
        before = len(self.skipped)
        counts = f"{counted(len(self.ran), 'run')} ran, {before} {'was' if before == 1 else 'were'} finished before, " \
                 f"{len(self.failed)} failed, of {total}"
        return "\n".join([counts, *(f"  {name}: finished before, skipped" for name in self.skipped),
                          *(f"  {name}: failed: {reason}" for name, reason in self.failed.items())])


def check_unchanged(folder: Path, runs: tuple[SweepRun, ...]) -> None:
    """Refuse, before anything runs, a run whose directory was made with other settings than the sweep file now
    gives it (what would decide its rows, model hash aside, which is known once the model loads)."""
    for r in runs:
        out = folder / r.run_dir
        if not (out / MANIFEST).is_file():
            continue
        stored = read_manifest(out)
        device = models.resolve_device(r.config.device)
        dtype = str(models.resolve_dtype(r.config.dtype, device)).removeprefix("torch.")
        info = {"model_hash": stored.model.get("model_hash"), "revision": stored.model.get("revision"),
                "dtype": dtype}
        try:
            check_resumable(out, run_identity(r.config, info), partial=True)
        except RunDirError as err:
            differences = str(err).split("Differences: ", 1)[-1]
            raise ValueError(f"run {r.name} ({out}) was made with other settings ({differences}); give the changed "
                             f"settings a new name ([suite.{r.suite}.settings.NAME]) or remove {out}") from None


def is_finished(folder: Path, run: SweepRun, finished: dict[str, str]) -> bool:
    """True where this sweep finished the run before (its run id recorded) and every planned work unit is on disk."""
    out = folder / run.run_dir
    if run.name not in finished or not (out / MANIFEST).is_file():
        return False
    manifest = read_manifest(out)
    return (manifest.run_id == finished[run.name] and manifest.plan is not None
            and len(finished_units(out)) >= manifest.plan.units)


def run_sweep(sweep: Sweep, progress: bool = True, trust_remote_code: bool = False, where: Place | None = None,
              load: Callable[..., tuple] = models.load, started: Callable[[], None] = lambda: None) -> SweepOutcome:
    """Run (or continue) every run of `sweep` that is not finished, model by model, into its folder; a model that
    fails to load or a run that fails is recorded and the sweep goes on with the rest. `trust_remote_code` is the
    user's own flag: a model whose table asks for remote code runs it only with this set. Everything is checked,
    and the folder locked against a second sweep, before `started()` is called (the command prints its plan there)
    and the first model loads.

    >>> from behavioral import run_sweep
    >>> outcome = run_sweep(sweep, progress=False)
    >>> outcome.ran, outcome.failed
    (['smol/intergroup'], {})
    """
    where = where or place()
    check_trust(sweep, trust_remote_code)
    folder = sweep.out
    check_sweep_folder(folder)
    with RunLock(folder, where.rank, "sweep"):
        check_unchanged(folder, sweep.runs)
        started()
        state = read_state(folder) if is_sweep_folder(folder) else None
        finished = dict(state.finished) if state else {}
        start(where)
        outcome = SweepOutcome()
        record = Record(folder, sweep, finished, outcome, where)
        record()
        barrier(where)
        for model, group in itertools.groupby(sweep.runs, key=lambda r: r.model):
            runs = list(group)
            todo = [r for r in runs if not is_finished(folder, r, finished)]
            outcome.skipped += [r.name for r in runs if r not in todo]
            if todo:
                _run_model(folder, model, todo, where, progress, load, record)
    return outcome


@dataclass(frozen=True)
class Record:
    """Writes sweep.json (on the main process) with the runs finished so far, after each run."""

    folder: Path
    sweep: Sweep
    finished: dict[str, str]
    outcome: SweepOutcome
    where: Place

    def __call__(self) -> None:
        if self.where.is_main:
            write_state(self.folder, self.sweep, self.finished, self.outcome.failed)


def _run_model(folder: Path, model: SweepModel, runs: list[SweepRun], where: Place, progress: bool,
               load: Callable[..., tuple], record: Record) -> None:
    """Load `model` once and run each of its unfinished runs, recording each as it ends; a run found complete on
    disk (finished by a sweep killed before it could record it) counts as finished before."""
    outcome = record.outcome
    try:
        loaded = load_model(runs[0].config, where, load)
    except (ValueError, OSError) as err:
        for r in runs:
            outcome.failed[r.name] = f"model {model.spec!r} did not load: {err}"
        record()
        return
    for r in runs:
        out = folder / r.run_dir
        complete = is_complete(out)
        try:
            run(r.config, out, where, progress, loaded, label=r.name)
        except (ValueError, OSError) as err:
            outcome.failed[r.name] = str(err)
            record()
            continue
        barrier(where)
        record.finished[r.name] = read_manifest(out).run_id
        (outcome.skipped if complete else outcome.ran).append(r.name)
        record()
    del loaded
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
