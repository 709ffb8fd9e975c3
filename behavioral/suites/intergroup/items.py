"""Seed 000's items: the options that decide a run's prompts, its events, one prompt of the perceiver × experiencer ×
event grid, and a run's rows under seed 000's names."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from behavioral.answer_space import AnswerSpec
from behavioral.options import option
from behavioral.prompt import Prompt
from behavioral.run_reader import read_run
from behavioral.suite import Answer, local_path
from behavioral.suites.intergroup import prompts
from behavioral.suites.intergroup.answers import answer_decided, parse_intensity
from behavioral.suites.intergroup.corpus import (
    CorpusError, Event, corpus_hash, embedded_events, load_events, sample_events,
)
from behavioral.suites.intergroup.groups import CATEGORIES, get_category
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting

EMBEDDED_EVENTS = "embedded"
FIELDS = ("setting", "category", "perceiver", "experiencer", "event_id", "emotion")
# The seed-000 names of the core result columns (results()).
COLUMNS = {"value": "intensity", "score_value": "score_intensity", "expected": "expected_intensity",
           "start_mass": "numeric_mass"}


@dataclass(frozen=True)
class Options:
    """What decides an intergroup run's items: categories and settings (Table 1 and 2 order), the events."""

    categories: tuple[str, ...] = option(tuple(CATEGORIES), "identity categories", choices=tuple(CATEGORIES))
    settings: tuple[str, ...] = option(SETTING_NAMES, "prompt settings", choices=SETTING_NAMES)
    events: str | None = option(None, "crowd-enVENT release directory/TSV or crowd-enVent_generation.tsv; none: the "
                                      "project's embedded events")
    limit_events: int | None = option(None, "seeded sample of N events, stratified by emotion", metavar="N")
    exclude_events: tuple[str, ...] = option((), "event ids left out of the sample (ids not in it are ignored), e.g. "
                                                 "the events a steering direction was fit on", metavar="ID")
    rewrite_model: str | None = option(None, "model that writes T2 third-person text for a generation TSV; none: "
                                             "--model")

    def __post_init__(self):
        for name in self.categories:
            get_category(name)
        for name in self.settings:
            get_setting(name)
        if self.limit_events is not None and self.limit_events < 1:
            raise ValueError(f"--limit-events must be a positive number of events, got {self.limit_events}")
        object.__setattr__(self, "categories", tuple(self.categories))
        object.__setattr__(self, "settings", tuple(self.settings))
        object.__setattr__(self, "exclude_events", tuple(self.exclude_events))
        object.__setattr__(self, "events", local_path(self.events))
        object.__setattr__(self, "rewrite_model", local_path(self.rewrite_model))


@dataclass(frozen=True)
class Data:
    """The run's events (sampled) and the hash of the corpus they were drawn from."""

    options: Options
    events: tuple[Event, ...]
    corpus_hash: str


_SPECS = {name: AnswerSpec.integers(0, get_setting(name).max_rating) for name in SETTING_NAMES}


@dataclass(frozen=True)
class IntergroupItem:
    """One prompt of the grid: a perceiver persona rating an experiencer's event in one setting."""

    setting: str
    category: str
    perceiver: str
    experiencer: str
    event: Event

    @cached_property
    def item_id(self) -> str:
        return f"{self.setting}|{self.category}|{self.perceiver}|{self.experiencer}|{self.event.event_id}"

    @property
    def answers(self) -> AnswerSpec:
        return _SPECS[self.setting]

    @property
    def fields(self) -> dict[str, str]:
        return {"setting": self.setting, "category": self.category, "perceiver": self.perceiver,
                "experiencer": self.experiencer, "event_id": self.event.event_id, "emotion": self.event.emotion}

    def prompt(self) -> Prompt:
        narrative = self.event.narrative(get_setting(self.setting).narrative_form)
        return prompts.build(self.setting, self.perceiver, self.experiencer, self.event.emotion, narrative)

    def parse(self, text: str) -> Answer:
        value = parse_intensity(text, get_setting(self.setting).max_rating)
        return Answer(None) if value is None else Answer(value, float(value))

    def decided(self, text: str) -> bool:
        return answer_decided(text, get_setting(self.setting).max_rating)


def dataset(config) -> Data:
    """A run's events: the corpus of its options (the embedded events by default), sampled with its seed, less the
    excluded ids; none left is a CorpusError."""
    options = config.options or Options()
    events = load_events(options.events) if options.events else embedded_events()
    excluded = set(options.exclude_events)
    sampled = [e for e in sample_events(events, options.limit_events, config.seed) if e.event_id not in excluded]
    if not sampled:
        raise CorpusError(f"{options.events or EMBEDDED_EVENTS}: no events left after sampling")
    return Data(options, tuple(sampled), corpus_hash(events))

def view(rows: pd.DataFrame) -> pd.DataFrame:
    """Stored intergroup rows under seed 000's names: unit_id, the item fields, response, intensity (the parsed
    reply's number; in a score-mode run, which generates no reply, the intensity greedy decoding reaches inside
    0..max), refused, truncated, score_intensity (the greedy in-set answer's intensity), expected_intensity (the mean
    of the distribution over the answer set), numeric_mass; and, where stored, sample, probs and unit_probs (the
    distributions over the answer set)."""
    rows = rows.rename(columns=COLUMNS)
    columns = ["unit_id", *FIELDS, "response", "intensity", "refused", "truncated", "score_intensity",
               "expected_intensity", "numeric_mass"]
    return rows[columns + [c for c in ("sample", "probs", "unit_probs") if c in rows]]


def results(run_dir: str | Path) -> pd.DataFrame:
    """An intergroup run's rows under seed 000's names (see `view`), finished or not; another suite's run, or one
    without rows, is a RunDirError naming it."""
    return view(read_run(run_dir, "intergroup", allow_partial=True)[1])
