"""JaEm-ST as a suite: each sample as a multiple-choice item (CE) and/or an open reply (`gen`, read for AE and ERA)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from behavioral.answer_space import AnswerSpec
from behavioral.prompt import Prompt
from behavioral.provenance import files_sha256
from behavioral.suite import Answer, Suite, comma_values, local_path
from behavioral.suites.jaem.answers import cut_reply, letter_decided, parse_letter, reply_decided
from behavioral.suites.jaem.dimensions import ATTRIBUTES, PROJECT_DIMENSIONS, load_dimensions
from behavioral.suites.jaem.errors import JaemInputError
from behavioral.suites.jaem.samples import FULL_DIMS, LAYOUTS, LETTERS, REPEATS, Sample, build_samples
from behavioral.suites.jaem.templates import Template, load_templates, project_templates

TASKS = ("ce", "gen")
FIELDS = ("task", "template", "sample_id", *ATTRIBUTES, "options", "gold_letter", "speaker", "speaker_text")
LETTER_SPEC = AnswerSpec.choices({letter: (letter, f" {letter}") for letter in LETTERS})
GEN_TOKENS = 160


@dataclass(frozen=True)
class Options:
    """What decides a jaem run's items: tasks, templates and dimensions (None: the project's), the sampled grid and
    the prompt layout."""

    tasks: tuple[str, ...] = TASKS
    templates: tuple[str, ...] | None = None
    dimensions: str | None = None
    full_dims: tuple[str, ...] = FULL_DIMS
    repeats: int = REPEATS
    limit: int | None = None
    layout: str = "sections"

    def __post_init__(self):
        for name, value, known in (("--task", self.tasks, TASKS), ("--full-dims", self.full_dims, ATTRIBUTES)):
            for v in value:
                if v not in known:
                    raise JaemInputError(f"unknown {name} {v!r}; expected a comma list of {', '.join(known)}")
        if not self.tasks:
            raise JaemInputError(f"--task names no task; expected a comma list of {', '.join(TASKS)}")
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
        messages = self.sample.ce_messages(self.layout) if self.task == "ce" else self.sample.gen_messages(self.layout)
        return Prompt(tuple(messages))

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
    fields = FIELDS
    Options = Options
    run_defaults = {"max_new_tokens": GEN_TOKENS}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--task", action="append", help="ce, gen or ce,gen (default both)")
        parser.add_argument("--templates", action="append",
                            help="template files or directories of *.txt (repeatable; default: the project's four)")
        parser.add_argument("--dimensions", help="dimensions.json of attribute values (default: the project's lists)")
        parser.add_argument("--full-dims", help=f"attributes taken in full (default {','.join(FULL_DIMS)}); the "
                                                "others are drawn per sample")
        parser.add_argument("--repeats", type=int, default=REPEATS, help="repeats of the full grid")
        parser.add_argument("--limit", type=int, help="a seeded sample of N per template")
        parser.add_argument("--layout", choices=LAYOUTS, default="sections",
                            help="sections: with Context:/Conversation:/Answers: headings; released: without, as "
                                 "the authors' code")

    def options(self, args: argparse.Namespace) -> Options:
        return Options(tasks=tuple(comma_values(args.task)) or TASKS,
                       templates=tuple(comma_values(args.templates)) if args.templates else None,
                       dimensions=args.dimensions, full_dims=tuple(comma_values(args.full_dims)) or FULL_DIMS,
                       repeats=args.repeats, limit=args.limit, layout=args.layout)

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

    def add_analyze_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--vad-lexicon", help="NRC-VAD style TSV (term, valence, arousal, dominance) or `demo` "
                                                  "(the project's ~80 words); without it AE is unavailable")
        parser.add_argument("--era-model", help="IP=ID,EX=ID,ER=ID: 3-label sequence classifiers (folders or hub "
                                                "ids); without them ERA is unavailable")
        parser.add_argument("--era-batch-size", type=int, default=16)

    def analyze(self, run_dirs: Sequence[Path], out: Path | None, args: argparse.Namespace) -> Path:
        from behavioral.suites.jaem.analysis import analyze

        return analyze(run_dirs, out, vad_lexicon=args.vad_lexicon, era_model=args.era_model,
                       era_batch_size=args.era_batch_size, allow_partial=args.allow_partial)


SUITE = Jaem()
