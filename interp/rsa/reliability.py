"""How reliable a run's behaviour per identity is: its events split in random halves, the suite's behaviour computed
on each half (the suite's `behaviour` hook on the run with only that half's rows), and the halves' distance matrices
compared (interp.rsa.noise_ceiling). Any suite whose rows carry an event field works; no hook needs to know."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from behavioral.analysis.runs import Run
from behavioral.core.selection import field_values
from interp.identities import behaviour_rows
from interp import rsa

DEFAULT_FIELD = "event_id"
MIN_PER_HALF = 2


def split_field(run: Run, field: str | None) -> str | None:
    """The field of the run's rows the events are read from: `field` (a ValueError naming --split-by where the rows
    lack it), else event_id where the rows have it, else None."""
    if field is not None:
        if field not in run.rows.columns:
            fields = ", ".join(c for c in run.rows.columns if not str(c).startswith("_"))
            raise ValueError(f"--split-by {field!r}: {run.run_dir}'s rows have no such field; fields: {fields}")
        return field
    return DEFAULT_FIELD if DEFAULT_FIELD in run.rows.columns else None


def too_few(n_events: int, field: str) -> str | None:
    """Why `n_events` values of `field` give no split-half ceiling, None where they are enough."""
    if n_events >= 2 * MIN_PER_HALF:
        return None
    values = "1 value" if n_events == 1 else f"{n_events} values"
    return f"{values} of {field}: a split-half ceiling needs at least {2 * MIN_PER_HALF}, {MIN_PER_HALF} per half"


@dataclass(frozen=True)
class Split:
    """A noise ceiling over a run's events, or why there is none (`ceiling` None and `note`), and each split's
    events and values."""

    field: str | None
    n_events: int
    ceiling: rsa.Ceiling | None
    note: str | None
    splits: pd.DataFrame


def _half(run: Run, kind: str, names: Sequence[str], where: dict, field: str, events: Sequence) -> pd.DataFrame | None:
    """The suite's behaviour of `names` on the rows of `events` only (identities × features), None where the half
    defines no feature for every identity or lacks one."""
    half = dataclasses.replace(run, rows=run.rows[run.rows[field].isin(list(events))])
    try:
        values, features = behaviour_rows(half, kind, names, where)
    except ValueError:  # a half whose rows leave an identity or every feature undefined: no matrix
        return None
    return pd.DataFrame(values, columns=features)


def _distances(a: pd.DataFrame | None, b: pd.DataFrame | None, features: Sequence[str],
               metric: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The two halves' distance matrices over the features both define (and the whole sample does), None where
    there are none or a distance is undefined."""
    if a is None or b is None:
        return None
    common = [f for f in features if f in a.columns and f in b.columns]
    if not common:
        return None
    pair = tuple(rsa.distance_matrix(h[common].to_numpy(), metric) for h in (a, b))
    return pair if all(np.isfinite(D).all() for D in pair) else None


def behaviour_ceiling(run: Run, kind: str, names: Sequence[str], features: Sequence[str], where: dict,
                      field: str | None, metric: str, n_splits: int, seed: int) -> Split:
    """The split-half noise ceiling of the behaviour distances of `names` (over `features`, by `metric`): the run's
    events (values of `field` among the rows `where` selects) in `n_splits` seeded random halves (every distinct one
    where there are fewer), at least MIN_PER_HALF events in each; otherwise no ceiling and a note saying why."""
    if field is None:
        return Split(None, 0, None, f"the rows have no {DEFAULT_FIELD} field; name the event field with --split-by",
                     pd.DataFrame())
    events = field_values(run.rows, field, where, "the run's rows")
    if n_splits == 0:
        return Split(field, len(events), None, "not computed (--splits 0)", pd.DataFrame())
    if (few := too_few(len(events), field)) is not None:
        return Split(field, len(events), None, few, pd.DataFrame())
    masks = rsa.split_halves(len(events), n_splits, seed)
    pairs = [_distances(_half(run, kind, names, where, field, [e for e, m in zip(events, mask) if m]),
                        _half(run, kind, names, where, field, [e for e, m in zip(events, mask) if not m]),
                        features, metric) for mask in masks]
    ceiling = rsa.noise_ceiling(pairs)
    splits = pd.DataFrame({"split": range(len(masks)),
                           "half_a": [",".join(str(e) for e, m in zip(events, mask) if m) for mask in masks],
                           "half_r": ceiling.half_r, "reliability": ceiling.reliability})
    note = None if ceiling.n_defined else "no split gave both halves a behaviour matrix"
    return Split(field, len(events), ceiling, note, splits)
