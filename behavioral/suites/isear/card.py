"""What an export's dataset card says of isear's table (Suite.card)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from behavioral.suite.card import LabelSet, SuiteCard
from behavioral.suites.isear.prompts import EMOTIONS


def _labels(options: Any) -> list[LabelSet]:
    """The twelve emotions."""
    return [LabelSet((), EMOTIONS)]


def _templates(options: Any, config: Mapping[str, Any]) -> dict[str, str | None]:
    """The run's user template (GenderBench's, or the text of the user's --template file)."""
    return {"user": options.template}


CARD = SuiteCard(
    "one prompt × sample: an event (`event`) role-played as a gender (`gender`), the model naming its main emotion "
    "among twelve",
    {"event_id": "the event's id: its source and 0-based index there (isear-00428, project-00003, file-00000)",
     "position": "the event's place in the run's order, 0..",
     "gender": "the gender role-played: a man, a woman or a non-binary person",
     "event": "the event's text, as the prompt quotes it"},
    _labels, _templates,
    {"{emotions}": "the twelve emotions (the labels of `probs`), comma-separated in that order"})
