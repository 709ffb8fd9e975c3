"""Seed 000's identities for the mechanistic studies: which identities a study compares and how they are grouped
(Table 1 order, Inglehart-Welzel zones, race groups), the labels of final-token rows (in-group, each side's group,
the same name), and behaviour per identity (rows and columns of M). The Intergroup suite's study hooks call these."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from behavioral.analysis import Run
from behavioral.core.selection import select_rows
from behavioral.analysis import cell_gap
from behavioral.suites.intergroup.setting_analysis import intensity_tensor
from behavioral.suites.intergroup.groups import CATEGORIES, UNSPECIFIED, Category
from behavioral.suites.intergroup.settings import SETTING_NAMES

GROUP_OF = {name: group for category in CATEGORIES.values() for name, group in category.group_of.items()}
EVENT_FIELDS = ("event_id", "emotion")  # select the events M is computed over
BLOCK_FIELDS = ("setting", "category")  # select the category and setting blocks of M
CELL_FIELDS = ("perceiver", "experiencer")  # select rows and columns of M once computed


def grouping(category: Category, identities: Sequence[str]) -> list[str] | None:
    """The cluster label of each identity: Inglehart-Welzel zone for nationality, group for race; None where the
    category groups its identities no further than themselves (religion), so no cluster statistic applies."""
    mapping = category.zone_of if category.zone_of is not None else category.group_of
    labels = [mapping[name] for name in identities]
    return labels if len(set(labels)) < len(labels) else None


def identity_set(identities: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """The named identities among `identities` ("a person" left out) in Table 1 order, categories in Table 1 order,
    and their grouping (`grouping`) where they belong to one category; None across categories, whose groups are not
    comparable. An identity of no category is a ValueError naming it."""
    named = set(identities) - {UNSPECIFIED}
    unknown = sorted(named - set(GROUP_OF))
    if unknown:
        raise ValueError(f"identity {unknown[0]!r} belongs to no intergroup category; expected names of Table 1")
    categories = [c for c in CATEGORIES.values() if named & set(c.identities)]
    order = [name for category in categories for name in category.identities if name in named]
    return order, grouping(categories[0], order) if len(categories) == 1 else None


def cell_labels(cells: pd.DataFrame) -> pd.DataFrame:
    """Per row of a final-token index: `ingroup` (perceiver and experiencer in one group: the same race group, the
    same country, the same religion), `perceiver_group` and `experiencer_group` (each side's group; ingroup is their
    equality) and `same_name` (the same identity string on both sides, which in religion and nationality is exactly
    ingroup and in race a part of it: a probe of it is the duplicate-string reading), all NA on rows with "a person"
    on either side, where no in-group relation is defined (the probes compare named identities only)."""
    named = (cells["perceiver"] != UNSPECIFIED) & (cells["experiencer"] != UNSPECIFIED)
    perceiver = cells["perceiver"].map(GROUP_OF)
    experiencer = cells["experiencer"].map(GROUP_OF)
    ingroup = (perceiver == experiencer).astype("boolean")
    same_name = (cells["perceiver"] == cells["experiencer"]).astype("boolean")
    return pd.DataFrame({"ingroup": ingroup.where(named, pd.NA),
                         "perceiver_group": perceiver.astype("string").where(named, pd.NA),
                         "experiencer_group": experiencer.astype("string").where(named, pd.NA),
                         "same_name": same_name.where(named, pd.NA)}, index=cells.index)


def measure_of(config: dict) -> str:
    """The rating behaviour is read by: the expected intensity in a score-mode run (no reply is generated there),
    the parsed reply's intensity otherwise."""
    return "expected_intensity" if config.get("mode") == "score" else "intensity"


def rates_matrix(rows: pd.DataFrame, category: Category, event_ids: tuple[str, ...], measure: str) -> np.ndarray | None:
    """M of one category and setting (z-scored cell means over the events no cell refused, "a person" first, Table 1
    order), as the analysis computes it; None where it is undefined (no event kept, all cells equal)."""
    I, _ = intensity_tensor(rows, category, event_ids, measure)
    try:
        return cell_gap.zscore(cell_gap.cell_means(I, cell_gap.exclusion_mask(I)))
    except ValueError:
        return None


def behaviour(run: Run, **where: Any) -> pd.DataFrame:
    """Behaviour per identity of a run: for kind `persona`, the persona's row of M (feature `rates X (category,
    setting)` per experiencer X); for kind `experiencer`, the identity's column of M (`rated by P (category,
    setting)` per perceiver P), under `measure_of` the run. `where` selects by item field: event_id and emotion
    select the events M is computed over, setting and category its blocks; perceiver and experiencer select M's
    rows and columns once computed (M is always z-scored over its whole grid). Categories and settings whose M is
    undefined give no features."""
    known = EVENT_FIELDS + BLOCK_FIELDS + CELL_FIELDS
    unknown = sorted(set(where) - set(known))
    if unknown:
        raise ValueError(f"intergroup behaviour: unknown field {unknown[0]!r}; expected one of {', '.join(known)}")
    chosen = {field: value for field, value in where.items() if field in EVENT_FIELDS + BLOCK_FIELDS}
    rows = select_rows(run.rows, {f: v for f, v in chosen.items() if f in EVENT_FIELDS}, "the run's rows")
    event_ids = tuple(sorted(rows["event_id"].unique()))  # the run's events, as the analysis places them
    rows = select_rows(rows, {f: v for f, v in chosen.items() if f in BLOCK_FIELDS}, "the run's rows")
    measure = measure_of(run.config)
    records = []
    for category in CATEGORIES.values():
        for setting in SETTING_NAMES:
            block = rows[(rows["category"] == category.name) & (rows["setting"] == setting)]
            M = rates_matrix(block, category, event_ids, measure) if len(block) else None
            if M is None:
                continue
            names = category.with_unspecified
            kept = {field: select_rows(pd.DataFrame({field: names}), {f: where[f] for f in (field,) if f in where}
                                       ).index.tolist() for field in CELL_FIELDS}
            where_read = f"({category.name}, {setting})"
            for i in kept["perceiver"]:
                for j in kept["experiencer"]:
                    records += [("persona", names[i], f"rates {names[j]} {where_read}", M[i, j]),
                                ("experiencer", names[j], f"rated by {names[i]} {where_read}", M[i, j])]
    frame = pd.DataFrame(records, columns=["kind", "identity", "feature", "value"])
    wide = frame.pivot(index=["kind", "identity"], columns="feature", values="value")
    order = frame.drop_duplicates(["kind", "identity"]).sort_values("kind", kind="stable")
    wide = wide.reindex(index=pd.MultiIndex.from_frame(order[["kind", "identity"]]),
                        columns=list(dict.fromkeys(frame["feature"])))
    return wide.reset_index().rename_axis(columns=None)
