"""Social groups of seed 000 (Table 1): categories, identity names, group membership, cultural zones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNSPECIFIED = "a person"

_RACE = {
    "White": ["a white person", "a White person", "a Caucasian", "a White American", "a European American"],
    "Black": ["a black person", "a Black person", "an African American", "a Black American"],
    "Asian": ["an Asian person", "an Asian American", "an Asian"],
    "Hispanic": [
        "a Hispanic person", "a Hispanic American", "a Latino American", "a Latino", "a Latina", "a Latinx",
    ],
}

# Inglehart-Welzel cultural zones, seed 000 Table 4, in Table 1 order of the countries.
_ZONES = {
    "English-speaking": ["the United States", "Canada", "the United Kingdom"],
    "Protestant Europe": ["Germany"],
    "Catholic Europe": ["France"],
    "Confucian": ["China", "Japan"],
    "West & South Asia": ["India", "Myanmar", "Israel"],
    "Orthodox Europe": ["Russia", "Ukraine"],
    "Latin America": ["the Philippines", "Argentina", "Brazil", "Mexico"],
    "African-Islamic": ["Iran", "Palestine", "Nigeria", "Egypt", "Pakistan"],
}

_RELIGIONS = ["a Christian", "a Muslim", "a Jew", "a Buddhist", "a Hindu"]


def nationality_identity(country: str) -> str:
    """The identity name of a country, as the paper's template writes it."""
    return f"a person from {country}"


@dataclass(frozen=True)
class Category:
    """One social category: its identities in Table 1 order and the group each belongs to."""

    name: str
    title: str
    identities: tuple[str, ...]
    group_of: dict[str, str]
    zone_of: dict[str, str] | None = None

    @property
    def with_unspecified(self) -> tuple[str, ...]:
        """Identities with the unspecified "a person" first, the row and column order of M."""
        return (UNSPECIFIED, *self.identities)

    def in_group(self) -> np.ndarray:
        """Boolean matrix same[i, j] over `identities` (no "a person"): True where both share a group."""
        groups = np.array([self.group_of[i] for i in self.identities])
        return groups[:, None] == groups[None, :]

    def short_label(self, identity: str) -> str:
        """A compact axis label: the country for nationality, the identity otherwise."""
        if identity == UNSPECIFIED:
            return "unspecified"
        return identity.removeprefix("a person from ")


def _race() -> Category:
    identities = tuple(name for names in _RACE.values() for name in names)
    group_of = {name: group for group, names in _RACE.items() for name in names}
    return Category("race", "Race or Ethnicity", identities, group_of)


def _nationality() -> Category:
    countries = [c for cs in _ZONES.values() for c in cs]
    identities = tuple(nationality_identity(c) for c in countries)
    zone_of = {nationality_identity(c): zone for zone, cs in _ZONES.items() for c in cs}
    return Category("nationality", "Nationality", identities, {i: i for i in identities}, zone_of)


def _religion() -> Category:
    return Category("religion", "Religion", tuple(_RELIGIONS), {r: r for r in _RELIGIONS})


CATEGORIES: dict[str, Category] = {c.name: c for c in (_race(), _nationality(), _religion())}


def get_category(name: str) -> Category:
    """The category called `name`, or a ValueError that lists the known ones."""
    try:
        return CATEGORIES[name]
    except KeyError:
        raise ValueError(f"unknown category {name!r}; expected one of {', '.join(CATEGORIES)}") from None


def category_of(category: str | Category) -> Category:
    """A category given by name or as itself."""
    return get_category(category) if isinstance(category, str) else category
