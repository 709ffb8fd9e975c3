"""What an export's dataset card says of a suite's table, declared by the suite itself (Suite.card): what one row is,
what each item field holds, the label order of `probs` and a run's prompt templates (from its options and manifest
config)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from behavioral.answer_space import AnswerSpec


@dataclass(frozen=True)
class LabelSet:
    """The labels of `probs`, in its order, on the rows whose item fields hold `rows` (none: every scored row)."""

    rows: tuple[tuple[str, str], ...]
    labels: tuple[str, ...]


@dataclass(frozen=True)
class SuiteCard:
    """What the card says of one suite's table: a row, its item fields, and per run (from its options and config)
    the label sets of `probs` and the prompt templates by name (None where the text is not the suite's own)."""

    row: str
    fields: Mapping[str, str]
    labels: Callable[[Any], list[LabelSet]]
    templates: Callable[[Any, Mapping[str, Any]], dict[str, str | None]]


def label_names(spec: AnswerSpec) -> tuple[str, ...]:
    """An AnswerSpec's label names as the rows write them (`answer`, `score_answer`)."""
    return tuple(str(name) for name in spec.names)
