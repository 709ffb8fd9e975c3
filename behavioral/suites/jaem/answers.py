"""Replies as the suite reads them: the chosen letter of a multiple-choice reply, and a free reply cut where the
model starts writing the speaker's next turn."""

from __future__ import annotations

import re

# A leading letter after markup (`**B**)`, `"C"`, `(D)`), not the first letter of a word ("Actually").
_LEADING = re.compile(r"\s*[*\"'“‘(\[\s]*([A-E])(?![A-Za-z])")
_STATED = re.compile(r"(?:answer\s*:\s*|answer is\s+)[*\"'“‘(\[\s]*([A-E])(?![A-Za-z])", re.IGNORECASE)


def parse_letter(text: str) -> str | None:
    """The letter A-E a reply chooses: a leading letter, else the first `Answer: X` / `answer is X`; None if
    neither (counted as a wrong answer)."""
    match = _LEADING.match(text) or _STATED.search(text)
    return match.group(1) if match else None


def letter_decided(text: str) -> bool:
    """True once no continuation of `text` can change parse_letter(text): a letter was found and a character
    follows it, or the start can no longer hold a leading letter and a stated one was found."""
    match = _LEADING.match(text)
    if match:
        return match.end() < len(text)
    if re.fullmatch(r"\s*[*\"'“‘(\[\s]*", text):
        return False
    stated = _STATED.search(text)
    return stated is not None and stated.end() < len(text)


def _speaker_line(speaker: str) -> re.Pattern:
    return re.compile(rf"^[ \t]*{re.escape(speaker)}:", re.MULTILINE)


def cut_reply(text: str, speaker: str) -> str:
    """The reply up to a line that starts the speaker's next turn (`Speaker:`), stripped."""
    match = _speaker_line(speaker).search(text)
    return (text[:match.start()] if match else text).strip()


def reply_decided(text: str, speaker: str) -> bool:
    """True once the reply holds a line starting the speaker's turn: nothing after it is kept."""
    return _speaker_line(speaker).search(text) is not None
