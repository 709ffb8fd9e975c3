"""What a suite is: a dataset of items (each with a stable id, its fields, a prompt with identity slots marked, an
answer set and a parser), its own options, and an analysis of a finished run. The run loop, the engine, resume,
sharding, capture and the run directory are shared by every suite (behavioral.run)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from behavioral.answer_space import AnswerSpec
from behavioral.prompt import Prompt


@dataclass(frozen=True)
class Answer:
    """A reply as parsed: its label (None where the reply was refused or held no valid answer) and value."""

    label: int | str | None
    value: float | None = None

    @property
    def refused(self) -> bool:
        """True where the reply gave no valid answer."""
        return self.label is None


class Item(Protocol):
    """One thing the model answers. `fields` become result columns (the suite's `fields`, in that order). `decided`
    is optional: without it a reply is decoded until the turn ends or max_new_tokens. `answers` None makes an
    open-ended item: generated in every --mode (never scored), its reply read by `parse`."""

    item_id: str
    answers: AnswerSpec | None

    @property
    def fields(self) -> Mapping[str, str]: ...

    def prompt(self) -> Prompt: ...

    def parse(self, text: str) -> Answer: ...

    def decided(self, text: str) -> bool:
        """True once no continuation of `text` can change parse(text), so decoding may stop early."""
        ...


@dataclass(frozen=True)
class CaptureSpec:
    """Where a suite's identity activations live. `spans`: capture kind -> (prompt slot, the item fields that
    decide the prompt up to the end of that slot, so one forward per distinct value serves every item); `cell`:
    the item fields whose final-token states are pooled into one mean."""

    spans: Mapping[str, tuple[str, tuple[str, ...]]]
    cell: tuple[str, ...]

    @property
    def kinds(self) -> tuple[str, ...]:
        """The capture kinds a run may ask for: the spans', then `final`."""
        return (*self.spans, "final")


def comma_values(values: str | Sequence[str] | None) -> list[str]:
    """Flag values given repeated and/or comma-separated ("a,b" "c"), stripped, in order, without repeats."""
    if isinstance(values, str):
        values = [values]
    return list(dict.fromkeys(v.strip() for value in values or () for v in value.split(",") if v.strip()))


def choices(values: str | Sequence[str] | None, known: Sequence[str], what: str,
            fold: Callable[[str], str] = str) -> tuple[str, ...]:
    """Repeated/comma-separated flag values, or all of `known` (none given, or `all`); names are compared after
    `fold` and an unknown one is a ValueError naming the known ones."""
    names = comma_values(values)
    if not names or "all" in names:
        return tuple(known)
    by_key = {fold(k): k for k in known}
    for name in names:
        if fold(name) not in by_key:
            raise ValueError(f"unknown {what} {name!r}; expected one of {', '.join(known)} or all")
    return tuple(dict.fromkeys(by_key[fold(n)] for n in names))


def local_path(path: str | None) -> str | None:
    """An existing local path made absolute (so `tiny/`, `./tiny` and `tiny` are one model or corpus in a manifest);
    anything else (a hub id, a missing path) as given."""
    return str(Path(path).resolve()) if path and Path(path).exists() else path


class Suite:
    """A benchmark on the shared engine. Subclasses set the class attributes and implement `groups` and `analyze`;
    the other methods have defaults that suit a suite without options."""

    name: str = ""
    description: str = ""  # one line, for `empathy-gap suites`
    fields: tuple[str, ...] = ()  # item fields stored as columns
    capture: CaptureSpec | None = None  # None: the suite's runs cannot capture activations
    caches: tuple[str, ...] = ()  # files `prepare` keeps in a run directory, which a user may copy into a new one
    Options: type | None = None  # the suite's options dataclass (None: no options), rebuilt from a manifest's JSON
    # the suite's own defaults for the run flags every suite has (e.g. the authors' decoding), by RunConfig field
    run_defaults: Mapping[str, Any] = {}
    imports: str | None = None  # what `empathy-gap import SUITE` reads (its help line); None: the suite has no import

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the suite's own flags to `empathy-gap run SUITE`."""

    def options(self, args: argparse.Namespace) -> Any:
        """The suite's options from parsed flags: a frozen dataclass, recorded in the manifest (what decides rows)."""
        return None

    def dataset(self, config) -> Any:
        """Read and check the data of a run (`config` is its RunConfig, `config.options` the suite's) before any
        model loads; bad input raises ValueError naming the file or value."""
        return None

    def prepare(self, data: Any, config, model, tokenizer, out: Path) -> Any:
        """Work on the data that needs the model (e.g. rewriting texts), cached in `out`: the main rank runs it first,
        then the others, which find its results there. `config` is the run's RunConfig."""
        return data

    def facts(self, data: Any) -> dict:
        """What the manifest records about the data (hashes, counts); a resume must find the same."""
        return {}

    def groups(self, data: Any) -> Iterable[tuple[str, Sequence[Item]]]:
        """(group key, items) in run order. Work units are chunks of one group; their ids are `{group}|{chunk}`."""
        raise NotImplementedError

    def length_probes(self, data: Any, n_tokens: Callable[[Item], int]) -> Iterable[Item]:
        """Items whose prompts bound every prompt's length (checked against the model's context before any work);
        `n_tokens(item)` counts an item's prompt tokens. By default every item."""
        return (item for _, items in self.groups(data) for item in items)

    def add_import_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the flags of `empathy-gap import SUITE` (suites that set `imports`)."""

    def import_results(self, args: argparse.Namespace) -> Path:
        """Write results made elsewhere (e.g. the authors' outputs) as a run directory `analyze` reads; returns it."""
        raise NotImplementedError(f"suite {self.name!r} imports nothing")

    def add_analyze_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the suite's own flags to `empathy-gap analyze`."""

    def analyze(self, run_dirs: Sequence[Path], out: Path | None, args: argparse.Namespace) -> Path:
        """Tables, figures and report.md of finished runs; returns the report's path."""
        raise NotImplementedError
