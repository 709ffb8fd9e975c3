"""Seed 000's views of the activation store: persona, experiencer and final-token states of one category and setting
in Table 1 order ("a person" first), on the store's generic reads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from activations.store import ActivationStore
from behavioral.suites.intergroup.groups import get_category


def _table1_rows(category: str, frame: pd.DataFrame, columns: tuple[str, ...]) -> list[int]:
    """Row positions of `frame` sorted by its identity `columns` in Table 1 order."""
    order = {name: i for i, name in enumerate(get_category(category).with_unspecified)}
    keys = [tuple(order[frame[c].iloc[i]] for c in columns) for i in range(len(frame))]
    return sorted(range(len(frame)), key=keys.__getitem__)


def persona(store: ActivationStore, category: str, setting: str,
            reduction: str = "mean") -> tuple[np.ndarray, list[str]]:
    """Persona vectors (hooks × identities × d_model) in Table 1 order, and the identities."""
    states, index = store.spans("persona", reduction, category=category, setting=setting)
    rows = _table1_rows(category, index, ("perceiver",))
    return states[:, rows], [index["perceiver"].iloc[i] for i in rows]


def experiencer(store: ActivationStore, category: str, setting: str,
                reduction: str = "mean") -> tuple[np.ndarray, pd.DataFrame]:
    """Experiencer vectors (hooks × pairs × d_model) and the (perceiver, experiencer) of each pair, Table 1 order."""
    states, index = store.spans("experiencer", reduction, category=category, setting=setting)
    rows = _table1_rows(category, index, ("perceiver", "experiencer"))
    return states[:, rows], index.iloc[rows][["perceiver", "experiencer"]].reset_index(drop=True)


def final(store: ActivationStore, category: str, setting: str) -> tuple[np.ndarray, pd.DataFrame]:
    """Per-cell final-token means (hooks × cells × d_model) in Table 1 order, with perceiver, experiencer, count."""
    means, cells = store.final(category=category, setting=setting)
    rows = _table1_rows(category, cells, ("perceiver", "experiencer"))
    return means[:, rows], cells.iloc[rows][["perceiver", "experiencer", "count"]].reset_index(drop=True)


def final_samples(store: ActivationStore, category: str, setting: str) -> tuple[np.ndarray, pd.DataFrame]:
    """Single-prompt final-token states of one category and setting (see ActivationStore.final_samples)."""
    return store.final_samples(category=category, setting=setting)


def final_over_events(store: ActivationStore, category: str, setting: str,
                      events: Sequence[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Per-cell final-token means over the single-prompt states of `events` only (hooks × cells × d_model, Table 1
    order, with perceiver, experiencer, count): a direction fit on some events and tested on others. A cell that
    lacks a state of one of the events is a ValueError: the capture keeps per_cell_samples states per cell, so fitting
    on chosen events needs `--per-cell-samples` at least the run's number of events."""
    events = sorted(set(events))
    states, index = store.final_samples(category=category, setting=setting, event_id=events)
    cells = index.groupby(["perceiver", "experiencer"], sort=False).indices
    short = {cell: len(rows) for cell, rows in cells.items() if len(rows) != len(events)}
    if short or not cells:
        which, held = (" × ".join(next(iter(short))), next(iter(short.values()))) if short else ("every cell", 0)
        raise ValueError(f"the final-token states of {which} hold {held} of the {len(events)} "
                         f"fit events (the capture keeps {store.meta['per_cell_samples']} a cell, of every event only "
                         "with --per-cell-samples at least the run's events, in a finished run): fit on all its "
                         "events (--test-events N or --in-sample)")
    frame = pd.DataFrame(list(cells), columns=["perceiver", "experiencer"]).assign(count=len(events))
    means = np.stack([states[:, rows].astype(np.float64).mean(axis=1) for rows in cells.values()], axis=1)
    order = _table1_rows(category, frame, ("perceiver", "experiencer"))
    return means[:, order].astype(np.float32), frame.iloc[order].reset_index(drop=True)
