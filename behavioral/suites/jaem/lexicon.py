"""The AE measure: a valence-arousal-dominance lexicon and the distance between a reply's affect and that of the
speaker's last utterance (the paper gives no formula; ours is RULE, which differs from its source, Lee et al.'s
scorer, as LEE_RULE says)."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from behavioral.report.formats import finite_number
from behavioral.suites.jaem.errors import JaemInputError

DEMO = "demo"
TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?")
RULE = ("this project's rule, not Lee et al.'s: tokens `[a-z]+(?:'[a-z]+)?` of the lowercased text, words not in the "
        "lexicon skipped; per text the maximum of each dimension over the matched words; score |max(reply) − "
        "max(speaker's last utterance)|, lower is closer; NaN where a side matches no word")
LEE_RULE = ("Lee et al.'s scorer instead takes NLTK's word_tokenize tokens, scores words not in the lexicon as 0 (so "
            "a maximum is never below 0 and a text without lexicon words has maximum 0) and the signed difference "
            "max(speaker) − max(reply), averaged over replies: its numbers are not comparable with these")


class VadDistance(NamedTuple):
    """|max(reply) − max(speaker)| per dimension; lower is closer affect; NaN where a side matches no word."""

    v: float
    a: float
    d: float


@dataclass(frozen=True)
class VadLexicon:
    """Terms (lowercased) to (valence, arousal, dominance), the scale they are on, and where they came from."""

    terms: dict[str, tuple[float, float, float]]
    scale: str  # "[0,1]" (NRC-VAD v1) or "[-1,1]" (v2)
    sha256: str
    source: str
    demo: bool = False

    def maxima(self, text: str) -> tuple[float, float, float] | None:
        """Per dimension, the maximum over the words of `text` the lexicon holds; None if it holds none."""
        found = [self.terms[t] for t in TOKEN.findall(text.lower()) if t in self.terms]
        if not found:
            return None
        return tuple(max(values) for values in zip(*found))

    def distance(self, speaker_text: str, response: str) -> VadDistance:
        """How far the reply's VAD maxima lie from those of the speaker's utterance."""
        speaker, reply = self.maxima(speaker_text), self.maxima(response)
        if speaker is None or reply is None:
            return VadDistance(math.nan, math.nan, math.nan)
        return VadDistance(*(abs(r - s) for r, s in zip(reply, speaker)))




def load_vad_lexicon(path: str | Path) -> VadLexicon:
    """A lexicon from a UTF-8 TSV `term valence arousal dominance` (optional header, `#` lines skipped), or
    `demo`: the project's ~80 words. Values must lie in [0,1] or [-1,1]; a bad line names file:line."""
    if str(path) == DEMO:
        entry = resources.files("behavioral.suites.jaem") / "data" / "demo_vad.tsv"
        data, source = entry.read_bytes(), DEMO
    else:
        try:
            data, source = Path(path).read_bytes(), str(Path(path).resolve())
        except OSError as err:
            raise JaemInputError(f"--vad-lexicon {path}: cannot read ({err})") from err
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JaemInputError(f"{path}: not UTF-8 ({err}); expected a UTF-8 TSV lexicon") from err
    terms: dict[str, tuple[float, float, float]] = {}
    lines: dict[str, int] = {}
    seen_data = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = line.rstrip("\r\n").split("\t")
        values = [finite_number(c) for c in cells[1:]]
        if not seen_data and len(cells) == 4 and all(v is None for v in values):
            seen_data = True  # a header line
            continue
        seen_data = True
        if len(cells) != 4 or any(v is None for v in values) or not cells[0].strip():
            raise JaemInputError(f"{path}:{number}: expected `term<TAB>valence<TAB>arousal<TAB>dominance` with "
                                 f"numbers, got {line[:80]!r}")
        if any(not -1 <= v <= 1 for v in values):
            raise JaemInputError(f"{path}:{number}: values {values} outside [-1, 1]; expected NRC-VAD v1 ([0,1]) or "
                                 "v2 ([-1,1]) scores")
        term = cells[0].strip().lower()
        if term in lines:
            raise JaemInputError(f"{path}: term {term!r} appears on lines {lines[term]} and {number}; expected each "
                                 "term once (terms are lowercased)")
        terms[term], lines[term] = tuple(values), number
    if not terms:
        raise JaemInputError(f"{path}: no lexicon entries; expected lines `term<TAB>valence<TAB>arousal<TAB>dominance`")
    scale = "[-1,1]" if any(v < 0 for vad in terms.values() for v in vad) else "[0,1]"
    return VadLexicon(terms, scale, hashlib.sha256(data).hexdigest(), source, demo=source == DEMO)
