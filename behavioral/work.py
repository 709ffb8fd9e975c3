"""Work units: the grid of settings × categories × perceivers × experiencers × event chunks, with stable ids."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from behavioral.corpus import Event
from behavioral.groups import get_category
from behavioral.settings import get_setting


@dataclass(frozen=True)
class WorkUnit:
    """A chunk of events for one (setting, category, perceiver, experiencer) cell; the unit of resume and sharding."""

    unit_id: str
    setting: str
    category: str
    perceiver: str
    experiencer: str
    events: tuple[Event, ...]


def work_units(
    settings: Sequence[str], categories: Sequence[str], events: Sequence[Event], unit_size: int,
    rank: int = 0, world_size: int = 1,
) -> Iterator[WorkUnit]:
    """This rank's units in grid order; ids never change.

    Perceiver-major, so a persona's prompts stay together and share their prefix; within a cell, events go by the
    length of the narrative the setting quotes, so a unit holds prompts of about one length (little padding).
    """
    index = 0
    for setting in settings:
        form = get_setting(setting).narrative_form
        ordered = sorted(events, key=lambda e: (len(e.narrative(form)), e.event_id))
        chunks = [tuple(ordered[i:i + unit_size]) for i in range(0, len(ordered), unit_size)]
        for name in categories:
            identities = get_category(name).with_unspecified
            for perceiver in identities:
                for experiencer in identities:
                    for k, chunk in enumerate(chunks):
                        if index % world_size == rank:
                            unit_id = f"{setting}|{name}|{perceiver}|{experiencer}|{k}"
                            yield WorkUnit(unit_id, setting, name, perceiver, experiencer, chunk)
                        index += 1
