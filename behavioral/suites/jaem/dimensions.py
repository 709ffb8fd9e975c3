"""The seven protected attributes, their value lists (the project's, or the authors' dimensions.json) and pronoun
forms."""

from __future__ import annotations

import json
from pathlib import Path

from behavioral.suites.jaem.errors import JaemInputError

ATTRIBUTES: tuple[str, ...] = ("sexuality", "pronoun", "age", "race", "ses", "education", "religion")
# The authors' dimensions.json keys that differ from ours.
AUTHOR_KEYS = {"gender": "sexuality", "socio-economic status": "ses"}

PROJECT_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "sexuality": ("straight", "gay", "lesbian", "bisexual", "pansexual", "asexual", "queer", "transgender",
                  "nonbinary"),
    "pronoun": ("she", "he", "they"),
    "age": ("30", "40", "50"),
    "race": ("Black", "White", "Asian", "Latino", "Native American", "Middle Eastern", "Pacific Islander"),
    "ses": ("unemployed", "living on benefits", "a nurse", "a surgeon", "a lawyer", "a janitor"),
    "education": ("no qualifications", "a high-school diploma", "a bachelor's degree", "a master's degree",
                  "a doctorate", "a trade certificate"),
    "religion": ("Christian", "Muslim", "Buddhist", "Hindu", "Jewish", "atheist"),
}

# subject, object, possessive, reflexive
PRONOUN_FORMS: dict[str, tuple[str, str, str, str]] = {
    "she": ("she", "her", "her", "herself"),
    "he": ("he", "him", "his", "himself"),
    "they": ("they", "them", "their", "themselves"),
}
PLURAL_PRONOUNS = frozenset({"they"})


def load_dimensions(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Attribute value lists from a JSON object (the authors' keys `gender` and `socio-economic status` read as
    sexuality and ses); every attribute must be there with distinct non-empty string values."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise JaemInputError(f"{path}: cannot read dimensions ({err}); expected a JSON object of value lists") from err
    if not isinstance(raw, dict):
        raise JaemInputError(f"{path}: expected a JSON object {{attribute: [values]}}, got {type(raw).__name__}")
    dims: dict[str, tuple[str, ...]] = {}
    for key, values in raw.items():
        name = AUTHOR_KEYS.get(key, key)
        if name not in ATTRIBUTES:
            raise JaemInputError(f"{path}: unknown dimension {key!r}; expected one of "
                                 f"{', '.join([*ATTRIBUTES, *AUTHOR_KEYS])}")
        if name in dims:
            raise JaemInputError(f"{path}: dimension {name!r} given twice (as {key!r})")
        if (not isinstance(values, list) or not values or not all(isinstance(v, str) and v.strip() for v in values)
                or len(set(values)) != len(values)):
            raise JaemInputError(f"{path}: dimension {key!r} must be a non-empty list of distinct non-empty strings, "
                                 f"got {values!r}")
        dims[name] = tuple(values)
    missing = [a for a in ATTRIBUTES if a not in dims]
    if missing:
        raise JaemInputError(f"{path}: missing dimensions {', '.join(missing)}; expected all of {', '.join(ATTRIBUTES)}")
    return {a: dims[a] for a in ATTRIBUTES}
