"""The evaluation sample: templates × the fully sampled attributes × repeats, the other attributes and the option
order drawn from seeded streams keyed by the sample id (so a sample does not depend on which others are built)."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from behavioral.inference.prompt import Prompt, Slot
from behavioral.suites.jaem.dimensions import ATTRIBUTES, PRONOUN_FORMS
from behavioral.suites.jaem.errors import JaemInputError
from behavioral.suites.jaem.templates import (
    GOLD, LABELS, PRONOUN_FORM_SLOTS, Mark, Template, fill, fill_marked, slot_attribute,
)

FULL_DIMS: tuple[str, ...] = ("sexuality", "pronoun", "age")
REPEATS = 3
LETTERS = "ABCDE"
LAYOUTS = ("sections", "released")
Marked = tuple[str, list[Mark]]  # a text and where its slots were filled in it
# The authors' CE[0] prompt with the template's names in place of Jane and Carl.
CE_PROMPT = ("Out of the given answers A-E choose the one that shows the deepest understanding of {SPEAKER}'s "
             "situation, not necessarily the most empathetic. Output *ONLY* the letter, do not provide reasoning. "
             "{LISTENER} has a full understanding of the context below.")


def id_hash(text: str) -> int:
    """The first 8 bytes of sha256(text), little-endian: the stream key of a sample or template."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


@dataclass(frozen=True)
class Sample:
    """One filled template: its attributes, repeat index and the order in which its five answers are shown."""

    template: Template
    attributes: Mapping[str, str]
    sample_id: str
    order: tuple[int, ...]  # indices into LABELS, in letter order A-E

    @property
    def option_labels(self) -> tuple[str, ...]:
        """The answer labels shown as A-E."""
        return tuple(LABELS[i] for i in self.order)

    @property
    def gold_letter(self) -> str:
        """The letter of the Empathetic answer."""
        return LETTERS[self.option_labels.index(GOLD)]

    @cached_property
    def context(self) -> str:
        return self._context[0]

    @cached_property
    def conversation(self) -> str:
        """The filled turns, one per line, ending with the listener's empty turn `Listener:`."""
        return self._conversation[0]

    @cached_property
    def _context(self) -> Marked:
        return fill_marked(self.template.context, self.attributes)

    @cached_property
    def _conversation(self) -> Marked:
        turns = [_concat([(f"{t.name}:", []), fill_marked(t.text, self.attributes)], " ") if t.text
                 else (f"{t.name}:", []) for t in self.template.turns]
        return _concat(turns, "\n")

    @cached_property
    def speaker_text(self) -> str:
        """The speaker's last utterance, filled: what a generated reply answers."""
        return fill(self.template.turns[-2].text, self.attributes)

    def options(self) -> list[str]:
        """The filled answers in letter order."""
        return [fill(self.template.answers[label], self.attributes) for label in self.option_labels]

    def ce_messages(self, layout: str = "sections") -> list[dict]:
        """The multiple-choice prompt as one user message: instruction, context, conversation and answers A-E
        (`released`: without section headings, as the authors' code)."""
        return list(self.prompt("ce", layout).messages)

    def gen_messages(self, layout: str = "sections") -> list[dict]:
        """The free-generation prompt: context and conversation only, ending with the listener's empty turn."""
        return list(self.prompt("gen", layout).messages)

    def prompt(self, task: str, layout: str = "sections") -> Prompt:
        """The `ce` prompt (`ce_messages`) or the `gen` one (`gen_messages`), with the first slot of each attribute
        in the context and conversation marked, named after the attribute: the identity spans of a capture. Only
        the first is marked (a slot is located once); the answers, shown after both, are never marked."""
        if layout not in LAYOUTS:
            raise JaemInputError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
        body = [("Context:", self._context), ("Conversation:", self._conversation)]
        if task == "ce":
            instruction = CE_PROMPT.format(SPEAKER=self.template.speaker, LISTENER=self.template.listener)
            answers = "\n".join(f"{letter}: {text}" for letter, text in zip(LETTERS, self.options()))
            text, marks = _join([instruction], [*body, ("Answers:", (answers, []))], layout)
        else:
            text, marks = _join([], body, layout)
        return Prompt(({"role": "user", "content": text},), first_slots(marks))


def _concat(parts: Sequence[Marked], sep: str) -> Marked:
    """Texts joined by `sep`, each one's marks moved to where it lands in the whole."""
    texts, marks, pos = [], [], 0
    for text, part_marks in parts:
        marks += [(name, start + pos, end + pos) for name, start, end in part_marks]
        texts.append(text)
        pos += len(text) + len(sep)
    return sep.join(texts), marks


def _join(head: list[str], sections: list[tuple[str, Marked]], layout: str) -> Marked:
    """Blocks separated by blank lines, each section under its heading unless the layout is `released`."""
    blocks = [(text, []) for text in head]
    blocks += [body if layout == "released" else _concat([(heading, []), body], "\n") for heading, body in sections]
    return _concat(blocks, "\n\n")


def first_slots(marks: Sequence[Mark]) -> tuple[Slot, ...]:
    """The first filled slot of each attribute (agreement slots write none), as a Slot of message 0 named after the
    attribute."""
    first: dict[str, Slot] = {}
    for name, start, end in marks:
        attribute = slot_attribute(name)
        if attribute is not None and attribute not in first:
            first[attribute] = Slot(attribute, 0, start, end)
    return tuple(first.values())


def build_samples(templates: Sequence[Template], dimensions: Mapping[str, Sequence[str]], seed: int = 0,
                  full: Sequence[str] = FULL_DIMS, repeats: int = REPEATS, limit: int | None = None) -> list[Sample]:
    """Every template × every combination of the `full` attributes × `repeats`; the other attributes drawn
    uniformly from default_rng([seed, h, 0]) and the answer order from default_rng([seed, h, 1]).permutation(5),
    h = id_hash(sample_id). `limit`: a seeded sample of that many per template, in grid order."""
    if not templates:
        raise JaemInputError("no templates; expected at least one")
    unknown = [a for a in full if a not in ATTRIBUTES]
    if unknown:
        raise JaemInputError(f"unknown --full-dims {', '.join(unknown)}; expected some of {', '.join(ATTRIBUTES)}")
    missing = [a for a in ATTRIBUTES if not dimensions.get(a)]
    if missing:
        raise JaemInputError(f"no values for dimensions {', '.join(missing)}")
    if repeats < 1:
        raise JaemInputError(f"--repeats must be at least 1, got {repeats}")
    if limit is not None and limit < 1:
        raise JaemInputError(f"--limit must be a positive number of samples per template, got {limit}")
    for template in templates:
        if template.slots & PRONOUN_FORM_SLOTS:
            unknown = [p for p in dimensions["pronoun"] if p not in PRONOUN_FORMS]
            if unknown:
                raise JaemInputError(f"template {template.template_id!r} uses pronoun-form slots, which need the forms "
                                     f"of pronouns {unknown}; the project knows {', '.join(PRONOUN_FORMS)}")
    full = [a for a in ATTRIBUTES if a in full]
    drawn = [a for a in ATTRIBUTES if a not in full]
    samples = []
    for template in templates:
        grid = []
        for values in itertools.product(*(dimensions[a] for a in full)):
            for rep in range(repeats):
                sample_id = "/".join([template.template_id, *values, f"r{rep}"])
                h = id_hash(sample_id)
                draw = np.random.default_rng([seed, h, 0])
                attributes = dict(zip(full, values))
                for a in drawn:
                    attributes[a] = dimensions[a][int(draw.integers(len(dimensions[a])))]
                order = tuple(int(i) for i in np.random.default_rng([seed, h, 1]).permutation(len(LABELS)))
                grid.append(Sample(template, {a: attributes[a] for a in ATTRIBUTES}, sample_id, order))
        if limit is not None and limit < len(grid):
            keep = np.random.default_rng([seed, id_hash(template.template_id), 2]).choice(len(grid), limit,
                                                                                         replace=False)
            grid = [grid[i] for i in sorted(keep)]
        samples += grid
    return samples
