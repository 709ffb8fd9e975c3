"""Seed 002's options and what the suite declares without its data or analysis: the tasks, templates, dimensions,
grid and layout that decide a run's items, and the name, decoding limit, capture kinds and flags of
`empathy-gap run jaem`."""

from __future__ import annotations

from dataclasses import dataclass

from behavioral.core.options import check_bounds, option
from behavioral.suite.protocol import CaptureSpec, SuiteDeclaration, local_path
from behavioral.suites.jaem.dimensions import ATTRIBUTES
from behavioral.suites.jaem.errors import JaemInputError
from behavioral.suites.jaem.samples import FULL_DIMS, LAYOUTS, REPEATS

TASKS = ("ce", "gen")
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
    # None: the project's four. Typed as a tuple so that the flag is repeatable (behavioral.core.options reads a tuple
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
        check_bounds(self)
        object.__setattr__(self, "tasks", tuple(t for t in TASKS if t in self.tasks))
        object.__setattr__(self, "full_dims", tuple(a for a in ATTRIBUTES if a in self.full_dims))
        if self.templates is not None:
            object.__setattr__(self, "templates", tuple(local_path(p) for p in self.templates))
        object.__setattr__(self, "dimensions", local_path(self.dimensions))


FIELDS = ("task", "template", "sample_id", *ATTRIBUTES, "options", "gold_letter", "speaker", "speaker_text")


class JaemDeclaration(SuiteDeclaration):
    """Seed 002's name, options, decoding limit and capture kinds (one per protected attribute)."""

    name = "jaem"
    fields = FIELDS  # item fields stored as columns
    description = "seed 002: JaEm-ST intersectional empathy (CE multiple choice; AE via VAD, ERA via classifiers)"
    # one kind per attribute: its first slot in the context and conversation (span_fields). A final-token cell pools
    # the repeats of one cell of the default grid (task, template and the default --full-dims).
    capture = CaptureSpec(spans={a: (a, span_fields(a)) for a in ATTRIBUTES}, cell=("task", "template", *FULL_DIMS))
    Options = Options
    run_defaults = {"max_new_tokens": GEN_TOKENS}


DECLARATION = JaemDeclaration()
