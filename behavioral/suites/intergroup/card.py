"""What an export's dataset card says of intergroup's table (Suite.card)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from behavioral.suite.card import LabelSet, SuiteCard, label_names
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.suites.intergroup.settings import get_setting


def _labels(options: Any) -> list[LabelSet]:
    """The integers 0..max of each setting's scale."""
    return [LabelSet((("setting", s),), label_names(AnswerSpec.integers(0, get_setting(s).max_rating)))
            for s in options.settings]


def _templates(options: Any, config: Mapping[str, Any]) -> dict[str, str | None]:
    """Each setting's system and user templates."""
    return {f"{s} {role}": getattr(get_setting(s), f"{role}_template") for s in options.settings
            for role in ("system", "user")}


CARD = SuiteCard(
    "one prompt × sample: a model told it is a persona (`perceiver`) rates how intensely someone (`experiencer`) "
    "felt the emotion (`emotion`) of an event (`event_id`), in one prompt setting (`setting`)",
    {"setting": "the prompt setting (Table 2): persona prompt P0-P3, scale S0 (0-100) or S1 (0-10), task "
                "instruction T0-T2",
     "category": "the identity category (Table 1) of the perceiver and experiencer",
     "perceiver": "the persona the system prompt gives the model",
     "experiencer": "who the user prompt says felt the event",
     "event_id": "the event's id in the corpus",
     "emotion": "the emotion the experiencer felt, named in the prompt"},
    _labels, _templates,
    {"{narrative}": "the event's narrative (`event_id` in the corpus) in the form the setting's task instruction "
                    "quotes: as written (T0), told in the first person (T1) or reframed in the third person (T2)"})
