"""Seed 003's options and what the suite declares without its data or analysis: the events, GenderBench's sample_k
and the template that decide a run's items, and the name, GenderBench's run defaults, capture kinds and flags of
`empathy-gap run isear`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from behavioral.core.options import check_bounds, option, whole_number
from behavioral.suite.protocol import CaptureSpec, SuiteDeclaration, local_path
from behavioral.suites.isear.events import SOURCES
from behavioral.suites.isear.prompts import TEMPLATE, check_template

GENDER = "gender"  # the capture kind of the gender a prompt role-plays


def read_template(path: str) -> str:
    """A template file's text (UTF-8, one final newline dropped), checked."""
    where = f"--template {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{where}: cannot be read as UTF-8 text ({err}); expected a template file") from err
    return check_template(text.removesuffix("\n"), where)


@dataclass(frozen=True)
class Options:
    """What decides an isear run's items: the events (auto, isear, project or a file), GenderBench's sample_k and
    the template's text."""

    events: str = option("auto", "auto (isear if genderbench is installed, else project), isear, project or a file "
                                 "with one event per line", metavar="SOURCE")
    sample_k: int | None = option(None, "GenderBench's sample_k: a seeded sample of K events", metavar="K")
    template: str = option(TEMPLATE, "a prompt template file with {gender}, {event} and optionally {emotions}",
                           read=read_template, metavar="F")

    def __post_init__(self):
        if self.sample_k is not None and self.sample_k < 1:
            raise ValueError(f"--sample-k must be at least 1, got {self.sample_k}")
        check_bounds(self)
        check_template(self.template)
        if self.events not in SOURCES:
            object.__setattr__(self, "events", local_path(self.events))


FIELDS = ("event_id", "position", "gender", "event")


class IsearDeclaration(SuiteDeclaration):
    """Seed 003's name, options, GenderBench's decoding settings and names of two run flags, and capture kinds."""

    name = "isear"
    fields = FIELDS  # item fields stored as columns
    description = "seed 003: GenderBench's ISEAR probe, main emotion of an event role-played by gender, max_diff"
    # `gender`: the role-played gender, decided up to its end by the gender alone (the template opens with it, before
    # the event; `dataset` refuses a capture from a template that does not). A final-token cell pools one gender's
    # prompts over the events.
    capture = CaptureSpec(spans={GENDER: ("gender", ("gender",))}, cell=("gender",))
    # GenderBench's generation settings (its generators: temperature 1, top_p 1, max_tokens 300) and random_seed
    run_defaults = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 300, "seed": 123}
    Options = Options

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Options' flags, and GenderBench's names for two shared run flags (RunConfig's seed and samples, which are
        not Options, so they cannot be declared there)."""
        super().add_arguments(parser)
        parser.add_argument("--random-seed", dest="seed", type=whole_number, metavar="N",
                            help="GenderBench's random_seed (the same as --seed; default 123 here): sample_k, "
                                 "sampling streams, analysis bootstrap")
        parser.add_argument("--repetitions", dest="samples", type=whole_number, metavar="N",
                            help="GenderBench's num_repetitions: replies per event and gender (the same as "
                                 "--samples; default 1)")


DECLARATION = IsearDeclaration()
