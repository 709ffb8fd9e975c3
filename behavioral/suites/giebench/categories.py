"""The eleven identity categories of GIEBench in the paper's column order, the release's spellings and sizes."""

from __future__ import annotations

CATEGORIES = ("Country", "Orientation", "Age", "Gender", "Personality", "Skin", "Faith", "Education", "Economy",
              "Party", "Occupation")
RELEASE_SPELLINGS = {"Orentation": "Orientation"}  # the release's typo -> the paper's name
RELEASE_SIZES = dict(zip(CATEGORIES, (96, 81, 92, 67, 107, 100, 95, 103, 99, 99, 60)))  # 999 items


def category_name(raw: str) -> str | None:
    """The paper's name of a category as a file spells it, or None where it is no GIEBench category."""
    name = RELEASE_SPELLINGS.get(raw, raw)
    return name if name in CATEGORIES else None
