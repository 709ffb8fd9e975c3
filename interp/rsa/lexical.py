"""Lexical labels of identities, for the RSA study's lexical control: the first token of each identity's head word
as the run's tokenizer reads it (so "a Latino" and "a Latino American" share one), and the continent of intergroup's
nationalities (continents.csv, UN M49 regions). Identities sharing a label are at distance 0 in the label's model
matrix (interp.rsa.label_matrix)."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path

from activations.spans import encode_with_offsets

CONTINENT_FILE = Path(__file__).with_name("continents.csv")
ARTICLES = ("a", "an", "the")


def head_offsets(names: Sequence[str]) -> list[int]:
    """Where each name's head word starts: after the leading words every name shares (nationality's "a person
    from") and then a leading article (a, an, the), always keeping the last word."""
    words = [[(m.start(), m.group()) for m in re.finditer(r"\S+", name)] for name in names]
    if not all(words):
        raise ValueError("an identity name is empty; expected words")
    shared = 0
    while all(len(w) > shared + 1 and w[shared][1] == words[0][shared][1] for w in words):
        shared += 1
    starts = []
    for w in words:
        at = shared
        while at < len(w) - 1 and w[at][1].lower() in ARTICLES:
            at += 1
        starts.append(w[at][0])
    return starts


def first_tokens(tokenizer, names: Sequence[str]) -> list[str]:
    """The first token of each name's head word (`head_offsets`), the name read after a space as the prompts place
    it, as the tokenizer's token string (a fast tokenizer: its offsets find the token)."""
    out = []
    for name, start in zip(names, head_offsets(names)):
        ids, offsets = encode_with_offsets(tokenizer, " " + name)
        hit = next((i for i, (a, b) in enumerate(offsets) if b > a and b > start + 1), None)
        if hit is None:
            raise ValueError(f"the tokenizer gives no token for the head word of identity {name!r}")
        out.append(tokenizer.convert_ids_to_tokens(ids[hit]))
    return out


def read_continents(path: str | Path = CONTINENT_FILE) -> dict[str, str]:
    """identity -> continent from a CSV of identity,continent rows (comment lines start with #)."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    rows = list(csv.reader(lines))
    if not rows or rows[0] != ["identity", "continent"]:
        raise ValueError(f"{path}: expected a header identity,continent")
    return {identity.strip(): continent.strip() for identity, continent in rows[1:]}


def continents(names: Sequence[str], path: str | Path = CONTINENT_FILE) -> list[str] | None:
    """Each name's continent, or None unless the file names every one of them."""
    continent_of = read_continents(path)
    return [continent_of[n] for n in names] if all(n in continent_of for n in names) else None
