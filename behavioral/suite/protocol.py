"""What a suite is: a dataset of items (each with a stable id, its fields, a prompt with identity slots marked, an
answer set and a parser), its own options, and an analysis of a finished run. The run loop, the engine, resume,
sharding, capture and the run directory are shared by every suite (behavioral.runner.run)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from behavioral.core.options import add_flags, from_flags
from behavioral.inference.prompt import Prompt

if TYPE_CHECKING:
    import pandas as pd

    from behavioral.report.blocks import Analysis
    from behavioral.rundir.run import Run
    from behavioral.inference.answer_spec import AnswerSpec
    from behavioral.suite.card import SuiteCard


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
    decide the prompt up to the end of that slot, so one forward per distinct value serves every item; the last of
    them holds the slot's own value, the identity the kind's states are read by); `cell`: the item fields whose
    final-token states are pooled into one mean."""

    spans: Mapping[str, tuple[str, tuple[str, ...]]]
    cell: tuple[str, ...]

    @property
    def kinds(self) -> tuple[str, ...]:
        """The capture kinds a run may ask for: the spans', then `final`."""
        return (*self.spans, "final")


def local_path(path: str | None) -> str | None:
    """An existing local path made absolute (so `tiny/`, `./tiny` and `tiny` are one model or corpus in a manifest);
    anything else (a hub id, a missing path) as given."""
    return str(Path(path).resolve()) if path and Path(path).exists() else path


class SuiteDeclaration:
    """What a suite declares without its data, items or analysis: its name, options, result columns, run defaults,
    capture kinds and flags. The command line parses `empathy-gap run SUITE` and a RunConfig checks its settings from this alone, so
    neither imports the suite's analysis, the engine or torch; a suite's options module declares it (the registry
    finds it there) and its Suite inherits it."""

    name: str = ""
    description: str = ""  # one line, for `empathy-gap suites`
    capture: CaptureSpec | None = None  # None: the suite's runs cannot capture activations
    Options: type | None = None  # the suite's options dataclass (None: no options), rebuilt from a manifest's JSON
    fields: tuple[str, ...] = ()  # item fields stored as columns
    # the suite's own defaults for the decoding settings every suite has (e.g. its authors'), by RunConfig field;
    # RunConfig applies them, the CLI shows them
    run_defaults: Mapping[str, Any] = {}
    imports: str | None = None  # what `empathy-gap import SUITE` reads (its help line); None: the suite has no import

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the suite's own flags to `empathy-gap run SUITE`: by default, its Options' declared flags."""
        if self.Options is not None:
            add_flags(parser, self.Options)

    def options(self, args: argparse.Namespace) -> Any:
        """The suite's options from parsed flags: a frozen dataclass, recorded in the manifest (what decides rows)."""
        return None if self.Options is None else from_flags(self.Options, args)

    def add_import_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the flags of `empathy-gap import SUITE` (suites that set `imports`)."""


class Suite(SuiteDeclaration):
    """A benchmark on the shared engine. Subclasses set the class attributes and implement `groups` and `analyze`;
    the other methods have defaults that suit most suites.

    Options are declared once: `Options` and `AnalyzeOptions` are frozen dataclasses whose fields carry their flags
    (behavioral.core.options.option), so `empathy-gap run/analyze` and a script build the same thing."""

    caches: tuple[str, ...] = ()  # files `prepare` keeps in a run directory, which a user may copy into a new one
    AnalyzeOptions: type | None = None  # the options of its analysis (None: none)
    # mechanistic study name -> this suite's protocol for it (e.g. "patch": interp.patching.SlotPatching naming the
    # slot patched); a study reaches a suite only through these and the methods below
    protocols: Mapping[str, Any] = {}
    rows_hold: str = "the item fields"  # what a run's rows hold of its data's texts (an export's card says it)
    card: SuiteCard | None = None  # what an export's dataset card says of its table (None: the card says none is)

    def user_data(self, config: Mapping[str, Any]) -> str | None:
        """The data the user gave a run (a path, from its manifest's `config`), whose texts no licence lets an
        export carry; None where its items come from the data the suite ships."""
        return None

    def data_licence(self, config: Mapping[str, Any]) -> tuple[str, str]:
        """(what the shipped data is, its Hugging Face licence id) for a run on the suite's own data."""
        return "the project's own data, shipped with empathy-gap under MIT", "mit"

    def dataset(self, config) -> Any:
        """Read and check the data of a run (`config` is its RunConfig, `config.options` the suite's) before any
        model loads; bad input raises ValueError naming the file or value."""
        return None

    def prepare(self, data: Any, config, model, tokenizer, out: Path) -> Any:
        """Work on the data that needs the model (e.g. rewriting texts), cached in `out`: the main rank runs it first,
        then the others, which find its results there. `config` is the run's RunConfig. With `model` None (a
        finished run's plan derived without loading it) it uses only what `out` caches, writes nothing, and raises
        ValueError where that is not enough."""
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

    def import_results(self, args: argparse.Namespace) -> Path:
        """Write results made elsewhere (e.g. the authors' outputs) as a run directory `analyze` reads; returns it."""
        raise NotImplementedError(f"suite {self.name!r} imports nothing")

    def view(self, rows: pd.DataFrame, config: dict) -> pd.DataFrame:
        """A run's stored rows as the suite's analysis reads them (`config`: the run's manifest config): the one place
        where the answer of a generate, score or both run is chosen. By default the stored rows."""
        return rows

    def behaviour(self, run: Run, **where: Any) -> pd.DataFrame:
        """Behaviour per identity of one run (its rows selected by field values in `where`, e.g. setting="P0S0T0"),
        for the mechanistic studies: columns `kind` (a capture span kind), `identity` (the value its slot field
        holds in the activation index), then one float column per feature (NaN where a feature does not apply to
        an identity). Each suite says what its features mean in its card."""
        raise NotImplementedError(f"suite {self.name!r} declares no behaviour per identity")

    def identity_set(self, kind: str, identities: Sequence[str]) -> tuple[list[str], list[str] | None]:
        """The identities of a span kind a study compares, in the suite's order (e.g. a paper's table order, without
        a baseline such as "a person"), and a grouping label per identity for cluster statistics (None: no grouping
        beyond the identities). By default all, sorted, ungrouped."""
        return sorted(identities), None

    def cell_labels(self, cells: pd.DataFrame) -> pd.DataFrame:
        """Labels the suite derives for rows of a final-token index (cells or samples), one column each, for probes
        and steering (e.g. intergroup's `ingroup`: perceiver and experiencer in one group; NA where undefined), on
        the same index. By default none."""
        return cells[[]]

    def with_identity(self, item: Item, field: str, value: str) -> Item:
        """`item` with `value` in its identity field `field` (a prompt slot's value), for the prompts a mechanistic
        study compares; by default `dataclasses.replace`, which suits items that are dataclasses with that field."""
        if not dataclasses.is_dataclass(item) or field not in {f.name for f in dataclasses.fields(item)}:
            raise ValueError(f"suite {self.name!r}: its items have no field {field!r} to set; expected a dataclass "
                             "item with that field, or a Suite.with_identity of its own")
        return dataclasses.replace(item, **{field: value})

    def analyze(self, runs: Sequence[Run], options: Any) -> Analysis:
        """The analysis of finished runs (`options`: an AnalyzeOptions): every run's tables, the comparison across
        runs where there are several, figures and notes, declared for behavioral.analysis to write."""
        raise NotImplementedError
