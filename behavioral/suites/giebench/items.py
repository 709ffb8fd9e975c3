"""GIEBench items: the project's default sample or a user's JSONL (question and four answers, rendered by the
suite), and the authors' release (three files of verbatim prompts, one per prompt type)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.prompt import Prompt, Slot
from behavioral.suite.protocol import Answer
from behavioral.suites.giebench.categories import CATEGORIES, category_name
from behavioral.suites.giebench.prompts import LETTERS, PROMPT_TYPES, identity_span, render, swap_identity
from behavioral.suites.giebench.verdict import ANSWERS, parse_verdict

DEFAULT_ITEMS = Path(__file__).parent / "data" / "items.jsonl"
RELEASE_FILES = {"cot": "COT-Prompt.json", "id": "ID-Prompt.json", "raw": "Raw-Prompt.json"}
JSONL_FIELDS = ("id", "category", "identity", "question", "answers", "correct")
_GROUP = re.compile(r" The user belongs to the (.+?) group\.")


class ItemsError(ValueError):
    """Item data that cannot be used, with the file, id, field and value named."""


@dataclass(frozen=True)
class GieItem:
    """One GIEBench question. Release items carry the authors' verbatim prompts (`texts`) and one correct letter per
    prompt type; JSONL items carry the question and answers, rendered by the suite."""

    item_id: str
    category: str
    identity: str
    correct: Mapping[str, str]  # prompt type -> "A".."D"
    category_raw: str = ""
    question: str | None = None
    answers: Mapping[str, str] | None = None
    texts: Mapping[str, str] | None = field(default=None, compare=False, repr=False)

    def prompt(self, prompt_type: str, identity: str | None = None) -> str:
        """The prompt of `prompt_type`, naming `identity` instead of the item's own where given (a swap)."""
        if self.texts is None:
            return render(prompt_type, identity or self.identity, self.question, self.answers)
        text = self.texts[prompt_type]
        return text if identity is None else swap_identity(text, self.identity, identity)


def _checked_text(value, where: str, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ItemsError(f"{where}: field {name!r} is {value!r}; expected a non-empty string")
    return value


def _checked_category(raw, where: str) -> str:
    name = category_name(_checked_text(raw, where, "category"))
    if name is None:
        raise ItemsError(f"{where}: unknown category {raw!r}; expected one of {', '.join(CATEGORIES)}")
    return name


def _checked_letter(value, where: str) -> str:
    if value not in LETTERS:
        raise ItemsError(f"{where}: field 'correct' is {value!r}; expected exactly one of A, B, C, D")
    return value


def _read_text(path: Path) -> str:
    """The text of the UTF-8 file `path`; a missing file or one that is not UTF-8 is an ItemsError naming it."""
    if not path.is_file():
        raise ItemsError(f"{path}: no such file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = err.object[:err.start].count(b"\n") + 1
        raise ItemsError(f"{path}:{line}: not UTF-8 ({err.reason} at byte {err.start}); expected a UTF-8 file") \
            from None


def _read_json(path: Path):
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ItemsError(f"{path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None


def load_jsonl(path: str | Path) -> list[GieItem]:
    """Items from a JSONL file of {id, category, identity, question, answers {A..D}, correct}, one per line."""
    path = Path(path)
    items, seen = [], set()
    for n, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ItemsError(f"{path}: invalid JSON at line {n}, column {err.colno}: {err.msg}") from None
        if not isinstance(record, dict):
            raise ItemsError(f"{path}:{n}: expected a JSON object, got {type(record).__name__}")
        raw_id = record.get("id")
        shown = raw_id.strip() if isinstance(raw_id, str) else ""
        where = f"{path}:{n} (id {shown or '?'})"
        for name in JSONL_FIELDS:
            if name not in record:
                raise ItemsError(f"{where}: missing field {name!r}")
        item_id = _checked_text(raw_id, where, "id").strip()
        if item_id in seen:
            raise ItemsError(f"{where}: id {item_id!r} appears twice; expected unique ids")
        seen.add(item_id)
        answers = record["answers"]
        if not isinstance(answers, dict) or sorted(answers) != list(LETTERS):
            raise ItemsError(f"{where}: field 'answers' is {answers!r}; expected an object with keys A, B, C, D")
        answers = {k: _checked_text(answers[k], where, f"answers.{k}") for k in LETTERS}
        correct = _checked_letter(record["correct"], where)
        items.append(GieItem(item_id, _checked_category(record["category"], where),
                             _checked_text(record["identity"], where, "identity"),
                             {t: correct for t in PROMPT_TYPES}, record["category"],
                             _checked_text(record["question"], where, "question"), answers))
    if not items:
        raise ItemsError(f"{path}: no items")
    return items


def default_items() -> list[GieItem]:
    """The project's 44 items (4 per category, written for this project)."""
    return load_jsonl(DEFAULT_ITEMS)


def read_prompt_file(path: Path, extra: tuple[str, ...] = ()) -> dict[str, dict]:
    """One release-format file: {id: {"prompt", "correct", "category", *extra}}, every record checked (extra keys
    beyond these are ignored)."""
    data = _read_json(path)
    if not isinstance(data, dict) or not data:
        raise ItemsError(f"{path}: expected a non-empty JSON object keyed by item id")
    records = {}
    for key, record in data.items():
        where = f"{path} (id {key})"
        if not isinstance(record, dict):
            raise ItemsError(f"{where}: expected a JSON object, got {type(record).__name__}")
        for name in ("prompt", "correct", "category", *extra):
            if name not in record:
                raise ItemsError(f"{where}: missing field {name!r}")
        if "answer" not in extra:
            _checked_text(record["prompt"], where, "prompt")
        elif not isinstance(record["answer"], str):
            raise ItemsError(f"{where}: field 'answer' is {record['answer']!r}; expected a string")
        records[str(key)] = {"prompt": record["prompt"], "correct": _checked_letter(record["correct"], where),
                             "category": _checked_category(record["category"], where),
                             "category_raw": record["category"], **{name: record[name] for name in extra}}
    return records


def release_items(files: Mapping[str, Path], records: Mapping[str, dict[str, dict]]) -> list[GieItem]:
    """Items from the three checked files' records (prompt type -> {id: record}): ids and categories must agree,
    the identity is the group the COT and ID prompts name."""
    ids = list(records["cot"])
    for t in ("id", "raw"):
        if set(records[t]) != set(ids):
            extra = sorted(set(records[t]) ^ set(ids))[:3]
            raise ItemsError(f"{files[t]}: ids differ from {files['cot'].name} (e.g. {', '.join(extra)}); "
                             "expected the same ids in every file")
    items = []
    for key in ids:
        category = records["cot"][key]["category"]
        names = {}
        for t in PROMPT_TYPES:
            if records[t][key]["category"] != category:
                raise ItemsError(f"{files[t]} (id {key}): category {records[t][key]['category_raw']!r} differs from "
                                 f"{records['cot'][key]['category_raw']!r} in {files['cot'].name}")
            if t != "raw":
                found = _GROUP.search(records[t][key]["prompt"])
                if found is None:
                    raise ItemsError(f"{files[t]} (id {key}): field 'prompt' names no identity; expected the "
                                     "sentence \"The user belongs to the ... group.\"")
                names[t] = found.group(1)
        if names["cot"] != names["id"]:
            raise ItemsError(f"{files['id']} (id {key}): identity {names['id']!r} differs from {names['cot']!r} in "
                             f"{files['cot'].name}")
        items.append(GieItem(key, category, names["cot"], {t: records[t][key]["correct"] for t in PROMPT_TYPES},
                             records["cot"][key]["category_raw"],
                             texts={t: records[t][key]["prompt"] for t in PROMPT_TYPES}))
    return items


def load_release(directory: str | Path) -> list[GieItem]:
    """The authors' release: COT-Prompt.json, ID-Prompt.json and Raw-Prompt.json in `directory`."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ItemsError(f"{directory}: no such directory; expected the GIEBench data folder")
    files = {t: directory / name for t, name in RELEASE_FILES.items()}
    return release_items(files, {t: read_prompt_file(path) for t, path in files.items()})




@dataclass(frozen=True)
class GieRunItem:
    """One prompt: an item under one prompt type, naming `swap_to` instead of its identity in a swap."""

    item: GieItem
    prompt_type: str
    swap_to: str | None = None

    @property
    def item_id(self) -> str:
        """Unique per prompt: question id, prompt type and (in a swap) the identity named."""
        return "|".join((self.item.item_id, self.prompt_type, *((self.swap_to,) if self.swap_to else ())))

    @property
    def answers(self) -> AnswerSpec:
        return ANSWERS

    @property
    def base_type(self) -> str:
        """cot, id or raw: the prompt this one is (a swap keeps its original's correct letter)."""
        return self.prompt_type.removesuffix("_swap")

    @property
    def fields(self) -> dict[str, str]:
        return {"question_id": self.item.item_id, "prompt_type": self.prompt_type, "category": self.item.category,
                "identity": self.item.identity, "swap_to": self.swap_to, "correct": self.item.correct[self.base_type]}

    def prompt(self) -> Prompt:
        """The sole user message; the group it names is marked as slot `identity` (the item's own group) or, in a
        swap, `swap_to` (the field that holds the group named instead); a Raw prompt names none."""
        text = self.item.prompt(self.base_type, self.swap_to)
        named = self.swap_to or self.item.identity
        span = identity_span(text, named) if self.base_type != "raw" else None
        slots = (Slot("swap_to" if self.swap_to else "identity", 0, *span),) if span else ()
        return Prompt(({"role": "user", "content": text},), slots)

    def parse(self, text: str) -> Answer:
        return Answer(parse_verdict(text))
