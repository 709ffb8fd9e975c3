"""Seed 000 as a suite: perceiver × experiencer × event items in the seven prompt settings, rated 0..100 or 0..10."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from behavioral.analysis import Analysis, Run, read_runs
from behavioral.suites.intergroup.card import CARD
from behavioral.suite.protocol import Suite
from behavioral.suites.intergroup.setting_analysis import AnalyzeOptions, analyses_of
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.corpus import EMOTIONS, corpus_hash
from behavioral.suites.intergroup.identities import behaviour, cell_labels, identity_set
from behavioral.suites.intergroup.items import Data, IntergroupItem, dataset, view
from behavioral.suites.intergroup.options import IntergroupDeclaration
from behavioral.suites.intergroup import steering
from behavioral.suites.intergroup.patching import PersonaPatching
from behavioral.suites.intergroup.analysis import analysis
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.rewrite import CACHE, ensure_third_person
from behavioral.suites.intergroup.settings import get_setting


class Intergroup(IntergroupDeclaration, Suite):
    """Seed 000: the intergroup empathy gap δ of Hou, Daumé & Rudinger (NAACL 2025)."""

    rows_hold = "event ids and emotions, not the narratives"
    card = CARD
    caches = (CACHE,)
    AnalyzeOptions = AnalyzeOptions
    protocols = {"patch": PersonaPatching(), "steer": steering}

    def user_data(self, config: Mapping[str, Any]) -> str | None:
        """The crowd-enVENT release or TSV a run read (`--events`), else None (the embedded events)."""
        return (config.get("options") or {}).get("events")

    def dataset(self, config) -> Data:
        return dataset(config)

    def prepare(self, data: Data, config, model, tokenizer, out: Path) -> Data:
        if not any(get_setting(s).narrative_form == "third_person" for s in data.options.settings):
            return data
        events = ensure_third_person(list(data.events), config, out, model, tokenizer)
        return dataclasses.replace(data, events=tuple(events))

    def facts(self, data: Data) -> dict:
        """The corpus's and the sample's hashes and size; where the corpus declares clusters, each sampled event's
        (`event_clusters`), and where it lacks some of the scheme's emotions, those it holds (`corpus_emotions`):
        both recorded only then, so a run made before they were has the same facts."""
        clusters = {e.event_id: e.cluster for e in data.events if e.cluster is not None}
        return ({"corpus_hash": data.corpus_hash, "events_hash": corpus_hash(data.events), "n_events": len(data.events)}
                | ({"event_clusters": clusters} if clusters else {})
                | ({"corpus_emotions": list(data.corpus_emotions)} if data.corpus_emotions != EMOTIONS else {}))

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
        return analysis(runs, options)

    def identity_set(self, kind: str, identities: Sequence[str]) -> tuple[list[str], list[str] | None]:
        """Table 1 order without "a person"; grouped by Inglehart-Welzel zone (nationality) or group (race) within one
        category (see identities.identity_set)."""
        return identity_set(identities)

    def cell_labels(self, cells: pd.DataFrame) -> pd.DataFrame:
        """`ingroup`, `perceiver_group`, `experiencer_group` and `same_name` of each row (see identities.cell_labels)."""
        return cell_labels(cells)

    def behaviour(self, run: Run, **where) -> pd.DataFrame:
        """Rows (persona) and columns (experiencer) of M per identity (see identities.behaviour)."""
        return behaviour(run, **where)


SUITE = Intergroup()


def load_analyses(run_dir: str | Path, options: AnalyzeOptions = AnalyzeOptions(),
                  allow_partial: bool = False) -> list[SettingAnalysis]:
    """Analyze every category and setting of a run, categories in Table 1 order, settings in Table 2 order; a run
    that has not finished every work unit is refused unless `allow_partial`."""
    (run,) = read_runs(SUITE, [run_dir], allow_partial)
    return analyses_of(run_dir, run.config, run.rows, options, allow_partial)
