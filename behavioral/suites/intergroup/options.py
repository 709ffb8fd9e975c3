"""Seed 000's options and what the suite declares without its data or analysis: the categories, settings and events
that decide a run's items, and the name, capture kinds and flags of `empathy-gap run intergroup`."""

from __future__ import annotations

from dataclasses import dataclass

from behavioral.core.options import check_bounds, option
from behavioral.suite.protocol import CaptureSpec, SuiteDeclaration, local_path
from behavioral.suites.intergroup.groups import CATEGORIES, get_category
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting


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
        check_bounds(self)
        object.__setattr__(self, "categories", tuple(self.categories))
        object.__setattr__(self, "settings", tuple(self.settings))
        object.__setattr__(self, "exclude_events", tuple(self.exclude_events))
        object.__setattr__(self, "events", local_path(self.events))
        object.__setattr__(self, "rewrite_model", local_path(self.rewrite_model))


FIELDS = ("setting", "category", "perceiver", "experiencer", "event_id", "emotion")


class IntergroupDeclaration(SuiteDeclaration):
    """Seed 000's name, options and capture kinds (the persona and the experiencer of the grid)."""

    name = "intergroup"
    fields = FIELDS  # item fields stored as columns
    description = "seed 000: emotion intensity rated as a persona, perceiver × experiencer grid, empathy gap δ"
    capture = CaptureSpec(
        spans={"persona": ("perceiver", ("setting", "category", "perceiver")),
               "experiencer": ("experiencer", ("setting", "category", "perceiver", "experiencer"))},
        cell=("setting", "category", "perceiver", "experiencer"),
    )
    Options = Options


DECLARATION = IntergroupDeclaration()
