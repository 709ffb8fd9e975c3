"""What an export's dataset card says of jaem's table (Suite.card)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

from behavioral.suite.card import LabelSet, SuiteCard
from behavioral.suites.jaem.samples import CE_PROMPT, LETTERS


def _labels(options: Any) -> list[LabelSet]:
    """The letters A..E of the CE task (the gen task has no answer set)."""
    return [LabelSet((("task", "ce"),), tuple(LETTERS))] if "ce" in options.tasks else []


def _templates(options: Any, config: Mapping[str, Any]) -> dict[str, str | None]:
    """The CE instruction, then each dialogue template file (the project's texts; none for the user's files)."""
    ce = {"ce instruction": CE_PROMPT} if "ce" in options.tasks else {}
    if options.templates:
        recorded = config.get("templates")  # the manifest's {template id: sha256} of the user's files
        return ce | {f"dialogue {name}": None for name in (recorded if isinstance(recorded, dict) else {})}
    folder = resources.files("behavioral.suites.jaem") / "data" / "templates"
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".txt")), key=lambda f: f.name)
    return ce | {f"dialogue {f.name.removesuffix('.txt')}": f.read_text(encoding="utf-8") for f in files}


CARD = SuiteCard(
    "one prompt × sample: a conversation from a template (`template`) filled with one speaker's attributes; task "
    "`ce` chooses the answer (A-E) that best understands the speaker, task `gen` writes the listener's reply",
    {"task": "ce (multiple choice, A-E) or gen (the listener's free reply)",
     "template": "the dialogue template's id (its file name)",
     "sample_id": "the sample's id: template, attribute values and repeat",
     **{a: f"the speaker's {a}, as filled into the template" for a in
        ("sexuality", "pronoun", "age", "race", "ses", "education", "religion")},
     "options": "the answers' labels in the order shown as A-E, a comma list",
     "gold_letter": "the letter of the empathetic answer",
     "speaker": "the name of the speaker whose situation is to be understood",
     "speaker_text": "the speaker's last utterance, filled"},
    _labels, _templates)
