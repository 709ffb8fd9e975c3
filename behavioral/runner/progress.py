"""Long forwards tell their cost: the forwards planned, an estimate after the first one, a progress bar (a suite
run's estimate is behavioral.runner.estimate's)."""

from __future__ import annotations

import time

from tqdm import tqdm


def counted(n: int, noun: str) -> str:
    """`n` and `noun`, plural but for one: ``1 run``, ``2 runs``, ``0 runs``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def duration(seconds: float) -> str:
    """A rough human duration: ``40 s``, ``12 min``, ``2.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class ForwardBar:
    """A progress bar over the forwards of one job: `setup` forwards (e.g. source prefixes) then `main` ones.

    Opening it prints the plan; after the first main forward it prints an estimate of the whole job (the time so far
    plus that forward's time for each one left), and the bar shows its own ETA from then on. Disabled, it is silent.
    """

    def __init__(self, label: str, setup: int, main: int, what: str = "", enabled: bool = True):
        self.label, self.setup, self.total, self.enabled = label, setup, setup + main, enabled
        self.done = 0
        if enabled:
            detail = f": {what}" if what else ""
            tqdm.write(f"{label}: {self.total} forwards planned ({setup} setup, {main} main{detail})")
        self._bar = tqdm(total=self.total, unit="forward", desc=label, disable=not enabled)
        self._start = self._last = time.perf_counter()

    def tick(self) -> None:
        """One forward done."""
        now = time.perf_counter()
        self.done += 1
        if self.enabled and self.done == self.setup + 1:
            per = now - self._last
            left = self.total - self.done
            tqdm.write(f"{self.label}: one main forward took {per:.1f} s; estimated "
                       f"{duration(now - self._start + per * left)} in all")
        self._last = now
        self._bar.update()

    def close(self) -> None:
        """Close the bar."""
        self._bar.close()

    def __enter__(self) -> "ForwardBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
