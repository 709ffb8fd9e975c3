"""JaEm-ST as a suite: each sample as a multiple-choice item (CE) and/or an open reply (`gen`, read for AE and ERA)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd

from behavioral.analysis import Analysis, Run
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.prompt import Prompt
from behavioral.rundir.provenance import files_sha256
from behavioral.suites.jaem.card import CARD
from behavioral.suite.protocol import Answer, Suite
from behavioral.core.selection import select_rows
from behavioral.suites.jaem import metrics
from behavioral.suites.jaem.analysis import AnalyzeOptions, analysis
from behavioral.suites.jaem.answers import cut_reply, letter_decided, parse_letter, reply_decided
from behavioral.suites.jaem.dimensions import ATTRIBUTES, PROJECT_DIMENSIONS, load_dimensions
from behavioral.suites.jaem.effects import by_value
from behavioral.suites.jaem.options import JaemDeclaration, Options
from behavioral.suites.jaem.samples import LETTERS, Sample, build_samples
from behavioral.suites.jaem.templates import Template, load_templates, project_templates

LETTER_SPEC = AnswerSpec.choices({letter: (letter, f" {letter}") for letter in LETTERS})


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


class Jaem(JaemDeclaration, Suite):
    """Seed 002: JaEm-ST (Formánek & Sotolář): CE by multiple choice, AE by VAD distance, ERA by EPITOME-style
    classifiers, per protected attribute."""

    rows_hold = "the speakers' last utterances filled from the templates, in `speaker_text`"
    card = CARD
    AnalyzeOptions = AnalyzeOptions

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
