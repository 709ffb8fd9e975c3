"""The social groups rated: Table 1's 25 demographic markers with their attributes and Table 4's definitions, each
marker as `{m} men` and `{m} women` (the `seed` set, 50 groups), and the 16 single-axis `{m} people` groups the
U.S. Stereotypes ratings cover (the `us-stereotypes` set)."""

from __future__ import annotations

from dataclasses import dataclass

# Table 1: attribute -> (privileged markers, disadvantaged markers), in the seed's order.
ATTRIBUTES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "age": (("young",), ("old",)),
    "body type": (("thin",), ("fat",)),
    "disability": (("neurotypical", "able-bodied"), ("neurodivergent", "disabled")),
    "gender identity": (("cisgender",), ("transgender",)),
    "language": (("English-speaking",), ("non-English-speaking",)),
    "nationality": (("American",), ("immigrant",)),
    "sexual orientation": (("heterosexual",), ("gay",)),
    "socio-economic status": (("rich",), ("poor",)),
    "race": (("White",), ("Black", "Asian", "Hispanic")),
    "religion": (("Christian",), ("Muslim", "Jewish")),
}

# Table 4, byte-exact: the definition of each marker (none for men and women).
IDENTITY_DEFINITIONS: dict[str, str] = {
    "transgender": "A transgender person is someone whose gender identity differs from the sex they were assigned at "
                   "birth. This includes individuals who may identify as a different gender from their assigned sex or "
                   "who may have a non-binary or genderqueer identity.",
    "cisgender": "A cisgender person is someone whose gender identity aligns with the sex they were assigned at birth. "
                 "For example, if an individual is assigned male at birth and identifies as a man, they are considered "
                 "cisgender.",
    "gay": "Gay (or homosexual) refers to someone who is attracted to individuals of the same sex. For example, a gay "
           "man is attracted to men, and a gay woman is attracted to women.",
    "heterosexual": "Heterosexual (or straight) refers to someone who is attracted to individuals of the opposite sex. "
                    "For example, a heterosexual man is attracted to women, and a heterosexual woman is attracted to "
                    "men.",
    "young": "The term 'young' refers to individuals who are in the early stages of life, typically including children, "
             "teenagers, and young adults. The specific age range considered 'young' can vary by context and culture, "
             "but it generally includes those under 30.",
    "old": "'Old' typically refers to individuals who are in the later stages of life, often considered elderly or "
           "senior citizens. The specific age at which someone is considered 'old' can vary, but it generally includes "
           "those over the age of 65.",
    "able-bodied": "An able-bodied person is someone who does not have physical or mental disabilities and functions "
                   "without significant impairment.",
    "disabled": "A disabled person is someone who has a physical, mental, or sensory impairment that significantly "
                "affects their ability to perform certain tasks or activities. Disabilities can be visible or invisible "
                "and include impaired vision, impaired hearing or deafness, mental health conditions, epilepsy, etc.",
    "neurotypical": "Neurotypical refers to individuals whose neurological development and functioning are considered "
                    "to be typical or standard. This term is used to contrast with neurodivergent, describing those who "
                    "do not have cognitive or developmental variations such as autism or ADHD.",
    "neurodivergent": "Neurodivergent describes individuals whose cognitive functioning or neurological development "
                      "differs from what is considered typical. This includes conditions such as autism, ADHD, "
                      "dyslexia, and others. Neurodivergent individuals may have different ways of processing "
                      "information and interacting with the world.",
    "Black": "The term 'Black' refers to individuals who identify with the racial and ethnic group characterized by "
             "African ancestry.",
    "White": "'White' (or Caucasian) refers to individuals who identify with the racial group characterized by European "
             "ancestry.",
    "Asian": "'Asian' refers to individuals who identify with the racial and ethnic group originating from the continent "
             "of Asia.",
    "Hispanic": "'Hispanic' describes individuals who come from, or have ancestry from, Spanish-speaking countries, "
                "particularly those in Latin America and Spain. It is used to denote cultural and linguistic ties to "
                "Spanish-speaking communities.",
    "Muslim": "A Muslim is a person who practices Islam, a monotheistic religion based on the teachings of the Prophet "
              "Muhammad as recorded in the Quran.",
    "Jewish": "Jewish refers to individuals who identify with Judaism, a monotheistic religion with a rich cultural and "
              "historical heritage. Jewish identity can be religious, ethnic, or cultural, and it encompasses a range "
              "of beliefs and practices within the Jewish community.",
    "Christian": "A Christian is someone who follows Christianity, a monotheistic religion based on the life and "
                 "teachings of Jesus Christ. Christianity includes various denominations, such as Catholicism, "
                 "Protestantism, and Orthodoxy, each with its own beliefs and practices.",
    "American": "An American is someone who is a citizen or resident of the United States of America.",
    "immigrant": "An immigrant is someone who has moved from their country of origin to another country with the "
                 "intention of residing there permanently or temporarily. Immigrants may relocate for various reasons, "
                 "including economic opportunities, safety, or family reunification.",
    "English-speaking": "English-speaking refers to individuals who communicate primarily in the English language. "
                        "This term may describe native speakers or those who use English as a second language.",
    "non-English-speaking": "Non-English-speaking describes individuals who do not use English as their primary "
                            "language of communication.",
    "thin": "'Thin' (or slim, lean, skinny) describes individuals who have a body type characterized by a lower amount "
            "of body fat and a smaller overall body mass compared to the average body type.",
    "fat": "'Fat' (or obese, overweight) refers to individuals who have a body type characterized by a higher amount of "
           "body fat and a larger overall body mass compared to the average body type.",
    "rich": "'Rich' describes individuals who have a high level of financial wealth and resources. Rich individuals "
            "typically have significant assets, income, or investments that afford them a high standard of living.",
    "poor": "'Poor' refers to individuals who have limited financial resources and struggle to meet basic needs such as "
            "food, shelter, and healthcare. Poverty can result from a variety of factors, including low income, "
            "unemployment, and economic inequality.",
}


@dataclass(frozen=True)
class Group:
    """One rated group: its name as the prompt writes it, its Table 1 marker, gender (men, women or people),
    attribute and privilege; `sources` and `approximate` say which U.S. Stereotypes groups stand for it."""

    name: str
    marker: str
    gender: str
    attribute: str
    privileged: bool
    sources: tuple[str, ...] = ()
    approximate: bool = False

    @property
    def definition(self) -> str:
        """Table 4's definition of the group's marker."""
        return IDENTITY_DEFINITIONS[self.marker]


def _marker_facts() -> dict[str, tuple[str, bool]]:
    return {m: (attribute, privileged) for attribute, sides in ATTRIBUTES.items()
            for privileged, markers in zip((True, False), sides) for m in markers}


MARKERS = _marker_facts()  # marker -> (attribute, privileged), Table 1 order


def _seed_groups() -> tuple[Group, ...]:
    return tuple(Group(f"{m} {gender}", m, gender, attribute, privileged)
                 for m, (attribute, privileged) in MARKERS.items() for gender in ("men", "women"))


# U.S. Stereotypes (Cao et al. 2022) single-axis groups: marker -> (source groups, approximate stand-in).
US_STEREOTYPES_SOURCES: dict[str, tuple[tuple[str, ...], bool]] = {
    "White": (("White people",), False),
    "Black": (("Blacks/African Americans",), False),
    "Asian": (("Asian people",), False),
    "Hispanic": (("Hispanic people",), False),
    "Christian": (("Christian people",), False),
    "Muslim": (("Muslim people",), False),
    "Jewish": (("Jewish people",), False),
    "cisgender": (("cis people",), False),
    "transgender": (("transgender people",), False),
    "neurodivergent": (("neurodivergent people",), False),
    "immigrant": (("immigrants",), False),
    "old": (("elderly people",), True),
    "young": (("teenagers",), True),
    "rich": (("wealthy people",), True),
    "poor": (("working class people", "unemployed people"), True),
    "disabled": (("blind people", "autistic people"), True),
}


def _us_stereotypes_groups() -> tuple[Group, ...]:
    return tuple(Group("immigrants" if m == "immigrant" else f"{m} people", m, "people", *MARKERS[m], sources,
                       approximate) for m, (sources, approximate) in US_STEREOTYPES_SOURCES.items())


GROUPS: dict[str, tuple[Group, ...]] = {"seed": _seed_groups(), "us-stereotypes": _us_stereotypes_groups()}


def group_set(name: str) -> tuple[Group, ...]:
    """The groups of set `name`, or a ValueError naming the known sets."""
    if name not in GROUPS:
        raise ValueError(f"unknown group set {name!r}; expected one of {', '.join(GROUPS)}")
    return GROUPS[name]
