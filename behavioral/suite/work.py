"""Work units: chunks of one group of a suite's items, with stable ids; the unit of resume and of sharding."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from behavioral.suite.protocol import Item


@dataclass(frozen=True)
class WorkUnit:
    """A chunk of the items of one group (`{group}|{chunk}`); its rows are always written together."""

    unit_id: str
    group: str
    items: tuple[Item, ...]


def work_units(groups: Iterable[tuple[str, Sequence[Item]]], unit_size: int, rank: int = 0,
               world_size: int = 1) -> Iterator[WorkUnit]:
    """This rank's units, in the suite's group order; ids never change, and rank r takes every world_size-th unit."""
    index = 0
    for group, items in groups:
        for k, start in enumerate(range(0, len(items), unit_size)):
            if index % world_size == rank:
                yield WorkUnit(f"{group}|{k}", group, tuple(items[start:start + unit_size]))
            index += 1


def unit_batches(units: Iterable[WorkUnit], items_per_batch: int) -> Iterator[list[WorkUnit]]:
    """Consecutive units grouped into batches of about `items_per_batch` items."""
    batch: list[WorkUnit] = []
    size = 0
    for unit in units:
        batch.append(unit)
        size += len(unit.items)
        if size >= items_per_batch:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
