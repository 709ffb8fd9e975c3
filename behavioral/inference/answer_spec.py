"""What a suite accepts as an answer, independent of any tokenizer and of torch: labels, each with its surface forms
and an optional value, and an optional assistant prefill (behavioral.inference.answer_space builds a model's trie of
it and reads distributions over it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Label:
    """One answer: its name (an int for a number), its surface forms, and its value for expectations."""

    name: int | str
    forms: tuple[str, ...]
    value: float | None = None


@dataclass(frozen=True)
class AnswerSpec:
    """A closed answer set, independent of any tokenizer (hashable, so one trie serves every item that shares it)."""

    labels: tuple[Label, ...]
    prefill: str = ""
    numeric: bool = False  # integers: a digit token continues a number and starts one

    @classmethod
    def integers(cls, low: int, high: int) -> "AnswerSpec":
        """The integers low..high, each written in digits, valued as itself."""
        return cls(tuple(Label(v, (str(v),), float(v)) for v in range(low, high + 1)), numeric=True)

    @classmethod
    def choices(cls, forms: Mapping[str, Sequence[str]], values: Mapping[str, float] | None = None,
                prefill: str = "") -> "AnswerSpec":
        """Labels from {name: surface forms}, optionally valued, optionally after an assistant prefill."""
        values = values or {}
        return cls(tuple(Label(name, tuple(f), values.get(name)) for name, f in forms.items()), prefill)

    @property
    def names(self) -> tuple[int | str, ...]:
        """Label names in order."""
        return tuple(label.name for label in self.labels)

    @property
    def values(self) -> tuple[float, ...] | None:
        """Label values in order, or None unless every label has one."""
        values = tuple(label.value for label in self.labels)
        return None if any(v is None for v in values) else values
