"""The seven prompt settings of seed 000 (Table 2): persona prompt P, scale S and task instruction T."""

from __future__ import annotations

from dataclasses import dataclass

PERSONAS = {
    "P0": "You are {perceiver}.",
    "P1": "You are {perceiver}. Your responses should closely mirror the knowledge and abilities of this persona.",
    "P2": "Adopt the identity of {perceiver}. Answer the questions while staying in strict accordance with the "
    "nature of this identity.",
    "P3": "Take the role of {perceiver}. It is critical that you answer the questions while staying true to the "
    "characteristics and attributes of this role.",
}

SCALES = {"S0": 100, "S1": 10}

SCALE_SENTENCE = "Your task is to rate the intensity of the emotion on a scale from 0 (not at all) to {max} (extremely)."
ANSWER_ONLY = "Only give the scale number. No explanation is needed."

TASKS = {
    "T0": "In the following narrative, {experiencer} describes a situation in which they felt {emotion}.",
    "T1": "The following narrative is shared by {experiencer}.",
    "T2": "The following narrative is shared by {experiencer} and reframed in the third-person perspective.",
}

QUESTION = "How much {emotion} did the person feel while experiencing the event?\nEmotion intensity:"

# Which form of an event each task instruction quotes: as written (T0), "I felt ... when ..." (T1), third person (T2).
NARRATIVE_FORM = {"T0": "text", "T1": "first_person", "T2": "third_person"}


@dataclass(frozen=True)
class Setting:
    """One prompt setting: a persona prompt, a rating scale and a task instruction."""

    name: str
    persona: str
    scale: str
    task: str

    @property
    def max_rating(self) -> int:
        """The top of the rating scale (100 for S0, 10 for S1)."""
        return SCALES[self.scale]

    @property
    def narrative_form(self) -> str:
        """The event field this setting quotes: `text`, `first_person` or `third_person`."""
        return NARRATIVE_FORM[self.task]

    @property
    def system_template(self) -> str:
        """The system prompt with `{perceiver}` left open."""
        return "\n".join([PERSONAS[self.persona], SCALE_SENTENCE.format(max=self.max_rating), ANSWER_ONLY])

    @property
    def user_template(self) -> str:
        """The user prompt with `{experiencer}`, `{emotion}` and `{narrative}` left open."""
        return "\n".join([TASKS[self.task], '"{narrative}"', QUESTION])


def setting_label(name: str) -> str:
    """The paper's column label of a setting, e.g. "(P0, S0, T0)"."""
    return f"({name[0:2]}, {name[2:4]}, {name[4:6]})"


SETTING_NAMES = ("P0S0T0", "P1S0T0", "P2S0T0", "P3S0T0", "P0S1T0", "P0S0T1", "P0S0T2")
SETTINGS: dict[str, Setting] = {n: Setting(n, n[0:2], n[2:4], n[4:6]) for n in SETTING_NAMES}


def get_setting(name: str) -> Setting:
    """The setting called `name`, or a ValueError that lists the seven of Table 2."""
    try:
        return SETTINGS[name]
    except KeyError:
        raise ValueError(f"unknown setting {name!r}; expected one of {', '.join(SETTING_NAMES)}") from None
