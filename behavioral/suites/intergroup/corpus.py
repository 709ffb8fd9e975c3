"""Experiencer events: the crowd-enVENT release and generation loaders, the embedded default set, sampling."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Iterable, Sequence

EMOTIONS: tuple[str, ...] = (
    "anger", "disgust", "fear", "guilt", "sadness", "shame",
    "boredom", "joy", "pride", "trust", "relief", "surprise",
)

FORMS: tuple[str, ...] = ("text", "first_person", "third_person")

RELEASE_COLUMNS: tuple[str, ...] = (
    "emotion", "text_id", "generated_text", "first_person_text", "third_person_text",
)
GENERATION_COLUMNS: tuple[str, ...] = ("text_id", "emotion", "generated_text")
# An optional column of either file: the cluster an event belongs to (a narrative template, a writer, a source), so
# that events of one cluster count as one sample in the intervals over events; empty where an event has none.
CLUSTER = "cluster"

_NO_EMOTION = {"no-emotion", "no emotion"}
_EMBEDDED = "events.tsv"


class CorpusError(ValueError):
    """An event file or directory that cannot be read as a corpus."""


@dataclass(frozen=True)
class Event:
    """One experiencer narrative with its emotion, the T0/T1/T2 text forms and the cluster it shares with others
    (None: a cluster of its own)."""

    event_id: str
    emotion: str
    text: str
    first_person: str
    third_person: str | None = None
    cluster: str | None = None

    def narrative(self, form: str) -> str:
        """The narrative in one form: "text" (T0), "first_person" (T1) or "third_person" (T2)."""
        if form == "text":
            return self.text
        if form == "first_person":
            return self.first_person
        if form == "third_person":
            if self.third_person is None:
                raise ValueError(
                    f"event {self.event_id!r} has no third-person text yet (rewrite it first, seed 000 appendix A.2)"
                )
            return self.third_person
        raise ValueError(f"unknown narrative form {form!r} for event {self.event_id!r}; expected one of {FORMS}")


# --- the T1 rule ------------------------------------------------------------------------------------
# Derived from the release's first_person_text column: a text that already says "I felt <emotion>"
# anywhere (any case) is kept; one starting with "when"/"because" (any case, "whenever" too) gets
# "I felt <emotion> " in front; any other gets "I felt <emotion> when " in front. The first letter is
# lower-cased unless the first word is "I" or all capitals. This reproduces 6,037 of the 6,050 rows
# exactly; the other 13 differ because the release also lower-cased later occurrences of the first
# word (a whole-text str.replace: "Paraguay-Italy" -> "Paraguay-italy"), which is not copied here.

_STARTS_WITH_CONJUNCTION = re.compile(r"(when|because)", re.IGNORECASE)


def _lower_first(text: str) -> str:
    """Lower-case the first letter unless the first word is the pronoun "I" or an all-capitals word."""
    words = text.split()
    if not words:
        return text
    letters = re.sub(r"[^A-Za-z]", "", words[0])
    if words[0] == "I" or (len(letters) >= 2 and letters.isupper()):
        return text
    return text[0].lower() + text[1:]


def first_person_form(emotion: str, text: str) -> str:
    """The T1 narrative "I felt <emotion> when ..." built from a raw generated_text (seed 000, appendix A.2)."""
    if f"i felt {emotion.lower()}" in text.lower():
        return text
    if _STARTS_WITH_CONJUNCTION.match(text):
        return f"I felt {emotion} {_lower_first(text)}"
    return f"I felt {emotion} when {_lower_first(text)}"


# --- reading TSV files --------------------------------------------------------------------------------

def _read_tsv(path: Path):
    """Read one TSV with pandas, every field a string, the release's CSV quoting honoured."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError as exc:
        raise CorpusError(f"{path}: file is empty; expected a header row with columns {list(RELEASE_COLUMNS)}") from exc
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: cannot be parsed as a tab-separated file: {exc}") from exc
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame


def _header(path: Path) -> list[str]:
    """The column names of a TSV file."""
    return list(_read_tsv(path).columns)


def _check_columns(path: Path, found: Sequence[str], required: Sequence[str]) -> None:
    """Raise CorpusError naming the file and the missing columns."""
    missing = [c for c in required if c not in found]
    if missing:
        raise CorpusError(
            f"{path}: missing column(s) {missing}; expected columns {list(required)}, found {list(found)}"
        )


def _clusters(frame) -> list[str | None]:
    """Each row's cluster (the optional CLUSTER column, stripped; None where empty or absent)."""
    if CLUSTER not in frame.columns:
        return [None] * len(frame)
    return [value.strip() or None for value in frame[CLUSTER]]


def _emotion_of(path: Path, row: int, value: str) -> str:
    """Validate one emotion value."""
    emotion = value.strip().lower()
    if emotion not in EMOTIONS:
        raise CorpusError(
            f"{path}: row {row}: unknown emotion {value!r} in column 'emotion'; expected one of {list(EMOTIONS)}"
        )
    return emotion


def _nonempty(path: Path, row: int, column: str, value: str) -> str:
    """Validate one text field."""
    if not value.strip():
        raise CorpusError(f"{path}: row {row}: empty {column!r}; expected a non-empty text")
    return value


def _text_id(path: Path, row: int, value: str) -> str:
    """Validate one text_id."""
    value = value.strip()
    if not value:
        raise CorpusError(f"{path}: row {row}: empty 'text_id'; expected an identifier")
    return value


def _finish(events: list[Event], source: Path, where: list[tuple[Path, int]]) -> list[Event]:
    """Check ids are unique and the corpus is not empty, then order by EMOTIONS, keeping file order within."""
    seen: dict[str, tuple[Path, int]] = {}
    for event, loc in zip(events, where):
        if event.event_id in seen:
            first = seen[event.event_id]
            raise CorpusError(
                f"{loc[0]}: row {loc[1]}: duplicate event id {event.event_id!r} (emotion, text_id) "
                f"already seen at {first[0]} row {first[1]}; expected unique text_id per emotion"
            )
        seen[event.event_id] = loc
    if not events:
        raise CorpusError(f"{source}: no events; expected at least one row with an emotion in {list(EMOTIONS)}")
    rank = {e: i for i, e in enumerate(EMOTIONS)}
    order = sorted(range(len(events)), key=lambda i: (rank[events[i].emotion], i))
    return [events[i] for i in order]


def _existing(path: str | PathLike[str]) -> Path:
    """The path as a Path, or CorpusError if it does not exist."""
    p = Path(path)
    if not p.exists():
        raise CorpusError(f"{p}: no such file or directory; expected a corpus TSV file or a directory of TSV files")
    return p


def _release_files(path: Path) -> list[Path]:
    """The TSV files of a release directory, or the single file."""
    if path.is_dir():
        files = sorted(p for p in path.glob("*.tsv") if p.is_file())
        if not files:
            raise CorpusError(f"{path}: directory holds no *.tsv file; expected per-emotion TSV files")
        return files
    return [path]


def load_release(path: str | PathLike[str]) -> list[Event]:
    """Events from the seed-000 release: a directory of per-emotion TSVs or one TSV, ordered by EMOTIONS then file row."""
    root = _existing(path)
    events: list[Event] = []
    where: list[tuple[Path, int]] = []
    for file in _release_files(root):
        frame = _read_tsv(file)
        _check_columns(file, list(frame.columns), RELEASE_COLUMNS)
        records = zip(frame[list(RELEASE_COLUMNS)].itertuples(index=False, name=None), _clusters(frame))
        for i, ((emotion, text_id, text, first, third), cluster) in enumerate(records):
            row = i + 2  # 1-based, after the header line
            emotion = _emotion_of(file, row, emotion)
            text_id = _text_id(file, row, text_id)
            events.append(Event(
                event_id=f"{emotion}-{text_id}",
                emotion=emotion,
                text=_nonempty(file, row, "generated_text", text),
                first_person=_nonempty(file, row, "first_person_text", first),
                third_person=_nonempty(file, row, "third_person_text", third),
                cluster=cluster,
            ))
            where.append((file, row))
    return _finish(events, root, where)


def load_generation(path: str | PathLike[str]) -> list[Event]:
    """Events from crowd-enVENT's generation TSV: no-emotion rows dropped, T1 built, no third-person text."""
    file = _existing(path)
    if file.is_dir():
        raise CorpusError(f"{file}: is a directory; expected the file crowd-enVent_generation.tsv")
    frame = _read_tsv(file)
    _check_columns(file, list(frame.columns), GENERATION_COLUMNS)
    events: list[Event] = []
    where: list[tuple[Path, int]] = []
    records = zip(frame[["emotion", "text_id", "generated_text"]].itertuples(index=False, name=None), _clusters(frame))
    for i, ((emotion, text_id, text), cluster) in enumerate(records):
        row = i + 2
        if emotion.strip().lower() in _NO_EMOTION:
            continue
        emotion = _emotion_of(file, row, emotion)
        text_id = _text_id(file, row, text_id)
        text = _nonempty(file, row, "generated_text", text)
        events.append(Event(
            event_id=f"{emotion}-{text_id}",
            emotion=emotion,
            text=text,
            first_person=first_person_form(emotion, text),
            third_person=None,
            cluster=cluster,
        ))
        where.append((file, row))
    return _finish(events, file, where)


def load_events(path: str | PathLike[str]) -> list[Event]:
    """Load a release directory/TSV or a generation TSV, chosen by the columns the file has."""
    p = _existing(path)
    if p.is_dir():
        return load_release(p)
    columns = _header(p)
    if "third_person_text" in columns:
        return load_release(p)
    if "generated_text" in columns and "first_person_text" not in columns:
        return load_generation(p)
    raise CorpusError(
        f"{p}: cannot tell the corpus format from columns {columns}; expected release columns "
        f"{list(RELEASE_COLUMNS)} or generation columns {list(GENERATION_COLUMNS)} (without 'first_person_text')"
    )


def embedded_events() -> list[Event]:
    """The project's own event set (the suite's data/events.tsv), at least 10 events per emotion."""
    resource = resources.files("behavioral.suites.intergroup").joinpath("data", _EMBEDDED)
    with resources.as_file(resource) as file:
        return load_release(file)


# --- sampling and hashing -------------------------------------------------------------------------------

def _allocate(sizes: dict[str, int], n: int, rng: random.Random) -> dict[str, int]:
    """n events over strata of `sizes`, proportionally and at random: each stratum gets the whole part of its share
    n·size/total, and the events left over go to strata drawn with probabilities equal to their shares' fractional
    parts (systematic sampling over the strata in a random order), so every stratum's expected count is its share
    and a sample smaller than the number of strata may reach any of them."""
    total = sum(sizes.values())
    shares = {k: n * size / total for k, size in sizes.items()}
    alloc = {k: math.floor(share) for k, share in shares.items()}
    order = list(sizes)
    rng.shuffle(order)
    point, reached = rng.random(), 0.0
    for k in order:  # the strata whose stretch of the fractional parts' line holds point + j for some whole j
        start, reached = reached, reached + shares[k] - alloc[k]
        if math.floor(reached - point) > math.floor(start - point):
            alloc[k] += 1
    return alloc


def sample_events(events: Sequence[Event], n: int | None, seed: int = 0) -> list[Event]:
    """A seeded sample of n events stratified by emotion in which every event has the same chance, n / len(events)
    (`_allocate`: so a sample of 4 is a random 4 of the corpus, whatever its emotions), in the input order; None or
    n >= len gives all."""
    events = list(events)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        raise CorpusError(f"sample size n={n!r}; expected an integer >= 1 or None")
    if n is not None and n < 1:
        raise CorpusError(f"sample size n={n}; expected an integer >= 1 or None")
    if n is None or n >= len(events):
        return events
    strata: dict[str, list[int]] = {}
    for i, event in enumerate(events):
        strata.setdefault(event.emotion, []).append(i)
    rank = {e: i for i, e in enumerate(EMOTIONS)}
    strata = dict(sorted(strata.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
    rng = random.Random(seed)
    alloc = _allocate({k: len(v) for k, v in strata.items()}, n, rng)
    chosen: set[int] = set()
    for emotion, idx in strata.items():
        chosen.update(rng.sample(idx, alloc[emotion]))
    return [events[i] for i in sorted(chosen)]


def emotions_drawn(emotions: Iterable[str]) -> dict[str, int]:
    """How many times each emotion of `emotions` (one per event) occurs, in the corpus's emotion order (the strata a
    sample drew)."""
    counts: dict[str, int] = {}
    for emotion in emotions:
        counts[emotion] = counts.get(emotion, 0) + 1
    rank = {e: i for i, e in enumerate(EMOTIONS)}
    return dict(sorted(counts.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def corpus_hash(events: Iterable[Event]) -> str:
    """sha256 hex digest of (event_id, emotion, text, first_person, third_person and, where set, cluster) of all
    events, in order (a corpus without clusters hashes as it did before they were read)."""
    digest = hashlib.sha256()
    for e in events:
        record = [e.event_id, e.emotion, e.text, e.first_person, e.third_person] + ([e.cluster] if e.cluster else [])
        digest.update(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
