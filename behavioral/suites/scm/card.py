"""What an export's dataset card says of scm's table (Suite.card)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from behavioral.suite.card import LabelSet, SuiteCard, label_names
from behavioral.suites.scm.answers import ANSWERS
from behavioral.suites.scm.prompts import QUESTIONS, TEMPLATE


def _labels(options: Any) -> list[LabelSet]:
    """The letters A (extremely) .. E (not at all), rated 5 .. 1."""
    return [LabelSet((), label_names(ANSWERS), ANSWERS.values)]


def _templates(options: Any, config: Mapping[str, Any]) -> dict[str, str | None]:
    """Table 6's prompt, then each question the run asked in its {question}."""
    return {"user": TEMPLATE} | {f"question {t}": QUESTIONS[t] for t in options.templates}


CARD = SuiteCard(
    "one prompt × sample: a question (`template`) on how `trait` a group (`group`) is, answered A (extremely) to "
    "E (not at all)",
    {"group": "the group the question asks about (Table 1)",
     "trait": "the trait asked about (Table 2)",
     "template": "the question's id in Table 6 (f01..f10, i01..i10)"},
    _labels, _templates,
    {"{question}": "the question `template` names (below as `question <template>`), its placeholders filled",
     "[identity]": "the group (`group`)",
     "[trait]": "the trait (`trait`)",
     "{identity_definition}": "the definition of the group's marker (disabled for disabled women), byte-exact "
                              "from the seed's Table 4 (behavioral/suites/scm/groups.py); for disabled it begins "
                              "\"A disabled person is someone who\"",
     "{trait_definition}": "the definition of `trait`, byte-exact from the seed's Table 5 "
                           "(behavioral/suites/scm/traits.py); for competent it begins \"'competent' describes "
                           "someone\""})
