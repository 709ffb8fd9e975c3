"""What a run of a suite slice will cost, measured on its loaded model before it runs: `estimate_run` times its first
batch (a command that reruns a model says how long before it starts); `sample_run` times a few of its prompts and
extrapolates by how the engine spends its time (the sweep's dry run)."""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

import torch

from behavioral.inference.engine import cache_keyword
from behavioral.inference.models import input_device
from behavioral.inference.prefix_plan import cached_prefixes, with_branch_points
from behavioral.runner.progress import duration
from behavioral.runner.run import POOL_BATCHES, RunConfig, Runner
from behavioral.suite.registry import get_suite
from behavioral.rundir.parts import parquet_bytes, result_schema
from behavioral.suite.protocol import Item
from behavioral.suite.work import WorkUnit, unit_batches, work_units

PROBE_STEPS = 4  # decode steps timed at each of the probe's two batch sizes (their median)


@dataclass(frozen=True)
class RunEstimate:
    """What one run of a suite slice will cost: its prompts and batches, and the time the first batch took."""

    prompts: int
    batches: int
    timed_prompts: int  # the first batch's
    seconds_timed: float

    @property
    def seconds(self) -> float:
        """The estimated time of the whole run: the timed batch's time per prompt for every prompt (a ragged last
        batch costs its share, not a whole batch; on a GPU, where a small batch costs nearly as much as a full one,
        that part is low)."""
        return self.seconds_timed * self.prompts / self.timed_prompts

    def describe(self, runs: int = 1) -> str:
        """One line for the user: prompts, batches, the timed batch and the estimate for `runs` such runs."""
        times = f"{runs} runs × " if runs > 1 else ""
        return (f"{times}{self.prompts} prompts in {self.batches} batches; the first ({self.timed_prompts} prompts) "
                f"took {self.seconds_timed:.1f} s: estimated {duration(runs * self.seconds)}")


def prepared_units(config: RunConfig, loaded: tuple, out: str | Path) -> tuple[Runner, list[WorkUnit]]:
    """A runner of `config` on a loaded (model, tokenizer, info) and the run's work units, the suite's data prepared
    into `out` as the run would (T2 rewrites are cached there, so the run does not redo them)."""
    model, tokenizer, _ = loaded
    suite = get_suite(config.suite)
    config.validate(suite)
    data = suite.prepare(suite.dataset(config), config, model, tokenizer, Path(out))
    units = list(work_units(suite.groups(data), config.unit_size))
    if not units:
        raise ValueError(f"suite {config.suite!r}: the configuration selects no items")
    return Runner(model, tokenizer, config, suite), units


def result_bytes(runner: Runner, rows: list[dict], total: int) -> float:
    """The Parquet part of `total` rows like `rows`: a part's own bytes (a part of the first row, less what each row
    adds) and each row's, from the part of all `rows`."""
    first, whole = (parquet_bytes(part, result_schema(runner.suite.fields, None)) for part in (rows[:1], rows))
    per_row = (whole - first) / (len(rows) - 1) if len(rows) > 1 else first
    return first - per_row + per_row * total


def estimate_run(config: RunConfig, loaded: tuple, out: str | Path) -> RunEstimate:
    """Time the first batch of a suite slice on a loaded (model, tokenizer, info) and count its batches: what one
    ``behavioral.runner.run.run(config, out, loaded=loaded)`` will cost, capture passes aside. The suite prepares its data
    into `out` as the run would."""
    runner, units = prepared_units(config, loaded, out)
    batches = list(unit_batches(units, config.batch_size))
    start = perf_counter()
    runner.rows(batches[0])
    seconds = perf_counter() - start

    def count(batch) -> int:
        return sum(len(unit.items) for unit in batch) * config.samples

    return RunEstimate(sum(count(b) for b in batches), len(batches), count(batches[0]), seconds)


@dataclass(frozen=True)
class Forward:
    """One forward of the model: its rows, the positions it computes per row, and when it started and ended."""

    rows: int
    width: int
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@contextlib.contextmanager
def timed_forwards(model) -> Iterator[list[Forward]]:
    """Inside the block every forward of `model` is appended to the list it yields, a CUDA device synchronized around
    each so its time is its own; a model that is no torch module (vLLM's) records none."""
    log: list[Forward] = []
    if not isinstance(model, torch.nn.Module):
        yield log
        return
    cuda = input_device(model).type == "cuda"
    started: list[float] = []

    def clock() -> float:
        if cuda:
            torch.cuda.synchronize()
        return perf_counter()

    def before(module, args, kwargs) -> None:
        started.append(clock())

    def after(module, args, kwargs, output) -> None:
        rows, width = kwargs["input_ids"].shape[:2]
        log.append(Forward(rows, width, started.pop(), clock()))

    handles = [model.register_forward_pre_hook(before, with_kwargs=True),
               model.register_forward_hook(after, with_kwargs=True)]
    try:
        yield log
    finally:
        for handle in handles:
            handle.remove()


@dataclass(frozen=True)
class StepCost:
    """A decode step's seconds: `fixed` per step plus `per_row` for each row it decodes (step_cost measures them; the
    default counts rows alone)."""

    fixed: float = 0.0
    per_row: float = 1.0

    def __call__(self, rows: float) -> float:
        return self.fixed + self.per_row * rows


@torch.inference_mode()
def step_cost(model, batch_size: int) -> StepCost:
    """A decode step's cost on `model`, from PROBE_STEPS steps after a one-token prompt at 1 row and at `batch_size`
    rows: what a step costs whatever its rows (weights read, launches) and what each row adds; a model that is no
    torch module gets the default."""
    if not isinstance(model, torch.nn.Module):
        return StepCost()
    one, full = (_step_seconds(model, rows) for rows in (1, batch_size))
    per_row = max(full - one, 0.0) / (batch_size - 1) if batch_size > 1 else 0.0
    return StepCost(max(one - per_row, 0.0), per_row)


def _step_seconds(model, rows: int) -> float:
    """The median seconds of one decode step of `rows` rows on `model`."""
    key = cache_keyword(model)
    token = torch.zeros(rows, 1, dtype=torch.long, device=input_device(model))
    cache = getattr(model(input_ids=token, use_cache=True), key)
    with timed_forwards(model) as log:
        for _ in range(PROBE_STEPS):
            model(input_ids=token, use_cache=True, **{key: cache})
    return statistics.median(f.seconds for f in log)


def pool_positions(runner: Runner, items: Sequence[Item]) -> int:
    """The positions the engine computes for `items` as one pool (behavioral.inference.prefix_plan): each prompt after the prefix
    it reads from the cache, each cached prefix once after the longest one it extends, and the answer tree of each
    scored item; padding aside."""
    ids = [runner.tokens(item) for item in items]
    cached = cached_prefixes(ids)
    shared = with_branch_points(tuple(p[:k]) for p, k in zip(ids, cached))

    def below(prefix: tuple[int, ...]) -> int:
        return max((len(q) for q in shared if len(q) < len(prefix) and prefix[:len(q)] == q), default=0)

    tries = [runner.trie(item.answers) for item in items
             if runner.config.mode != "generate" and item.answers is not None]
    return (sum(len(p) - k for p, k in zip(ids, cached)) + sum(len(p) - below(p) for p in shared)
            + sum(len(trie) + len(trie.prefill) for trie in tries))


@dataclass(frozen=True)
class SampledRun:
    """A run's cost from a few of its prompts timed (sample_run): the run's items, result rows and batch size and the
    positions an item costs in its pools; the sample's rows, positions, seconds and forwards; the run's results on
    disk."""

    items: int
    rows: int
    batch_size: int
    item_positions: float
    timed_rows: int
    timed_positions: int
    timed_seconds: float
    forwards: tuple[Forward, ...]
    result_bytes: float

    def replies(self) -> list[list[Forward]]:
        """Each batch of the sample that decoded: its prompt forward, then its steps (one-position forwards)."""
        batches: list[list[Forward]] = []
        for f in self.forwards:
            if f.width > 1:
                batches.append([f])
            elif batches:
                batches[-1].append(f)
        return [b for b in batches if len(b) > 1]

    def seconds(self, step: StepCost) -> float:
        """The run's seconds: everything but decoding (prompt forwards, answer trees, the rest) per position of the
        run's pools; decoding (from a batch's prompt forward to its last step, per-token work included) as `step`
        prices it, each batch of the run paying a step's fixed cost for as many steps as the sample's longest reply
        and every row its share of the sample's row-steps, scaled to what the sample's decoding took."""
        replies = self.replies()
        steps = [f for batch in replies for f in batch[1:]]
        decoding = sum(batch[-1].end - batch[0].end for batch in replies)
        rest = (self.timed_seconds - decoding) * self.items * self.item_positions / self.timed_positions
        if not steps:
            return rest
        scale = decoding / sum(step(f.rows) for f in steps)
        longest = max(len(batch) - 1 for batch in replies)
        row_steps = sum(f.rows for f in steps) * self.rows / self.timed_rows
        return rest + scale * (step.fixed * longest * math.ceil(self.rows / self.batch_size)
                               + step.per_row * row_steps)

    def describe(self) -> str:
        """How the estimate was made, for the user."""
        replies = self.replies()
        longest = f", replies up to {max(len(b) for b in replies)} tokens" if replies else ""
        return f"{self.timed_rows} of {self.rows} prompts timed{longest}"


def sampled_items(items: int, samples: int, sample: int) -> int:
    """The items sample_run times of a run of `items` items and `samples` samples each: `sample` prompts' worth,
    at least one."""
    return min(items, max(1, sample // samples))


def sample_run(config: RunConfig, loaded: tuple, out: str | Path, sample: int) -> SampledRun:
    """Time `sample` prompts of a run on a loaded model (sampled_items): consecutive items from the middle of the run
    (sharing prefixes as the run's batches do), after the positions of the run's pool around them are counted (which
    also builds the answer trees the run builds once). The suite prepares its data into `out` as the run would."""
    runner, units = prepared_units(config, loaded, out)
    items = [item for unit in units for item in unit.items]
    middle, pool = len(items) // 2, POOL_BATCHES * config.batch_size
    count = sampled_items(len(items), config.samples, sample)
    chosen = items[middle - count // 2:][:count]
    pooled = items[max(0, middle - pool // 2):][:pool]
    positions = pool_positions(runner, pooled) / len(pooled)
    start = perf_counter()
    with timed_forwards(loaded[0]) as log:
        rows, _ = runner.rows([WorkUnit(units[0].unit_id, units[0].group, tuple(chosen))])
    seconds = perf_counter() - start
    return SampledRun(len(items), len(items) * config.samples, config.batch_size, positions, len(rows),
                      pool_positions(runner, chosen), seconds, tuple(log),
                      result_bytes(runner, rows, len(items) * config.samples))
