"""The population an interval over events speaks of: the emotions (the sampler's strata) and clusters a setting's
kept events hold, read from the run's rows and manifest, and the words that name it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from behavioral.rundir.manifest import RunDirError
from behavioral.suites.intergroup.corpus import EMOTIONS, emotions_drawn


def event_emotions(rows: pd.DataFrame) -> dict[str, str]:
    """Each event's emotion, as the run's rows record it."""
    return dict(rows.drop_duplicates("event_id")[["event_id", "emotion"]].itertuples(index=False, name=None))


def recorded_clusters(config: Mapping) -> dict[str, str]:
    """The clusters of the sampled events a run's manifest records (`event_clusters`; none where its corpus declared
    none), checked: a manifest may come from anyone."""
    clusters = config.get("event_clusters") or {}
    if not isinstance(clusters, dict) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                 for k, v in clusters.items()):
        raise RunDirError("manifest config.event_clusters: expected an object of event ids to non-empty cluster "
                          "names")
    return clusters


def corpus_emotions(config: Mapping) -> tuple[str, ...]:
    """The emotions of the corpus a run sampled from: those its manifest records (`corpus_emotions`, written where
    the corpus lacks some of the scheme's), else every one of EMOTIONS."""
    recorded = config.get("corpus_emotions")
    if recorded is None:
        return EMOTIONS
    if not isinstance(recorded, list) or not recorded or not set(recorded) <= set(EMOTIONS):
        raise RunDirError(f"manifest config.corpus_emotions: expected a list of emotions among {', '.join(EMOTIONS)}")
    return tuple(recorded)


def cluster_labels(event_ids: Sequence[str], clusters: Mapping[str, str]) -> np.ndarray | None:
    """A cluster label per event (an event without one is its own cluster); None where no event has one."""
    if not any(e in clusters for e in event_ids):
        return None
    return np.array([clusters.get(e, f"event {e}") for e in event_ids], dtype=object)


def drawn(event_ids: Sequence[str], kept: np.ndarray, emotions: Mapping[str, str]) -> dict[str, int]:
    """How many of the kept events each emotion has, in the corpus's emotion order."""
    return emotions_drawn(emotions[e] for e, k in zip(event_ids, kept) if k)


def covers(counts: Mapping[str, int], corpus: Sequence[str]) -> bool:
    """Whether events of these emotion `counts` hold every emotion of the `corpus`."""
    return set(corpus) <= set(counts)


def emotions_text(counts: Mapping[str, int], corpus: Sequence[str]) -> str:
    """The emotions events hold, against the corpus's: "all 12 of the corpus's", or "anger 1, disgust 1; 2 of the
    corpus's 12"; "" without events."""
    if not counts:
        return ""
    if covers(counts, corpus):
        return f"all {len(corpus)} of the corpus's"
    held = ", ".join(f"{emotion} {n}" for emotion, n in counts.items())
    return f"{held}; {len(counts)} of the corpus's {len(corpus)}"


def population(counts: Mapping[str, int], corpus: Sequence[str]) -> str:
    """What an interval over these events speaks of, beside its count: "" where they hold every emotion of the
    corpus (events like these), else "of these emotions (anger 1, disgust 1; 2 of the corpus's 12)": a sample
    without some emotion cannot speak of the corpus's mean."""
    return "" if not counts or covers(counts, corpus) else f"of these emotions ({emotions_text(counts, corpus)})"
