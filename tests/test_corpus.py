"""Tests of behavioral.suites.intergroup.corpus: loaders, the T1 rule, sampling, hashing and the embedded event set."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from behavioral.suites.intergroup.corpus import (
    EMOTIONS,
    CorpusError,
    Event,
    corpus_hash,
    embedded_events,
    first_person_form,
    load_events,
    load_generation,
    load_release,
    sample_events,
)

RELEASE = Path(__file__).resolve().parents[2] / "shared" / "data" / "crowd-envent"
HEADER = ["emotion", "text_id", "generated_text", "first_person_text", "third_person_text"]

# Invented for these tests; the second one has embedded double quotes.
ANGER_ROWS = [
    ["anger", "7", "my phone was stolen from the gym locker",
     "I felt anger when my phone was stolen from the gym locker",
     "The person felt anger when their phone was stolen from the gym locker."],
    ["anger", "8", 'The plumber said "it will only take a minute" and then stayed for five hours.',
     'I felt anger when the plumber said "it will only take a minute" and then stayed for five hours.',
     'The person felt anger when the plumber said "it will only take a minute" and then stayed for five hours.'],
]
JOY_ROWS = [
    ["joy", "3", "When the kettle finally boiled after the power cut.",
     "I felt joy when the kettle finally boiled after the power cut.",
     "The person felt joy when the kettle finally boiled after the power cut."],
]


def write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    """Write a TSV the way the release does: fields with quotes quoted, inner quotes doubled."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture
def release_dir(tmp_path: Path) -> Path:
    d = tmp_path / "release"
    d.mkdir()
    # Joy's file sorts before anger's by name; the loader must still put anger first.
    write_tsv(d / "crowd-enVent_joy.tsv", HEADER, JOY_ROWS)
    write_tsv(d / "crowd-enVent_anger.tsv", HEADER, ANGER_ROWS)
    return d


def test_quoted_field_is_written_the_release_way(release_dir: Path) -> None:
    raw = (release_dir / "crowd-enVent_anger.tsv").read_text(encoding="utf-8")
    assert '"The plumber said ""it will only take a minute"" and then stayed for five hours."' in raw


def test_release_directory_round_trip(release_dir: Path) -> None:
    events = load_release(release_dir)
    assert [e.event_id for e in events] == ["anger-7", "anger-8", "joy-3"]
    quoted = events[1]
    assert quoted.text == 'The plumber said "it will only take a minute" and then stayed for five hours.'
    assert quoted.first_person == ANGER_ROWS[1][3]
    assert quoted.third_person == ANGER_ROWS[1][4]
    assert quoted.narrative("text") == quoted.text
    assert quoted.narrative("first_person") == quoted.first_person
    assert quoted.narrative("third_person") == quoted.third_person
    assert load_events(release_dir) == events


def test_single_file_matches_directory(release_dir: Path, tmp_path: Path) -> None:
    single = write_tsv(tmp_path / "all.tsv", HEADER, JOY_ROWS + ANGER_ROWS)
    assert load_release(single) == load_release(release_dir)
    assert load_events(single) == load_release(release_dir)


def test_text_id_kept_as_string(tmp_path: Path) -> None:
    rows = [["joy", "007", *JOY_ROWS[0][2:]]]
    events = load_release(write_tsv(tmp_path / "j.tsv", HEADER, rows))
    assert events[0].event_id == "joy-007"


def test_missing_column_names_file_and_column(tmp_path: Path) -> None:
    header = [c for c in HEADER if c != "third_person_text"] + ["third_person"]
    bad = write_tsv(tmp_path / "bad.tsv", header, [JOY_ROWS[0]])
    with pytest.raises(CorpusError) as info:
        load_release(bad)
    message = str(info.value)
    assert "bad.tsv" in message and "third_person_text" in message and "third_person'" in message


def test_unknown_emotion(tmp_path: Path) -> None:
    rows = [["joy", "1", *JOY_ROWS[0][2:]], ["happiness", "2", *JOY_ROWS[0][2:]]]
    bad = write_tsv(tmp_path / "emo.tsv", HEADER, rows)
    with pytest.raises(CorpusError, match=r"emo\.tsv.*row 3.*'happiness'.*anger"):
        load_release(bad)


def test_missing_path(tmp_path: Path) -> None:
    for loader in (load_release, load_generation, load_events):
        with pytest.raises(CorpusError, match="nowhere"):
            loader(tmp_path / "nowhere")


def test_directory_without_tsv(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(CorpusError, match=r"no \*\.tsv"):
        load_release(tmp_path)


def test_empty_text_and_duplicate_ids(tmp_path: Path) -> None:
    empty = write_tsv(tmp_path / "empty.tsv", HEADER, [["joy", "1", "  ", "I felt joy when x", "The person felt joy"]])
    with pytest.raises(CorpusError, match=r"empty\.tsv.*generated_text"):
        load_release(empty)
    dup = write_tsv(tmp_path / "dup.tsv", HEADER, [JOY_ROWS[0], JOY_ROWS[0]])
    with pytest.raises(CorpusError, match=r"duplicate event id 'joy-3'"):
        load_release(dup)
    header_only = write_tsv(tmp_path / "header.tsv", HEADER, [])
    with pytest.raises(CorpusError, match="no events"):
        load_release(header_only)


GEN_HEADER = ["text_id", "temporal_distance", "emotion", "generated_text", "intensity", "suddenness"]


def test_generation_loader(tmp_path: Path) -> None:
    rows = [
        ["1", "days", "joy", "When my sister finished her first pottery class.", "4", "2"],
        ["2", "weeks", "no-emotion", "I walked to the shop to buy bread.", "1", "1"],
        ["3", "weeks", "No Emotion", "I watered the plants on the balcony.", "1", "1"],
        ["4", "months", "anger", "the bus driver shut the doors in my face", "3", "5"],
        ["5", "years", "pride", "I felt pride when my cake won second prize at the village fair.", "4", "1"],
    ]
    path = write_tsv(tmp_path / "crowd-enVent_generation.tsv", GEN_HEADER, rows)
    events = load_generation(path)
    assert [e.event_id for e in events] == ["anger-4", "joy-1", "pride-5"]
    assert all(e.third_person is None for e in events)
    by_id = {e.event_id: e for e in events}
    assert by_id["joy-1"].first_person == "I felt joy when my sister finished her first pottery class."
    assert by_id["anger-4"].first_person == "I felt anger when the bus driver shut the doors in my face"
    assert by_id["pride-5"].first_person == rows[4][3]
    assert load_events(path) == events
    with pytest.raises(ValueError, match="anger-4"):
        by_id["anger-4"].narrative("third_person")


def test_generation_all_filtered_is_empty(tmp_path: Path) -> None:
    rows = [["1", "days", "no-emotion", "I tied my shoelaces.", "1", "1"]]
    path = write_tsv(tmp_path / "gen.tsv", GEN_HEADER, rows)
    with pytest.raises(CorpusError, match=r"gen\.tsv.*no events"):
        load_generation(path)


def test_generation_missing_column(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "gen.tsv", ["text_id", "emotion", "text"], [["1", "joy", "x"]])
    with pytest.raises(CorpusError, match=r"gen\.tsv.*generated_text"):
        load_generation(path)


def test_load_events_unknown_format(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "other.tsv", ["id", "sentence"], [["1", "hello there"]])
    with pytest.raises(CorpusError, match=r"other\.tsv.*third_person_text.*generated_text"):
        load_events(path)


@pytest.mark.parametrize(
    ("emotion", "text", "expected"),
    [
        ("joy", "When my cat learned to open the door.", "I felt joy when my cat learned to open the door."),
        ("joy", "when my cat learned to open the door", "I felt joy when my cat learned to open the door"),
        ("fear", "Whenever the lift stops between floors", "I felt fear whenever the lift stops between floors"),
        ("pride", "Because my code review had no comments", "I felt pride because my code review had no comments"),
        ("sadness", "My tomato plants died in the heatwave.", "I felt sadness when my tomato plants died in the heatwave."),
        ("relief", "I found my keys in the fridge.", "I felt relief when I found my keys in the fridge."),
        ("relief", "I'm done with the tax forms", "I felt relief when i'm done with the tax forms"),
        ("guilt", "A plant I was minding for a friend died", "I felt guilt when a plant I was minding for a friend died"),
        ("joy", "WHEN THE SUN CAME OUT", "I felt joy WHEN THE SUN CAME OUT"),
        ("fear", "MRI scan results were late", "I felt fear when MRI scan results were late"),
        ("anger", "I felt anger when the printer jammed.", "I felt anger when the printer jammed."),
        ("guilt", "I felt guilty when I skipped the meeting.", "I felt guilty when I skipped the meeting."),
        ("joy", "The cat sat on my lap. I felt JOY then.", "The cat sat on my lap. I felt JOY then."),
        ("sadness", "I felt sad when the shop closed.", "I felt sadness when I felt sad when the shop closed."),
        ("boredom", "waiting for the bus", "I felt boredom when waiting for the bus"),
    ],
)
def test_first_person_form(emotion: str, text: str, expected: str) -> None:
    assert first_person_form(emotion, text) == expected


def _events(counts: dict[str, int]) -> list[Event]:
    """Interleaved synthetic events, counts per emotion."""
    out: list[Event] = []
    for i in range(max(counts.values())):
        for emotion, k in counts.items():
            if i < k:
                out.append(Event(f"{emotion}-{i}", emotion, f"t{i}", f"I felt {emotion} when t{i}", None))
    return out


def test_sample_stratified_counts_and_order() -> None:
    events = _events({e: (20 if e not in ("guilt", "shame") else 10) for e in EMOTIONS})  # 220 events
    sample = sample_events(events, 22, seed=1)
    counts = Counter(e.emotion for e in sample)
    assert len(sample) == 22
    assert counts["guilt"] == counts["shame"] == 1
    assert all(counts[e] == 2 for e in EMOTIONS if e not in ("guilt", "shame"))
    position = {e.event_id: i for i, e in enumerate(events)}
    assert [position[e.event_id] for e in sample] == sorted(position[e.event_id] for e in sample)
    assert sample == sample_events(events, 22, seed=1)
    assert sample != sample_events(events, 22, seed=2)


def test_every_event_has_the_same_chance_and_a_small_sample_reaches_every_emotion() -> None:
    """A sample of fewer events than emotions is a random sample of the corpus: over seeds every emotion is drawn, and
    each event about n / N of the time (a rule that gave every emotion at least one event, or the largest remainders
    in a fixed order, drew the same emotions for every seed)."""
    events = _events({**{e: 1 for e in EMOTIONS[:-1]}, "surprise": 100})  # 111 events, 11 emotions of one
    counts = Counter(e.event_id for seed in range(3000) for e in sample_events(events, 14, seed=seed))
    assert all(len(sample_events(events, 14, seed=seed)) == 14 for seed in range(20))
    share = {event.event_id: counts[event.event_id] / 3000 for event in events}
    assert all(abs(p - 14 / 111) < 0.04 for p in share.values())  # 0.126 each; 3 sd of 3,000 draws: 0.018
    embedded = embedded_events()
    for n in (2, 4):
        drawn = Counter(e.emotion for seed in range(300) for e in sample_events(embedded, n, seed=seed))
        assert set(drawn) == set(EMOTIONS)
        assert {len({e.emotion for e in sample_events(embedded, n, seed=s)}) for s in range(50)} <= set(range(1, n + 1))


def test_sample_all_and_errors() -> None:
    events = _events({"joy": 3, "anger": 2})
    assert sample_events(events, None) == events
    assert sample_events(events, 5) == events
    assert sample_events(events, 50) == events
    with pytest.raises(CorpusError, match="n=0"):
        sample_events(events, 0)
    with pytest.raises(CorpusError):
        sample_events(events, -3)


def test_embedded_events() -> None:
    events = embedded_events()
    counts = Counter(e.emotion for e in events)
    assert set(counts) == set(EMOTIONS)
    assert all(counts[e] >= 10 for e in EMOTIONS)
    assert len({e.event_id for e in events}) == len(events)
    for e in events:
        for form in ("text", "first_person", "third_person"):
            assert e.narrative(form).strip()
        assert e.first_person.startswith(f"I felt {e.emotion} when ")
        assert e.third_person.startswith(f"The person felt {e.emotion} when ")
        assert 8 <= len(e.text.split()) <= 40
        assert e.first_person == first_person_form(e.emotion, e.text)
    assert [e.emotion for e in events] == sorted((e.emotion for e in events), key=EMOTIONS.index)


def test_corpus_hash() -> None:
    events = embedded_events()
    h = corpus_hash(events)
    assert len(h) == 64 and h == corpus_hash(list(events))
    changed = list(events)
    e = changed[5]
    changed[5] = Event(e.event_id, e.emotion, e.text + " ", e.first_person, e.third_person)
    assert corpus_hash(changed) != h
    assert corpus_hash(events[::-1]) != h
    assert corpus_hash([Event("a-1", "joy", "x", "y", None)]) != corpus_hash([Event("a-1", "joy", "x", "y", "None")])


@pytest.mark.skipif(not RELEASE.is_dir(), reason="crowd-enVENT release not available")
def test_real_release() -> None:
    events = load_events(RELEASE)
    counts = Counter(e.emotion for e in events)
    assert len(events) == 6050
    assert all(counts[e] == (275 if e in ("guilt", "shame") else 550) for e in EMOTIONS)
    assert len({e.event_id for e in events}) == 6050
    assert all(e.third_person for e in events)
    exact = sum(first_person_form(e.emotion, e.text) == e.first_person for e in events)
    assert exact / len(events) > 0.99


def test_a_cluster_column_groups_events_and_a_corpus_without_one_hashes_as_before(tmp_path: Path) -> None:
    plain = load_release(write_tsv(tmp_path / "plain.tsv", HEADER, ANGER_ROWS + JOY_ROWS))
    clustered = load_release(write_tsv(tmp_path / "clustered.tsv", [*HEADER, "cluster"],
                                       [row + [cluster] for row, cluster in zip(ANGER_ROWS + JOY_ROWS,
                                                                                (" t1 ", "t1", ""))]))
    assert [e.cluster for e in plain] == [None, None, None]
    assert [e.cluster for e in clustered] == ["t1", "t1", None]  # stripped; empty: a cluster of its own
    assert corpus_hash(plain) == corpus_hash([Event(e.event_id, e.emotion, e.text, e.first_person, e.third_person)
                                              for e in plain])
    assert corpus_hash(clustered) != corpus_hash(plain)
    generation = write_tsv(tmp_path / "generation.tsv", ["text_id", "emotion", "generated_text", "cluster"],
                           [["1", "anger", "my bike was stolen", "bikes"], ["2", "joy", "the sun came out", ""]])
    assert [e.cluster for e in load_generation(generation)] == ["bikes", None]
