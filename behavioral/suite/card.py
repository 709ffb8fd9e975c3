"""What an export's dataset card says of a suite's table, declared by the suite itself (Suite.card): what one row is,
what each item field holds, the label order of `probs` (and the value each label stands for), a run's prompt
templates (from its options and manifest config) and what fills each of their placeholders that no item field
names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from behavioral.inference.answer_spec import AnswerSpec


@dataclass(frozen=True)
class LabelSet:
    """The labels of `probs`, in its order, on the rows whose item fields hold `rows` (none: every scored row), and
    the value each stands for (`value`, `score_value`, `expected`) where the labels are not those numbers."""

    rows: tuple[tuple[str, str], ...]
    labels: tuple[str, ...]
    values: tuple[float, ...] = ()


@dataclass(frozen=True)
class SuiteCard:
    """What the card says of one suite's table: a row, its item fields, per run (from its options and config) the
    label sets of `probs` and the prompt templates by name (None where the text is not the suite's own), and what
    fills each placeholder of the templates that is not an item field (as the template writes it: `{question}`)."""

    row: str
    fields: Mapping[str, str]
    labels: Callable[[Any], list[LabelSet]]
    templates: Callable[[Any, Mapping[str, Any]], dict[str, str | None]]
    placeholders: Mapping[str, str] = field(default_factory=dict)


def label_names(spec: AnswerSpec) -> tuple[str, ...]:
    """An AnswerSpec's label names as the rows write them (`answer`, `score_answer`)."""
    return tuple(str(name) for name in spec.names)
