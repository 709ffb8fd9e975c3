"""Human reference ratings: a CSV of `group,trait,rater,rating` (UTF-8, rating an integer 1-5, other columns
ignored), or the shipped `us-stereotypes` set, checked against the suite's groups and traits."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.traits import TRAITS

DATA = Path(__file__).parent / "data"
SHIPPED = {"us-stereotypes": DATA / "us_stereotypes.csv"}  # name -> CSV; the set of its groups has the same name
COLUMNS = ("group", "trait", "rater", "rating")
LIKERT = ("1", "2", "3", "4", "5")


def _line(index: int) -> int:
    return index + 2  # the header is line 1


def load_human(source: str | Path, group_set: str | None = None) -> pd.DataFrame:
    """Ratings from `source` (a shipped set's name or a CSV path) whose groups all belong to `group_set` (default:
    the one set that holds them all), long: group, trait, rater, rating; `attrs` hold the group set, the source and
    the file's sha256. Bad input raises ValueError naming the file, line and value."""
    path = SHIPPED.get(str(source), Path(source))
    if not path.is_file():
        raise ValueError(f"--human {source}: no such file; expected a CSV or one of {', '.join(SHIPPED)}")
    raw = path.read_bytes()
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: empty; expected a CSV with columns {', '.join(COLUMNS)}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 ({err.reason} at byte {err.start})") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column {', '.join(missing)}; expected columns {', '.join(COLUMNS)}")
    if frame.empty:
        raise ValueError(f"{path}: no rows; expected ratings under the header")
    frame = frame[list(COLUMNS)].apply(lambda c: c.str.strip())
    bad = frame.index[~frame.rating.isin(LIKERT)]
    if len(bad):
        i = bad[0]
        raise ValueError(f"{path}, line {_line(i)}: rating {frame.rating[i]!r}; expected an integer 1-5")
    unknown = frame.index[~frame.trait.isin(TRAITS)]
    if len(unknown):
        i = unknown[0]
        raise ValueError(f"{path}, line {_line(i)}: unknown trait {frame.trait[i]!r}; expected one of "
                         f"{', '.join(TRAITS)}")
    group_set = group_set or _owning_set(frame, path)
    names = {g.name for g in GROUPS[group_set]}
    unknown = frame.index[~frame.group.isin(names)]
    if len(unknown):
        i = unknown[0]
        raise ValueError(f"{path}, line {_line(i)}: unknown group {frame.group[i]!r} for group set {group_set!r}; "
                         f"expected one of {', '.join(sorted(names))}")
    twice = frame.index[frame.duplicated(list(COLUMNS[:3]))]
    if len(twice):
        i = twice[0]
        raise ValueError(f"{path}, line {_line(i)}: duplicate rating of ({frame.group[i]}, {frame.trait[i]}) by "
                         f"rater {frame.rater[i]!r}; expected one rating per group, trait and rater")
    frame = frame.assign(rating=frame.rating.astype(int)).reset_index(drop=True)
    frame.attrs = {"group_set": group_set, "source": str(source) if str(source) in SHIPPED else str(path.resolve()),
                   "sha256": hashlib.sha256(raw).hexdigest(), "rows": len(frame)}
    return frame


def _owning_set(frame: pd.DataFrame, path: Path) -> str:
    """The group set that holds every group of `frame`, or a ValueError naming the first unknown group."""
    groups = set(frame.group)
    for name, members in GROUPS.items():
        if groups <= {g.name for g in members}:
            return name
    known = {g.name for members in GROUPS.values() for g in members}
    i = frame.index[~frame.group.isin(known)]
    where = f"line {_line(i[0])}: unknown group {frame.group[i[0]]!r}" if len(i) else \
        "groups of more than one group set"
    raise ValueError(f"{path}, {where}; expected groups of one set ({', '.join(GROUPS)})")
