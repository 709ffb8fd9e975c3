"""Human reference ratings: a CSV of `group,trait,rater,rating` (UTF-8, rating an integer 1-5, other columns
ignored), or the shipped `us-stereotypes` set, checked against the suite's groups and traits."""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

import pandas as pd

from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.order import in_order
from behavioral.suites.scm.traits import TRAITS

DATA = Path(__file__).parent / "data"
SHIPPED = {"us-stereotypes": DATA / "us_stereotypes.csv"}  # name -> CSV; the set of its groups has the same name
COLUMNS = ("group", "trait", "rater", "rating")
LIKERT = ("1", "2", "3", "4", "5")


def _read_csv(path: Path, raw: bytes) -> pd.DataFrame:
    """The rows of CSV `raw` as strings, indexed by their line number in `path` (blank lines skipped); an empty file,
    a file that is not UTF-8 or a row with another number of fields than the header is a ValueError naming it."""
    try:
        reader = csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline=""))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 ({err.reason} at byte {err.start})") from None
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{path}: empty; expected a CSV with columns {', '.join(COLUMNS)}")
    rows, lines = [], []
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            raise ValueError(f"{path}, line {reader.line_num}: {len(row)} fields; expected {len(header)} "
                             f"({','.join(header)})")
        rows.append(row)
        lines.append(reader.line_num)
    return pd.DataFrame(rows, columns=header, index=lines, dtype=str)


def load_human(source: str | Path, group_set: str | None = None) -> pd.DataFrame:
    """Ratings from `source` (a shipped set's name or a CSV path) whose groups all belong to `group_set` (default:
    the one set that holds them all), long: group, trait, rater, rating, in the suite's order; `attrs` hold the
    group set, the source and the file's sha256. Bad input raises ValueError naming the file, line and value."""
    path = SHIPPED.get(str(source), Path(source))
    if not path.is_file():
        raise ValueError(f"--human {source}: no such file; expected a CSV or one of {', '.join(SHIPPED)}")
    raw = path.read_bytes()
    frame = _read_csv(path, raw)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column {', '.join(missing)}; expected columns {', '.join(COLUMNS)}")
    if frame.empty:
        raise ValueError(f"{path}: no rows; expected ratings under the header")
    frame = frame[list(COLUMNS)].apply(lambda c: c.str.strip())
    bad = frame.index[~frame.rating.isin(LIKERT)]
    if len(bad):
        i = bad[0]
        raise ValueError(f"{path}, line {i}: rating {frame.rating[i]!r}; expected an integer 1-5")
    unknown = frame.index[~frame.trait.isin(TRAITS)]
    if len(unknown):
        i = unknown[0]
        raise ValueError(f"{path}, line {i}: unknown trait {frame.trait[i]!r}; expected one of "
                         f"{', '.join(TRAITS)}")
    group_set = group_set or _owning_set(frame, path)
    names = {g.name for g in GROUPS[group_set]}
    unknown = frame.index[~frame.group.isin(names)]
    if len(unknown):
        i = unknown[0]
        raise ValueError(f"{path}, line {i}: unknown group {frame.group[i]!r} for group set {group_set!r}; "
                         f"expected one of {', '.join(sorted(names))}")
    twice = frame.index[frame.duplicated(list(COLUMNS[:3]))]
    if len(twice):
        i = twice[0]
        raise ValueError(f"{path}, line {i}: duplicate rating of ({frame.group[i]}, {frame.trait[i]}) by "
                         f"rater {frame.rater[i]!r}; expected one rating per group, trait and rater")
    frame = in_order(frame.assign(rating=frame.rating.astype(int)), ("group", "trait", "rater"))
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
    where = f"line {i[0]}: unknown group {frame.group[i[0]]!r}" if len(i) else \
        "groups of more than one group set"
    raise ValueError(f"{path}, {where}; expected groups of one set ({', '.join(GROUPS)})")
