"""JaEm-ST as a suite: each sample as a multiple-choice item (CE) and/or an open reply (`gen`, read for AE and ERA)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd

from behavioral.analysis import Analysis, Run
from behavioral.answer_space import AnswerSpec
from behavioral.options import option
from behavioral.prompt import Prompt
from behavioral.provenance import files_sha256
from behavioral.suites.jaem.card import CARD
from behavioral.suite import Answer, CaptureSpec, Suite, local_path
from behavioral.selection import select_rows
from behavioral.suites.jaem import metrics
from behavioral.suites.jaem.analysis import AnalyzeOptions, analysis
from behavioral.suites.jaem.answers import cut_reply, letter_decided, parse_letter, reply_decided
from behavioral.suites.jaem.dimensions import ATTRIBUTES, PROJECT_DIMENSIONS, load_dimensions
from behavioral.suites.jaem.effects import by_value
from behavioral.suites.jaem.errors import JaemInputError
from behavioral.suites.jaem.samples import FULL_DIMS, LAYOUTS, LETTERS, REPEATS, Sample, build_samples
from behavioral.suites.jaem.templates import Template, load_templates, project_templates

TASKS = ("ce", "gen")
FIELDS = ("task", "template", "sample_id", *ATTRIBUTES, "options", "gold_letter", "speaker", "speaker_text")
LETTER_SPEC = AnswerSpec.choices({letter: (letter, f" {letter}") for letter in LETTERS})
GEN_TOKENS = 160


def span_fields(attribute: str) -> tuple[str, ...]:
    """The fields that decide a prompt up to the end of `attribute`'s first slot: the task (a CE prompt opens with
    its instruction), the template and every attribute, `attribute` last. Templates order their slots freely (the
    project's open with age, race and sexuality, the authors' with the pronoun), so any attribute may come first."""
    return ("task", "template", *(a for a in ATTRIBUTES if a != attribute), attribute)


@dataclass(frozen=True)
class Options:
    """What decides a jaem run's items: tasks, templates and dimensions (None: the project's), the sampled grid and
    the prompt layout."""

    tasks: tuple[str, ...] = option(TASKS, "tasks", choices=TASKS, metavar="TASK")
    # None: the project's four. Typed as a tuple so that the flag is repeatable (behavioral.options reads a tuple
    # field as one); stored as null in the manifests of such runs, which therefore still resume.
    templates: tuple[str, ...] = option(None, "template files or directories of *.txt; none: the project's four",
                                        metavar="PATH")
    dimensions: str | None = option(None, "dimensions.json of attribute values; none: the project's lists",
                                      metavar="JSON")
    full_dims: tuple[str, ...] = option(FULL_DIMS, "attributes taken in full (the others are drawn per sample)",
                                        choices=ATTRIBUTES, metavar="ATTRIBUTE")
    repeats: int = option(REPEATS, "repeats of the full grid", metavar="N")
    limit: int | None = option(None, "a seeded sample of N per template", metavar="N")
    layout: str = option("sections", "sections: with Context:/Conversation:/Answers: headings; released: without, "
                                     "as the authors' code", choices=LAYOUTS)

    def __post_init__(self):
        for name, value, known in (("--tasks", self.tasks, TASKS), ("--full-dims", self.full_dims, ATTRIBUTES)):
            for v in value:
                if v not in known:
                    raise JaemInputError(f"unknown {name} {v!r}; expected a comma list of {', '.join(known)}")
        if not self.tasks:
            raise JaemInputError(f"--tasks names no task; expected a comma list of {', '.join(TASKS)}")
        if self.layout not in LAYOUTS:
            raise JaemInputError(f"unknown --layout {self.layout!r}; expected one of {', '.join(LAYOUTS)}")
        if self.repeats < 1:
            raise JaemInputError(f"--repeats must be at least 1, got {self.repeats}")
        if self.limit is not None and self.limit < 1:
            raise JaemInputError(f"--limit must be a positive number of samples per template, got {self.limit}")
        object.__setattr__(self, "tasks", tuple(t for t in TASKS if t in self.tasks))
        object.__setattr__(self, "full_dims", tuple(a for a in ATTRIBUTES if a in self.full_dims))
        if self.templates is not None:
            object.__setattr__(self, "templates", tuple(local_path(p) for p in self.templates))
        object.__setattr__(self, "dimensions", local_path(self.dimensions))


@dataclass(frozen=True)
class Data:
    """A run's samples and where they came from."""

    options: Options
    templates: tuple[Template, ...]
    dimensions: dict
    dimensions_sha256: str | None
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class JaemItem:
    """One sample as the CE multiple-choice question (letters A-E) or the open reply of `gen`."""

    task: str
    sample: Sample
    layout: str = "sections"

    @cached_property
    def item_id(self) -> str:
        return f"{self.task}|{self.sample.sample_id}"

    @property
    def answers(self) -> AnswerSpec | None:
        return LETTER_SPEC if self.task == "ce" else None

    @property
    def fields(self) -> dict[str, str]:
        s = self.sample
        return {"task": self.task, "template": s.template.template_id, "sample_id": s.sample_id, **s.attributes,
                "options": ",".join(s.option_labels), "gold_letter": s.gold_letter, "speaker": s.template.speaker,
                "speaker_text": s.speaker_text}

    def prompt(self) -> Prompt:
        return self.sample.prompt(self.task, self.layout)

    def parse(self, text: str) -> Answer:
        if self.task == "ce":
            return Answer(parse_letter(text))
        reply = cut_reply(text, self.sample.template.speaker)
        return Answer(reply or None)

    def decided(self, text: str) -> bool:
        return letter_decided(text) if self.task == "ce" else reply_decided(text, self.sample.template.speaker)


class Jaem(Suite):
    """Seed 002: JaEm-ST (Formánek & Sotolář): CE by multiple choice, AE by VAD distance, ERA by EPITOME-style
    classifiers, per protected attribute."""

    name = "jaem"
    description = "seed 002: JaEm-ST intersectional empathy (CE multiple choice; AE via VAD, ERA via classifiers)"
    rows_hold = "the speakers' last utterances filled from the templates, in `speaker_text`"
    card = CARD
    fields = FIELDS
    # one kind per attribute: its first slot in the context and conversation (span_fields). A final-token cell pools
    # the repeats of one cell of the default grid (task, template and the default --full-dims).
    capture = CaptureSpec(spans={a: (a, span_fields(a)) for a in ATTRIBUTES}, cell=("task", "template", *FULL_DIMS))
    Options = Options
    AnalyzeOptions = AnalyzeOptions
    run_defaults = {"max_new_tokens": GEN_TOKENS}

    def user_data(self, config: Mapping[str, Any]) -> str | None:
        """The templates or dimensions files a run read, else None (the shipped ones)."""
        options = config.get("options") or {}
        return ", ".join(options.get("templates") or ()) or options.get("dimensions")

    def dataset(self, config) -> Data:
        options = config.options or Options()
        templates = load_templates(options.templates) if options.templates else project_templates()
        dimensions = load_dimensions(options.dimensions) if options.dimensions else PROJECT_DIMENSIONS
        samples = build_samples(templates, dimensions, config.seed, options.full_dims, options.repeats,
                                options.limit)
        return Data(options, tuple(templates), dimensions,
                    files_sha256([options.dimensions]) if options.dimensions else None, tuple(samples))

    def facts(self, data: Data) -> dict:
        return {"templates": {t.template_id: t.sha256 for t in data.templates},
                "dimensions_sha256": data.dimensions_sha256 or "project", "n_samples": len(data.samples),
                "n_items": len(data.samples) * len(data.options.tasks)}

    def groups(self, data: Data) -> Iterable[tuple[str, list[JaemItem]]]:
        """Per task and template, its samples in grid order."""
        for task in data.options.tasks:
            for template in data.templates:
                items = [JaemItem(task, s, data.options.layout) for s in data.samples
                         if s.template.template_id == template.template_id]
                yield f"{task}|{template.template_id}", items

    def view(self, rows: pd.DataFrame, config: dict) -> pd.DataFrame:
        """Stored rows with the CE answer chosen by the suite's one rule (metrics.view)."""
        return metrics.view(rows)

    def behaviour(self, run: Run, **where) -> pd.DataFrame:
        """Per value of each attribute (kind: the attribute): CE accuracy, its z and mean p_gold (effects.by_value)
        over the samples of the rows `where` selects (columns of the view, e.g. template="seed_tomatoes")."""
        return by_value(metrics.sample_metrics(select_rows(run.rows, where, "the run's rows")), ATTRIBUTES)

    def analyze(self, runs: Sequence[Run], options: AnalyzeOptions) -> Analysis:
        return analysis(runs, options)


SUITE = Jaem()
