"""`parse_intensity`: the authors' rules, case by case (regex \\b\\d+\\b, first two integers, refusal prefixes)."""

from __future__ import annotations

import pytest

from behavioral.suites.intergroup.answers import parse_intensity


@pytest.mark.parametrize("response, max_rating, expected", [
    # a bare number, and a number after an echoed label
    ("75", 100, 75),
    ("Emotion intensity: 80", 100, 80),
    ("0", 100, 0),  # zero is an answer, not a refusal
    ("100", 100, 100),
    ("10", 10, 10),
    (" 42\n", 100, 42),
    ("85%", 100, 85),
    ("I would say 60.", 100, 60),
    # first integer out of range, second in range
    ("150, I mean 90", 100, 90),
    ("7/10", 10, 7),
    ("12", 10, None),
    ("12 or rather 8", 10, 8),
    ("101", 100, None),
    # only the first two integers count: here they are 150 and 100, so 90 is never looked at
    ("150 out of 100, I mean 90", 100, 100),
    ("200 300 50", 100, None),
    ("20 out of 10, I mean 7", 10, 10),
    ("20 or 30, I mean 7", 10, None),
    # no number at all
    ("The person felt sadness.", 100, None),
    ("", 100, None),
    # what the regex \b\d+\b makes of signs, decimals and glued text
    ("-5", 100, 5),
    ("-5", 10, 5),
    ("3.5", 10, 3),
    ("75.5", 100, 75),
    ("1,000", 100, 1),
    ("5th", 100, None),
    ("x5 y", 100, None),
    ("rating:80abc then 30", 100, 30),
])
def test_parse_intensity(response, max_rating, expected):
    assert parse_intensity(response, max_rating) == expected


@pytest.mark.parametrize("response", [
    "I cannot rate this",
    "I cannot rate this, but maybe 50",
    "I can't",
    "I can't say; 70 perhaps",
    "I'm not rating this. 40",
    "I'm not rating",
])
def test_refusal_prefixes_win_over_numbers(response):
    assert parse_intensity(response, 100) is None
    assert parse_intensity(response, 10) is None


@pytest.mark.parametrize("response, expected", [
    ("Honestly, I cannot rate this: 50", 50),  # the prefix must start the reply
    ("i cannot 50", 50),  # the prefixes are case-sensitive, as in the authors' code
])
def test_refusal_phrases_elsewhere_are_not_refusals(response, expected):
    assert parse_intensity(response, 100) == expected


def test_scale_decides_range():
    assert parse_intensity("60", 100) == 60
    assert parse_intensity("60", 10) is None
    assert parse_intensity("60 or 6", 10) == 6


def test_returns_int():
    value = parse_intensity("Emotion intensity: 80", 100)
    assert type(value) is int
