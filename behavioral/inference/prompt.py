"""Prompts of any suite: chat messages, and where each identity slot was written in them."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """Where a template slot was filled: message index and character span in that message's content."""

    name: str
    message: int
    start: int
    end: int


@dataclass(frozen=True)
class Prompt:
    """Chat messages of one prompt plus the character spans of its identity slots.

    The same prompt renders through a chat template or, for base models and instruction formats such as
    "### Instruction: ... ### Answer:", as plain text (behavioral.inference.chat).
    """

    messages: tuple[dict, ...]
    slots: tuple[Slot, ...] = ()

    def text(self, slot: Slot) -> str:
        """The string `slot` was filled with."""
        return self.messages[slot.message]["content"][slot.start:slot.end]


def fill(template: str, values: Mapping[str, str], message: int, slots: Sequence[str]) -> tuple[str, list[Slot]]:
    """Format `template` with `values` and record the span of every field named in `slots`."""
    out, found, pos = [], [], 0
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(literal)
        pos += len(literal)
        if field is None:
            continue
        value = values[field]
        if field in slots:
            found.append(Slot(field, message, pos, pos + len(value)))
        out.append(value)
        pos += len(value)
    return "".join(out), found


def from_templates(templates: Sequence[tuple[str, str]], values: Mapping[str, str],
                   slots: Sequence[str] = ()) -> Prompt:
    """A prompt of (role, template) messages filled with `values`, the fields named in `slots` marked."""
    messages, marked = [], []
    for i, (role, template) in enumerate(templates):
        content, found = fill(template, values, i, slots)
        messages.append({"role": role, "content": content})
        marked += found
    return Prompt(tuple(messages), tuple(marked))
