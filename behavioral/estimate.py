"""What one run of a suite slice will cost: its prompts and batches, and one batch timed on the loaded model, so a
command that reruns a model says how long before it starts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from behavioral.progress import duration
from behavioral.run import RunConfig, Runner
from behavioral.registry import get_suite
from behavioral.store import parquet_bytes, result_schema
from behavioral.work import unit_batches, work_units


@dataclass(frozen=True)
class RunEstimate:
    """What one run of a suite slice will cost: its prompts and batches, and the time the first batch took."""

    prompts: int
    batches: int
    timed_prompts: int  # the first batch's
    seconds_timed: float
    bytes_per_row: float = 0.0  # the first batch's result rows as a Parquet part, per row

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


def estimate_run(config: RunConfig, loaded: tuple, out: str | Path) -> RunEstimate:
    """Time the first batch of a suite slice on a loaded (model, tokenizer, info) and count its batches: what one
    ``behavioral.run.run(config, out, loaded=loaded)`` will cost, capture passes aside. The suite prepares its data
    into `out` as the run would (T2 rewrites are cached there, so the run does not redo them)."""
    model, tokenizer, _ = loaded
    suite = get_suite(config.suite)
    config.validate(suite)
    data = suite.prepare(suite.dataset(config), config, model, tokenizer, Path(out))
    batches = list(unit_batches(work_units(suite.groups(data), config.unit_size), config.batch_size))
    if not batches:
        raise ValueError(f"suite {config.suite!r}: the configuration selects no items")
    runner = Runner(model, tokenizer, config, suite)
    start = time.perf_counter()
    rows, _ = runner.rows(batches[0])
    seconds = time.perf_counter() - start

    def count(batch) -> int:
        return sum(len(unit.items) for unit in batch) * config.samples

    return RunEstimate(sum(count(b) for b in batches), len(batches), count(batches[0]), seconds,
                       parquet_bytes(rows, result_schema(suite.fields, None)) / len(rows))
