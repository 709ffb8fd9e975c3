"""Seed 000's items: a run's events (by its options), one prompt of the perceiver × experiencer × event grid, and a
run's rows under seed 000's names."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.prompt import Prompt
from behavioral.runner.reader import read_run
from behavioral.suite.protocol import Answer
from behavioral.suites.intergroup import prompts
from behavioral.suites.intergroup.answers import answer_decided, parse_intensity
from behavioral.suites.intergroup.corpus import (
    EMOTIONS, CorpusError, Event, corpus_hash, embedded_events, emotions_drawn, load_events, sample_events,
)
from behavioral.suites.intergroup.options import FIELDS, Options
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting

EMBEDDED_EVENTS = "embedded"
# The seed-000 names of the core result columns (results()).
COLUMNS = {"value": "intensity", "score_value": "score_intensity", "expected": "expected_intensity",
           "start_mass": "numeric_mass", "valid_mass": "answer_mass"}


@dataclass(frozen=True)
class Data:
    """The run's events (sampled), the hash of the corpus they were drawn from and the emotions it holds (the
    strata of the sample)."""

    options: Options
    events: tuple[Event, ...]
    corpus_hash: str
    corpus_emotions: tuple[str, ...] = EMOTIONS


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
    return Data(options, tuple(sampled), corpus_hash(events), tuple(emotions_drawn(e.emotion for e in events)))


def view(rows: pd.DataFrame) -> pd.DataFrame:
    """Stored intergroup rows under seed 000's names: unit_id, the item fields, response, intensity (the parsed
    reply's number; in a score-mode run, which generates no reply, the intensity greedy decoding reaches inside
    0..max), refused, truncated, score_intensity (the greedy in-set answer's intensity), expected_intensity (the mean
    of the distribution over the answer set), numeric_mass (the first answer token's probability of starting a
    number), answer_mass (the probability of a whole answer in range, score mode); and, where stored, sample, probs
    and unit_probs (the distributions over the answer set)."""
    rows = rows.rename(columns=COLUMNS)
    columns = ["unit_id", *FIELDS, "response", "intensity", "refused", "truncated", "score_intensity",
               "expected_intensity", "numeric_mass", "answer_mass"]
    return rows[columns + [c for c in ("sample", "probs", "unit_probs") if c in rows]]


def results(run_dir: str | Path) -> pd.DataFrame:
    """An intergroup run's rows under seed 000's names (see `view`), finished or not; another suite's run, or one
    without rows, is a RunDirError naming it."""
    return view(read_run(run_dir, "intergroup", allow_partial=True)[1])
