"""Seed 000 as a suite: perceiver × experiencer × event items in the seven prompt settings, rated 0..100 or 0..10."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from behavioral.answer_space import AnswerSpec
from behavioral.prompt import Prompt
from behavioral.run_reader import read_run
from behavioral.suite import Answer, CaptureSpec, Suite, choices, local_path
from behavioral.suites.intergroup import prompts
from behavioral.suites.intergroup.answers import answer_decided, parse_intensity
from behavioral.suites.intergroup.corpus import (
    CorpusError, Event, corpus_hash, embedded_events, load_events, sample_events,
)
from behavioral.suites.intergroup.groups import CATEGORIES, get_category
from behavioral.suites.intergroup.rewrite import CACHE, ensure_third_person
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting

EMBEDDED_EVENTS = "embedded"
FIELDS = ("setting", "category", "perceiver", "experiencer", "event_id", "emotion")
# The seed-000 names of the core result columns (results()).
COLUMNS = {"value": "intensity", "score_value": "score_answer", "expected": "expected_intensity",
           "start_mass": "numeric_mass"}


@dataclass(frozen=True)
class Options:
    """What decides an intergroup run's items: categories and settings (Table 1 and 2 order), the events."""

    categories: tuple[str, ...] = tuple(CATEGORIES)
    settings: tuple[str, ...] = SETTING_NAMES
    events: str | None = None  # a crowd-enVENT release or generation TSV; None: the embedded events
    limit_events: int | None = None  # a seeded sample, stratified by emotion
    rewrite_model: str | None = None  # writes T2 text for a generation TSV (default: the run's model)

    def __post_init__(self):
        for name in self.categories:
            get_category(name)
        for name in self.settings:
            get_setting(name)
        if self.limit_events is not None and self.limit_events < 1:
            raise ValueError(f"--limit-events must be a positive number of events, got {self.limit_events}")
        object.__setattr__(self, "categories", tuple(self.categories))
        object.__setattr__(self, "settings", tuple(self.settings))
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

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--category", action="append", help=f"{', '.join(CATEGORIES)} or all (repeatable)")
        parser.add_argument("--setting", action="append", help=f"{', '.join(SETTING_NAMES)} or all (repeatable)")
        parser.add_argument("--events", help="crowd-enVENT release directory/TSV or crowd-enVent_generation.tsv "
                                             "(default: the project's embedded events)")
        parser.add_argument("--limit-events", type=int, help="seeded sample of N events, stratified by emotion")
        parser.add_argument("--rewrite-model", help="model that writes T2 third-person text for a generation TSV "
                                                    "(default: --model)")

    def options(self, args: argparse.Namespace) -> Options:
        return Options(categories=choices(args.category, tuple(CATEGORIES), "category"),
                       settings=choices(args.setting, SETTING_NAMES, "setting"), events=args.events,
                       limit_events=args.limit_events, rewrite_model=args.rewrite_model)

    def dataset(self, config) -> Data:
        options = config.options or Options()
        events = load_events(options.events) if options.events else embedded_events()
        sampled = sample_events(events, options.limit_events, config.seed)
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

    def add_analyze_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--permutations", type=int, default=10_000)
        parser.add_argument("--measure", choices=("intensity", "expected_intensity"), default="intensity")
        parser.add_argument("--round-cells", type=int, metavar="DECIMALS",
                            help="round M⁰ cells before z-scoring, as the authors' notebook does with 2 (default: no)")

    def analyze(self, run_dirs: Sequence[Path], out: Path | None, args: argparse.Namespace) -> Path:
        from behavioral.suites.intergroup.analysis import analyze

        if len(run_dirs) != 1:
            raise ValueError(f"suite intergroup analyzes one run directory at a time, got {len(run_dirs)}")
        return analyze(run_dirs[0], out, n_permutations=args.permutations, measure=args.measure,
                       round_cells=args.round_cells, allow_partial=args.allow_partial)


def view(rows: pd.DataFrame) -> pd.DataFrame:
    """Stored intergroup rows under seed 000's names: unit_id, the item fields, response, intensity, refused,
    truncated, score_answer, expected_intensity, numeric_mass."""
    rows = rows.drop(columns="score_answer").rename(columns=COLUMNS)
    columns = ["unit_id", *FIELDS, "response", "intensity", "refused", "truncated", "score_answer",
               "expected_intensity", "numeric_mass"]
    return rows[columns]


def results(run_dir: str | Path) -> pd.DataFrame:
    """An intergroup run's rows under seed 000's names (see `view`), finished or not; another suite's run, or one
    without rows, is a RunDirError naming it."""
    return view(read_run(run_dir, "intergroup", allow_partial=True)[1])


SUITE = Intergroup()
