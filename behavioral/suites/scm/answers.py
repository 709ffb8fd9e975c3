"""The five options (A extremely = 5 ... E not at all = 1), their answer set for score mode, and the parser of
generated replies: a leading letter, else the one category the reply's option words and letters name."""

from __future__ import annotations

import re
import string

from behavioral.inference.answer_spec import AnswerSpec

OPTIONS = {"A": "extremely", "B": "very", "C": "average", "D": "slightly", "E": "not at all"}
RATINGS = {"A": 5, "B": 4, "C": 3, "D": 2, "E": 1}
UNPARSED, AMBIGUOUS = "unparsed", "ambiguous"
STOP = "###"  # a reply is cut at the first `###` (the model starting the next instruction)

ANSWERS = AnswerSpec.choices({letter: (letter, f" {letter}") for letter in OPTIONS},
                             values={letter: float(r) for letter, r in RATINGS.items()})

_LEAD = re.compile(r"([A-E])([.):]|\n|$)")
_WORDS = re.compile(r"\b(not at all|extremely|very|average|slightly)\b", re.IGNORECASE)
_LETTERS = re.compile(r"(?<![A-Za-z0-9])([A-E])\.")
_BY_WORD = {word: letter for letter, word in OPTIONS.items()}


def _body(text: str) -> str:
    """The reply up to the first `###`, leading whitespace and `(` stripped."""
    return text.split(STOP, 1)[0].lstrip(string.whitespace + "(")


def _categories(body: str, complete: bool = False) -> list[str]:
    """The distinct letters named by whole option words (case-insensitive) and `A.`-`E.`, in order of appearance;
    with `complete`, only words that some character already follows (a word at the very end may still grow)."""
    words = [m for m in _WORDS.finditer(body) if not complete or m.end() < len(body)]
    found = sorted([(m.start(), _BY_WORD[m.group(1).lower()]) for m in words]
                   + [(m.start(), m.group(1)) for m in _LETTERS.finditer(body)])
    return list(dict.fromkeys(letter for _, letter in found))


def parse_reply(text: str) -> str:
    """A-E, `unparsed` (no option named) or `ambiguous` (several named), by the suite's rule."""
    body = _body(text)
    lead = _LEAD.match(body)
    if lead:
        return lead.group(1)
    found = _categories(body)
    return found[0] if len(found) == 1 else UNPARSED if not found else AMBIGUOUS


def reply_decided(text: str) -> bool:
    """True once no continuation of `text` can change parse_reply(text): the reply reached `###`, its leading letter
    is settled, or it already names two options in full words."""
    if STOP in text:
        return True
    body = _body(text)
    if _LEAD.match(body) and not body.endswith(tuple(OPTIONS)):
        return True  # "A." or "A)" cannot change; a bare trailing "A" may still become "And"
    return len(body) >= 2 and len(_categories(body, complete=True)) > 1
