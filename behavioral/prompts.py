"""Prompt building: fill a setting's templates and remember where each identity was written."""

from __future__ import annotations

import string
from dataclasses import dataclass

from behavioral.settings import Setting, get_setting

IDENTITY_SLOTS = ("perceiver", "experiencer")


@dataclass(frozen=True)
class Slot:
    """Where a template slot was filled: message index and character span in that message's content."""

    name: str
    message: int
    start: int
    end: int


@dataclass(frozen=True)
class Prompt:
    """Chat messages of one prompt plus the character spans of its identity slots."""

    messages: tuple[dict, ...]
    slots: tuple[Slot, ...]


def _fill(template: str, values: dict[str, str], message: int) -> tuple[str, list[Slot]]:
    """Format `template` and record the span of every identity slot it fills."""
    out, slots, pos = [], [], 0
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(literal)
        pos += len(literal)
        if field is None:
            continue
        value = values[field]
        if field in IDENTITY_SLOTS:
            slots.append(Slot(field, message, pos, pos + len(value)))
        out.append(value)
        pos += len(value)
    return "".join(out), slots


def build(setting: Setting | str, perceiver: str, experiencer: str, emotion: str, narrative: str) -> Prompt:
    """The system and user messages of one prompt, with the perceiver and experiencer spans."""
    setting = get_setting(setting) if isinstance(setting, str) else setting
    values = {"perceiver": perceiver, "experiencer": experiencer, "emotion": emotion, "narrative": narrative}
    system, system_slots = _fill(setting.system_template, values, 0)
    user, user_slots = _fill(setting.user_template, values, 1)
    messages = ({"role": "system", "content": system}, {"role": "user", "content": user})
    return Prompt(messages, tuple(system_slots + user_slots))


def messages(setting: Setting | str, perceiver: str, experiencer: str, emotion: str, narrative: str) -> list[dict]:
    """The system and user messages of one prompt, rendered as the authors' released code renders them."""
    return [dict(m) for m in build(setting, perceiver, experiencer, emotion, narrative).messages]
