"""A run directory's manifest.json, read through one typed reader: every field's type and range is checked once, so
a damaged or edited manifest is one line naming the field and what was expected, never a traceback further on."""

from __future__ import annotations

import copy
import json
import math
import uuid
from collections import OrderedDict
from collections.abc import Callable
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from behavioral.core.files import file_key, kept, read_regular, write_json_atomic
from behavioral.core.options import from_mapping

READ_KEPT = 256  # manifests a process keeps as read (read_manifest), the least recently asked for dropped first
_READ: OrderedDict[tuple, Manifest] = OrderedDict()

MANIFEST = "manifest.json"
SCHEMA_VERSION = 2  # the result schema; 1: seed 000's own columns, before the suite framework
SEALS = 1  # the format of the seals a run records of its parts (behavioral.rundir.parts); absent in runs made before seals
MODES = ("generate", "score", "both")  # what a run stores per item: a parsed reply, answer-set scores, or both
TREES = ("lazy", "full")  # how score mode reads an answer tree (behavioral.inference.lazy_tree)
# The default tolerance of a lazy read: no expected value (in its scale's points) or probability it reports is further
# than this from the full tree's.
TREE_TOLERANCE = 1e-3


def check_tolerance(value: float, name: str) -> None:
    """Raise ValueError naming `name` unless `value` is a tolerance: at least 0, below 1."""
    if not 0 <= value < 1:
        raise ValueError(f"{name} must lie in [0, 1), got {value}")


class RunDirError(ValueError):
    """A run directory that cannot be used as asked."""


@dataclass(frozen=True)
class Plan:
    """The work units and result rows of a whole run (every rank's), which an analysis checks the run holds, and
    its `groups` (each group's name and items, in the suite's order), which name every unit the run may hold (None
    in runs made before plans named them)."""

    units: int
    rows: int
    groups: tuple[tuple[str, int], ...] | None = None

    def unit_rows(self, unit_size: int, samples: int) -> dict[str, int] | None:
        """Every planned work unit's id and its rows (`planned_units`); None without groups."""
        return None if self.groups is None else planned_units(self.groups, unit_size, samples)


def planned_units(groups: tuple[tuple[str, int], ...], unit_size: int, samples: int) -> dict[str, int]:
    """The id (`{group}|{chunk}`, behavioral.suite.work) and rows of every work unit that `groups` (name, items) make."""
    return {f"{group}|{k}": min(unit_size, items - start) * samples for group, items in groups
            for k, start in enumerate(range(0, items, unit_size))}


@dataclass(frozen=True)
class AnswerSet:
    """What a run's rows may hold of one answer set it scored: its labels (a row's `probs` has one probability each),
    the nodes of its answer tree (the most `tree_nodes` a row reads) and its labels' smallest and largest values
    (None for unvalued labels), between which every expected value lies."""

    labels: int
    nodes: int
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Manifest:
    """A run's manifest: its `config` (what decides its rows: suite, model, decoding, options, the data's facts),
    the loaded `model`'s description, its `provenance`, its `plan` (None in runs made before plans were recorded)
    `run_id`, the identity every result part of the run carries (None in runs made before parts carried one), and
    `seals`, the format of the seals its parts are checked against (None in runs made before runs sealed their parts;
    a manifest this version makes has them), and the `answers` its scores range over (None in runs that score
    nothing and in runs made before manifests recorded them)."""

    config: dict
    model: dict
    provenance: dict
    plan: Plan | None = None
    run_id: str | None = None
    seals: int | None = SEALS
    answers: tuple[AnswerSet, ...] | None = None

    @property
    def suite(self) -> str:
        """The suite the run belongs to."""
        return self.config["suite"]

    @property
    def mode(self) -> str:
        """What the run stores per item: generate, score or both."""
        return self.config["mode"]

    def as_json(self) -> dict:
        """The manifest as manifest.json holds it."""
        data = {"config": self.config, "model": self.model, "provenance": self.provenance}
        if self.plan is not None:
            data["plan"] = {"units": self.plan.units, "rows": self.plan.rows}
            if self.plan.groups is not None:
                data["plan"]["groups"] = [list(group) for group in self.plan.groups]
        if self.run_id is not None:
            data["run_id"] = self.run_id
        if self.seals is not None:
            data["seals"] = self.seals
        if self.answers is not None:
            data["answers"] = [dataclasses.asdict(a) for a in self.answers]
        return data


def new_run_id() -> str:
    """A fresh identity for a new run directory (random, so no two runs share one)."""
    return uuid.uuid4().hex


# --- what each field may hold: (what is expected, the test) --------------------------------------------------------

Rule = tuple[str, Callable[[Any], bool]]


def _whole(minimum: int | None = None) -> Rule:
    above = "" if minimum is None else f" of at least {minimum}"
    return f"a whole number{above}", \
        lambda v: isinstance(v, int) and not isinstance(v, bool) and (minimum is None or v >= minimum)


def _one_of(values: tuple[str, ...]) -> Rule:
    return f"one of {', '.join(values)}", lambda v: isinstance(v, str) and v in values


TEXT: Rule = ("a non-empty string", lambda v: isinstance(v, str) and v != "")
TEXT_OR_NULL: Rule = ("a string or null", lambda v: v is None or isinstance(v, str))
OBJECT: Rule = ("a JSON object", lambda v: isinstance(v, dict))
RUN_ID: Rule = ("32 hexadecimal digits", lambda v: isinstance(v, str) and len(v) == 32
                and all(c in "0123456789abcdef" for c in v))
GROUPS: Rule = ("a list of [group, items] pairs (a string and a whole number of at least 1)",
                lambda v: isinstance(v, list) and all(
                    isinstance(g, list) and len(g) == 2 and isinstance(g[0], str) and type(g[1]) is int and g[1] >= 1
                    for g in v))

def _answer_set(v: Any) -> bool:
    """True for one recorded answer set: labels and nodes of at least 1, its value range finite numbers or null."""
    def whole(x):
        return type(x) is int and x >= 1

    def bound(x):
        return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x))
    return isinstance(v, dict) and set(v) == {"labels", "nodes", "low", "high"} and whole(v["labels"]) \
        and whole(v["nodes"]) and bound(v["low"]) and bound(v["high"]) and (v["low"] is None) == (v["high"] is None)


ANSWERS: Rule = ("a list of answer sets ({labels, nodes, low, high})",
                 lambda v: isinstance(v, list) and bool(v) and all(map(_answer_set, v)))
SEALS_RULE: Rule = (f"{SEALS}, the seal format this version reads", lambda v: type(v) is int and v == SEALS)

# config fields every schema-2 manifest has; the others are checked where present (older runs and imported ones
# lack some), and a suite's data facts (hashes, counts) are the suite's own
REQUIRED = ("schema", "suite", "model", "mode")
# What the run directory itself reads of a manifest's config (which suite and model, how its rows are laid out: the
# mode, the items per work unit, the samples per item) and what it records beside the settings (the options, the
# loaded model's hash and revision, the chat format). Every other run setting it records is checked by its
# declaration on RunConfig (behavioral.runner.config.check_recorded), which readers of a run's settings call.
CONFIG: dict[str, Rule] = {
    "schema": _whole(),
    "suite": TEXT,
    "model": TEXT,
    "mode": _one_of(MODES),
    "samples": _whole(1),
    "unit_size": _whole(1),
    "options": ("a JSON object or null", lambda v: v is None or isinstance(v, dict)),
    "model_hash": TEXT_OR_NULL,
    "revision": TEXT_OR_NULL,
    "chat_format": TEXT,
}


def shown_json(value: Any) -> str:
    """`value` as JSON, cut to a readable length."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check(path: Path, name: str, value: Any, rule: Rule) -> None:
    what, test = rule
    if not test(value):
        raise RunDirError(f"{path}: {name} is {shown_json(value)}; expected {what} (is the manifest damaged or edited?)")


def _read_json(path: Path, run_dir: Path) -> Any:
    """The JSON in `path`, or a RunDirError naming what is there instead of a readable manifest (a FIFO, a link or
    a file past the size limit among them)."""
    try:
        data = read_regular(path, "the run's manifest, a JSON file written by `empathy-gap run`", error=RunDirError)
    except (FileNotFoundError, NotADirectoryError):
        if not run_dir.is_dir():
            raise RunDirError(f"{run_dir}: no such run directory") from None
        raise RunDirError(f"{run_dir}: no {MANIFEST}; expected a run directory written by `empathy-gap run`") from None
    try:
        return json.loads(data.decode())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunDirError(f"{path}: not valid JSON ({err}); the manifest is damaged") from None


def read_manifest(run_dir: str | Path) -> Manifest:
    """The manifest of a run directory with every field checked, or a RunDirError naming the first field that is
    missing or holds the wrong type or range. A process reads each manifest file once: a later call while the file
    is unchanged (the same inode, size and times) gets a copy of what the first read gave."""
    run_dir = Path(run_dir)
    return copy.deepcopy(kept(_READ, file_key(run_dir / MANIFEST), lambda: _checked_manifest(run_dir), READ_KEPT))


def _checked_manifest(run_dir: Path) -> Manifest:
    """The manifest of `run_dir` read from disk and checked field by field (read_manifest)."""
    path = run_dir / MANIFEST
    data = _read_json(path, run_dir)
    if isinstance(data, dict) and isinstance(data.get("output"), dict):
        raise RunDirError(f"{run_dir}: is the output of `{data['output'].get('command')}`, not a run directory; "
                          "expected one written by `empathy-gap run`")
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise RunDirError(f"{path}: expected a JSON object with a \"config\" object")
    config = data["config"]
    if config.get("schema", 1) != SCHEMA_VERSION or "suite" not in config:
        raise RunDirError(f"{path}: written with result schema {shown_json(config.get('schema', 1))}, this version reads "
                          f"schema {SCHEMA_VERSION} (suite runs); rerun it into a new --out")
    for name in REQUIRED:
        if name not in config:
            raise RunDirError(f"{path}: config has no {name!r}; expected every run's manifest to record it")
    for name, rule in CONFIG.items():
        if name in config:
            _check(path, f"config.{name}", config[name], rule)
    for name in ("model", "provenance"):
        _check(path, name, data.get(name, {}), OBJECT)
    plan = data.get("plan")
    if plan is not None:
        _check(path, "plan", plan, OBJECT)
        for name in ("units", "rows"):
            _check(path, f"plan.{name}", plan.get(name), _whole(0))
        if plan["rows"] < plan["units"]:
            raise RunDirError(f"{path}: plan.rows is {plan['rows']}, fewer than plan.units {plan['units']}; expected "
                              "at least one row per work unit (is the manifest damaged or edited?)")
        plan = Plan(plan["units"], plan["rows"], _groups(path, plan, config))
    if "run_id" in data:
        _check(path, "run_id", data["run_id"], RUN_ID)
    if "seals" in data:
        _check(path, "seals", data["seals"], SEALS_RULE)
    answers = None
    if "answers" in data:
        _check(path, "answers", data["answers"], ANSWERS)
        answers = tuple(AnswerSet(**a) for a in data["answers"])
    return Manifest(config, data.get("model", {}), data.get("provenance", {}), plan, data.get("run_id"),
                    data.get("seals"), answers)


def _groups(path: Path, plan: dict, config: dict) -> tuple[tuple[str, int], ...] | None:
    """plan.groups checked: [group, items] pairs whose units and rows (by the config's unit_size and samples) are
    the plan's counts; None where the plan names no groups."""
    if "groups" not in plan:
        return None
    groups = plan["groups"]
    _check(path, "plan.groups", groups, GROUPS)
    if len({g for g, _ in groups}) < len(groups):
        raise RunDirError(f"{path}: plan.groups names a group twice; expected each group once (is the manifest "
                          "damaged or edited?)")
    for name in ("unit_size", "samples"):
        _check(path, f"config.{name}", config.get(name), _whole(1))
    units = planned_units(tuple(map(tuple, groups)), config["unit_size"], config["samples"])
    if (len(units), sum(units.values())) != (plan["units"], plan["rows"]):
        raise RunDirError(f"{path}: plan.groups make {len(units)} work units ({sum(units.values())} rows), not "
                          f"plan.units {plan['units']} (plan.rows {plan['rows']}); expected the same plan (is the "
                          "manifest damaged or edited?)")
    return tuple((g, n) for g, n in groups)


def write_manifest(run_dir: str | Path, manifest: Manifest) -> None:
    """Write `manifest` as the run directory's manifest.json (atomically)."""
    write_json_atomic(Path(run_dir) / MANIFEST, manifest.as_json())


# --- a suite's options as a manifest holds them --------------------------------------------------------------------

def options_of(manifest: Manifest, cls: type | None, path: str | Path) -> Any:
    """The suite's options object (`cls`, a frozen dataclass) from the manifest's `config.options`, each key and
    type checked (a field declared as a tuple may be null where its default is); None where the suite has none."""
    stored = manifest.config.get("options")
    if cls is None or stored is None:
        return None
    try:
        return from_mapping(cls, stored, "config.options", f"suite {manifest.suite!r}", read=False)
    except ValueError as err:
        raise RunDirError(f"{path}: {err} (is the manifest damaged or edited?)") from None
