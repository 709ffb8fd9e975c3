"""The authors' verdict rule (eval.py) and the closed answer set that score mode reads after the prefill `[[`."""

from __future__ import annotations

import re

from behavioral.inference.answer_spec import AnswerSpec
from behavioral.suites.giebench.prompts import LETTERS

# eval.py's pattern, verbatim: the first [[X]] that is not followed by another verdict and then [[X]] again.
VERDICT = re.compile(r"\[\[([A-Z])\]\](?!(?:[^\[]*\[\[[A-Z]\]\])+[^\[]*\[\[\1\]\])")
PREFILL = "[["
ANSWERS = AnswerSpec.choices({letter: (letter,) for letter in LETTERS}, prefill=PREFILL)


def parse_verdict(response: str) -> str | None:
    """The letter eval.py selects from a reply (any capital, so "E" counts as a wrong answer), or None."""
    match = VERDICT.search(response)
    return match.group(1) if match else None
