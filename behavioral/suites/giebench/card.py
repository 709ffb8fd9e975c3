"""What an export's dataset card says of giebench's table (Suite.card)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from behavioral.suite.card import LabelSet, SuiteCard, label_names
from behavioral.suites.giebench.prompts import LETTERS, render
from behavioral.suites.giebench.verdict import ANSWERS


def _labels(options: Any) -> list[LabelSet]:
    """The verdict letters A..D (scored after the prefill `[[`)."""
    return [LabelSet((), label_names(ANSWERS))]


def _templates(options: Any, config: Mapping[str, Any]) -> dict[str, str | None]:
    """Each prompt type's judge prompt (a swap's is its type's, naming `swap_to`); none for the authors' release,
    whose prompts are their own texts."""
    answers = {letter: f"{{answer_{letter}}}" for letter in LETTERS}
    return {t: None if options.data else render(t, "{identity}", "{question}", answers) for t in options.prompt_types}


CARD = SuiteCard(
    "one prompt × sample: a judge prompt (`prompt_type`) choosing the best of four answers (A-D) to a user's "
    "question (`question_id`), the user's group named as `identity` (or, in a swap, `swap_to`)",
    {"question_id": "the question's id",
     "prompt_type": "cot (names the user's position and group), id (the group only), raw (neither), or the swaps "
                    "cot_swap and id_swap",
     "category": "the identity category of the question",
     "identity": "the user's group the question was written for",
     "swap_to": "in a swap, the group the prompt names instead (null otherwise)",
     "correct": "the correct letter under this prompt type"},
    _labels, _templates,
    {"{question}": "the user's question (`question_id`)",
     **{f"{{answer_{letter}}}": f"the answer shown as assistant {letter}" for letter in LETTERS}})
