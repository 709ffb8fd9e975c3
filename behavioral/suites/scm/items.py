"""One item per (template, group, trait): the prompt, the A-E answer set and the reply parser."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.prompt import Prompt
from behavioral.suite.protocol import Answer
from behavioral.suites.scm import prompts
from behavioral.suites.scm.answers import ANSWERS, RATINGS, parse_reply, reply_decided
from behavioral.suites.scm.groups import Group
from behavioral.suites.scm.traits import check_trait



@dataclass(frozen=True)
class ScmItem:
    """A question about one group's trait in one of Table 6's phrasings."""

    template: str
    group: Group
    trait: str
    answers: AnswerSpec = ANSWERS

    @cached_property
    def item_id(self) -> str:
        return f"{self.template}|{self.group.name}|{self.trait}"

    @property
    def fields(self) -> dict[str, str]:
        return {"group": self.group.name, "trait": self.trait, "template": self.template}

    def prompt(self) -> Prompt:
        return prompts.build(self.template, self.group, self.trait)

    def parse(self, text: str) -> Answer:
        letter = parse_reply(text)
        return Answer(letter, float(RATINGS[letter])) if letter in RATINGS else Answer(None)

    def decided(self, text: str) -> bool:
        return reply_decided(text)


def items(groups: Sequence[Group], traits: Sequence[str], templates: Sequence[str]) -> list[ScmItem]:
    """Every (template, group, trait) item, template-major, then groups and traits in the order given."""
    for trait in traits:
        check_trait(trait)
    return [ScmItem(prompts.check_template(t), g, trait) for t in templates for g in groups for trait in traits]
