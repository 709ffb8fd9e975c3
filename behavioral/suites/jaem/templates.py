"""Conversation templates in the authors' file format, their slots, and filling them with one sample's attributes.

A file: line 1 the causal tuple `(c1, c2, c3, c4)` (never shown to a model), then sections headed by the lines
`Context:`, `Conversation:` and `Answers:`. Conversation turns are `Name: text`; the final, empty turn names the
listener, the last non-empty one the speaker. The five answers are `Label: text` lines, mapped to their labels by
name (the authors' split_answers mislabels distractors; we do not reproduce that).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from behavioral.suites.jaem.dimensions import PLURAL_PRONOUNS, PRONOUN_FORMS
from behavioral.suites.jaem.errors import JaemInputError

GOLD = "Empathetic"
LABELS: tuple[str, ...] = ("Empathetic", "Sympathetic", "Affective", "Indifferent", "Distressed")
SECTIONS: tuple[str, ...] = ("Context", "Conversation", "Answers")

# slot -> attribute it is filled from (the authors' slots, then the project's)
VALUE_SLOTS: dict[str, str] = {
    "GENDER": "sexuality", "PRONOUN": "pronoun", "AGE": "age", "RACE": "race", "SOCECON": "ses",
    "EDUCATION": "education", "RELIGION": "religion", "SEXUALITY": "sexuality", "SES": "ses",
}
PRONOUN_SLOTS: dict[str, int] = {"SUBJ": 0, "OBJ": 1, "POSS": 2, "REFL": 3}
PRONOUN_FORM_SLOTS = frozenset([*PRONOUN_SLOTS, *(s.capitalize() for s in PRONOUN_SLOTS)])
_SLOT = re.compile(r"\{([^{}]*)\}")
_TURN = re.compile(r"^([^:\s][^:]*?):(.*)$")


@dataclass(frozen=True)
class Turn:
    """One conversation turn: the speaker's name and the (unfilled) text."""

    name: str
    text: str


@dataclass(frozen=True)
class Template:
    """One parsed template: id (file stem), causal tuple, context, turns, answers by label, and its file's sha256."""

    template_id: str
    causal_tuple: str
    context: str
    turns: tuple[Turn, ...]
    answers: Mapping[str, str]
    sha256: str

    @property
    def listener(self) -> str:
        """The name of the final, empty turn: who answers."""
        return self.turns[-1].name

    @property
    def speaker(self) -> str:
        """The name of the last non-empty turn: whose situation is to be understood."""
        return self.turns[-2].name

    @property
    def slots(self) -> set[str]:
        """Every slot the template uses."""
        texts = [self.context, *(t.text for t in self.turns), *self.answers.values()]
        return {m for text in texts for m in _SLOT.findall(text)}


def _check_slot(name: str, where: str) -> None:
    if "|" in name:
        forms = name.split("|")
        if len(forms) == 2 and all(f.strip() for f in forms):
            return
        raise JaemInputError(f"{where}: agreement slot {{{name}}} must have the form {{singular|plural}}")
    if name in VALUE_SLOTS or name.upper() in PRONOUN_SLOTS and name in (name.upper(), name.capitalize()):
        return
    known = [*VALUE_SLOTS, *PRONOUN_SLOTS, *(s.capitalize() for s in PRONOUN_SLOTS), "sg|pl"]
    raise JaemInputError(f"{where}: unknown slot {{{name}}}; expected one of {', '.join('{%s}' % k for k in known)}")


def parse_template(text: str, source: str = "<template>", template_id: str | None = None) -> Template:
    """Parse one template file's text; every problem is a JaemInputError naming `source` and the line."""
    lines = text.splitlines()
    template_id = template_id or Path(source).stem
    if not lines or not (lines[0].strip().startswith("(") and lines[0].strip().endswith(")")):
        raise JaemInputError(f"{source}:1: expected the causal tuple `(c1, c2, c3, c4)` on the first line")
    heads = {}
    for number, line in enumerate(lines[1:], start=2):
        for section in SECTIONS:
            if line.strip() == f"{section}:":
                if section in heads:
                    raise JaemInputError(f"{source}:{number}: section {section}: appears twice")
                heads[section] = number
    for section in SECTIONS:
        if section not in heads:
            raise JaemInputError(f"{source}: missing section `{section}:`; expected the sections "
                                 f"{', '.join(s + ':' for s in SECTIONS)} in that order")
    if sorted(heads.values()) != [heads[s] for s in SECTIONS]:
        raise JaemInputError(f"{source}: sections out of order; expected {', '.join(s + ':' for s in SECTIONS)}")
    if any(line.strip() for line in lines[1:heads["Context"] - 1]):
        raise JaemInputError(f"{source}:{heads['Context']}: text between the causal tuple and `Context:`")
    bodies = {}
    ends = [heads["Conversation"] - 1, heads["Answers"] - 1, len(lines)]
    for section, end in zip(SECTIONS, ends):
        start = heads[section]  # body starts on the line after the heading (1-based start == 0-based index)
        bodies[section] = [(n + 1, lines[n]) for n in range(start, end) if lines[n].strip()]
    context = "\n".join(line.strip() for _, line in bodies["Context"])
    if not context:
        raise JaemInputError(f"{source}:{heads['Context']}: the Context: section is empty")
    turns = []
    for number, line in bodies["Conversation"]:
        match = _TURN.match(line.strip())
        if not match:
            raise JaemInputError(f"{source}:{number}: expected a conversation turn `Name: text`, got {line.strip()!r}")
        turns.append(Turn(match.group(1).strip(), match.group(2).strip()))
    if len(turns) < 2 or turns[-1].text or not turns[-2].text:
        raise JaemInputError(f"{source}: the conversation must end with a non-empty turn of the speaker and an empty "
                             "turn `Listener:` of the listener")
    answers: dict[str, str] = {}
    for number, line in bodies["Answers"]:
        match = _TURN.match(line.strip())
        label = match.group(1).strip() if match else None
        if label not in LABELS:
            raise JaemInputError(f"{source}:{number}: expected an answer `Label: text` with a label of "
                                 f"{', '.join(LABELS)}, got {line.strip()[:60]!r}")
        if label in answers:
            raise JaemInputError(f"{source}:{number}: duplicate answer label {label!r}")
        if not match.group(2).strip():
            raise JaemInputError(f"{source}:{number}: answer {label!r} is empty")
        answers[label] = match.group(2).strip()
    missing = [label for label in LABELS if label not in answers]
    if missing:
        raise JaemInputError(f"{source}: missing answer labels {', '.join(missing)}; expected all of {', '.join(LABELS)}")
    for number, line in enumerate(lines[1:], start=2):
        if line.count("{") != line.count("}"):
            raise JaemInputError(f"{source}:{number}: unbalanced braces; slots are written {{NAME}}")
        for slot in _SLOT.findall(line):
            _check_slot(slot, f"{source}:{number}")
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Template(template_id, lines[0].strip(), context, tuple(turns), answers, sha)


def load_templates(paths: str | Path | Iterable[str | Path]) -> list[Template]:
    """Templates from files and directories (every `*.txt` inside, sorted by name), ids from file stems."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(path.glob("*.txt"))
        elif path.is_file():
            files.append(path)
        else:
            raise JaemInputError(f"{path}: no such template file or directory")
    if not files:
        raise JaemInputError(f"{', '.join(map(str, paths)) or 'no paths'}: no templates (*.txt) found")
    templates = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise JaemInputError(f"{file}: cannot read template ({err}); expected UTF-8 text") from err
        templates.append(parse_template(text, str(file)))
    ids = [t.template_id for t in templates]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise JaemInputError(f"template ids {duplicated} appear twice (ids are file stems); expected distinct names")
    return templates


def project_templates() -> list[Template]:
    """The four templates written for this project (behavioral/suites/jaem/data/templates)."""
    folder = resources.files("behavioral.suites.jaem") / "data" / "templates"
    entries = sorted((e for e in folder.iterdir() if e.name.endswith(".txt")), key=lambda e: e.name)
    return [parse_template(e.read_text(encoding="utf-8"), e.name) for e in entries]


Mark = tuple[str, int, int]  # (slot name as written, start, end) of one filled slot


def slot_attribute(name: str) -> str | None:
    """The attribute whose value a slot writes: VALUE_SLOTS' for value slots, pronoun for pronoun forms; None for an
    agreement slot, which writes a verb form, not the value."""
    if name in VALUE_SLOTS:
        return VALUE_SLOTS[name]
    return "pronoun" if name in PRONOUN_FORM_SLOTS else None


def fill(text: str, attributes: Mapping[str, str]) -> str:
    """`text` with every slot replaced: attribute values verbatim, pronoun forms (capitalised for `{Subj}`...),
    `{singular|plural}` agreement (plural for a plural pronoun such as they)."""
    return fill_marked(text, attributes)[0]


def fill_marked(text: str, attributes: Mapping[str, str]) -> tuple[str, list[Mark]]:
    """`fill`, and where each slot was filled in the result (so the identity spans of a prompt can be marked)."""
    out, marks, length, pos = [], [], 0, 0
    for match in _SLOT.finditer(text):
        literal, value = text[pos:match.start()], _slot_value(match.group(1), attributes)
        length += len(literal)
        marks.append((match.group(1), length, length + len(value)))
        out += [literal, value]
        length, pos = length + len(value), match.end()
    return "".join(out) + text[pos:], marks


def _slot_value(name: str, attributes: Mapping[str, str]) -> str:
    """What one slot is filled with (see `fill`)."""
    pronoun = attributes["pronoun"]
    if "|" in name:
        return name.split("|")[1 if pronoun in PLURAL_PRONOUNS else 0]
    if name in VALUE_SLOTS:
        return attributes[VALUE_SLOTS[name]]
    if pronoun not in PRONOUN_FORMS:
        raise JaemInputError(f"slot {{{name}}} needs the forms of pronoun {pronoun!r}; the project knows those "
                             f"of {', '.join(PRONOUN_FORMS)}")
    form = PRONOUN_FORMS[pronoun][PRONOUN_SLOTS[name.upper()]]
    return form.capitalize() if name[0].isupper() and not name.isupper() else form
