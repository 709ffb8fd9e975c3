"""Seed 000's prompts: a setting's system and user templates filled, the perceiver and experiencer marked."""

from __future__ import annotations

from behavioral.inference.prompt import Prompt, from_templates
from behavioral.suites.intergroup.settings import Setting, get_setting

IDENTITY_SLOTS = ("perceiver", "experiencer")


def build(setting: Setting | str, perceiver: str, experiencer: str, emotion: str, narrative: str) -> Prompt:
    """The system and user messages of one prompt, with the perceiver and experiencer spans."""
    setting = get_setting(setting) if isinstance(setting, str) else setting
    values = {"perceiver": perceiver, "experiencer": experiencer, "emotion": emotion, "narrative": narrative}
    templates = (("system", setting.system_template), ("user", setting.user_template))
    return from_templates(templates, values, IDENTITY_SLOTS)


def messages(setting: Setting | str, perceiver: str, experiencer: str, emotion: str, narrative: str) -> list[dict]:
    """The system and user messages of one prompt, rendered as the authors' released code renders them."""
    return [dict(m) for m in build(setting, perceiver, experiencer, emotion, narrative).messages]
