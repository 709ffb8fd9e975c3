"""Seed 000 as a suite: perceiver × experiencer × event items in the seven prompt settings, rated 0..100 or 0..10."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from behavioral.answer_space import AnswerSpec
from behavioral.prompt import Prompt
from behavioral.run_reader import read_run
from behavioral.analysis import Analysis, Run
from behavioral.options import check_minimums, option
from behavioral.suite import Answer, CaptureSpec, Suite, local_path
from behavioral.suites.intergroup import prompts
from behavioral.suites.intergroup.answers import answer_decided, parse_intensity
from behavioral.suites.intergroup.corpus import (
    CorpusError, Event, corpus_hash, embedded_events, load_events, sample_events,
)
from behavioral.suites.intergroup.groups import CATEGORIES, get_category
from behavioral.suites.intergroup.rewrite import CACHE, ensure_third_person
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting

EMBEDDED_EVENTS = "embedded"
MEASURES = ("intensity", "expected_intensity")
FIELDS = ("setting", "category", "perceiver", "experiencer", "event_id", "emotion")
# The seed-000 names of the core result columns (results()).
COLUMNS = {"value": "intensity", "score_value": "score_intensity", "expected": "expected_intensity",
           "start_mass": "numeric_mass"}


@dataclass(frozen=True)
class Options:
    """What decides an intergroup run's items: categories and settings (Table 1 and 2 order), the events."""

    categories: tuple[str, ...] = option(tuple(CATEGORIES), "identity categories", name="--category",
                                         choices=tuple(CATEGORIES))
    settings: tuple[str, ...] = option(SETTING_NAMES, "prompt settings", name="--setting", choices=SETTING_NAMES)
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
class AnalyzeOptions:
    """How seed 000's statistics are computed: the measure, the permutation test, the notebook's rounding."""

    measure: str = option("intensity", "the rating each cell averages: the parsed reply's intensity (the paper's) "
                                       "or the expected intensity of the answer distribution", choices=MEASURES)
    permutations: int = option(10_000, "permutations of the identity matching in δ's test, and null draws of the "
                                       "gap test over events", metavar="N",
                               minimum=1)
    round_cells: int | None = option(None, "round M⁰ cells to DECIMALS before z-scoring, as the authors' notebook "
                                           "does with 2; none: no rounding", metavar="DECIMALS")
    seed: int = option(0, "seed of the permutations and of the event resamples", name="--permutation-seed")

    def __post_init__(self):
        if self.measure not in MEASURES:
            raise ValueError(f"unknown measure {self.measure!r}; expected one of {', '.join(MEASURES)}")
        if self.round_cells is not None and not 0 <= self.round_cells <= 15:
            raise ValueError(f"--round-cells must be a number of decimals in 0..15, got {self.round_cells}")
        check_minimums(self)


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


class Intergroup(Suite):
    """Seed 000: the intergroup empathy gap δ of Hou, Daumé & Rudinger (NAACL 2025)."""

    name = "intergroup"
    description = "seed 000: emotion intensity rated as a persona, perceiver × experiencer grid, empathy gap δ"
    fields = FIELDS
    capture = CaptureSpec(
        spans={"persona": ("perceiver", ("setting", "category", "perceiver")),
               "experiencer": ("experiencer", ("setting", "category", "perceiver", "experiencer"))},
        cell=("setting", "category", "perceiver", "experiencer"),
    )
    caches = (CACHE,)
    Options = Options
    AnalyzeOptions = AnalyzeOptions

    def dataset(self, config) -> Data:
        options = config.options or Options()
        events = load_events(options.events) if options.events else embedded_events()
        excluded = set(options.exclude_events)
        sampled = [e for e in sample_events(events, options.limit_events, config.seed) if e.event_id not in excluded]
        if not sampled:
            raise CorpusError(f"{options.events or EMBEDDED_EVENTS}: no events left after sampling")
        return Data(options, tuple(sampled), corpus_hash(events))

    def prepare(self, data: Data, config, model, tokenizer, out: Path) -> Data:
        if not any(get_setting(s).narrative_form == "third_person" for s in data.options.settings):
            return data
        events = ensure_third_person(list(data.events), config, out, model, tokenizer)
        return Data(data.options, tuple(events), data.corpus_hash)

    def facts(self, data: Data) -> dict:
        return {"corpus_hash": data.corpus_hash, "events_hash": corpus_hash(data.events),
                "n_events": len(data.events)}

    def groups(self, data: Data) -> Iterable[tuple[str, list[IntergroupItem]]]:
        """Perceiver-major cells; within a cell, events by the length of the narrative the setting quotes, so a unit
        holds prompts of about one length that share the (perceiver, experiencer) prefix."""
        for setting in data.options.settings:
            form = get_setting(setting).narrative_form
            ordered = sorted(data.events, key=lambda e: (len(e.narrative(form)), e.event_id))
            for name in data.options.categories:
                identities = get_category(name).with_unspecified
                for p in identities:
                    for x in identities:
                        yield f"{setting}|{name}|{p}|{x}", [IntergroupItem(setting, name, p, x, e) for e in ordered]

    def length_probes(self, data: Data, n_tokens: Callable) -> Iterable[IntergroupItem]:
        """Per setting and category, the identity with the most tokens, as perceiver and experiencer, on every
        event."""
        for setting in data.options.settings:
            for name in data.options.categories:
                first = data.events[0]
                longest = max(get_category(name).with_unspecified,
                              key=lambda i: n_tokens(IntergroupItem(setting, name, i, i, first)))
                yield from (IntergroupItem(setting, name, longest, longest, e) for e in data.events)

    def view(self, rows: pd.DataFrame, config: dict) -> pd.DataFrame:
        """Stored rows under seed 000's names (see `view`)."""
        return view(rows)

    def analyze(self, runs: Sequence[Run], options: AnalyzeOptions) -> Analysis:
        from behavioral.suites.intergroup.report import analysis

        return analysis(runs, options)

    def identity_set(self, kind: str, identities: Sequence[str]) -> tuple[list[str], list[str] | None]:
        """Table 1 order without "a person"; grouped by Inglehart-Welzel zone (nationality) or group (race) within one
        category (see identities.identity_set)."""
        from behavioral.suites.intergroup.identities import identity_set

        return identity_set(identities)

    def cell_labels(self, cells: pd.DataFrame) -> pd.DataFrame:
        """`ingroup`, `perceiver_group`, `experiencer_group` and `same_name` of each row (see identities.cell_labels)."""
        from behavioral.suites.intergroup.identities import cell_labels

        return cell_labels(cells)

    def behaviour(self, run: Run, **where) -> pd.DataFrame:
        """Rows (persona) and columns (experiencer) of M per identity (see identities.behaviour)."""
        from behavioral.suites.intergroup.identities import behaviour

        return behaviour(run, **where)


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


SUITE = Intergroup()
