"""A run setting declared once (vLLM's EngineArgs for this toolkit's runs): a RunConfig field whose metadata carries
its help, its check, whether it is part of a run's identity (and what runs made before it existed ran with), which
tables of a sweep file may give it, and how its `empathy-gap run` flag reads. The flags and their reading, the
checks, the check of its value in a run's manifest, the resume identity and the sweep's keys are derived from the
fields (`add_setting_flags`, `config_from_flags`, `checks`, `recorded_checks`, `identity_fields`, `added_since`,
`sweep_keys`)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from behavioral.core.options import real_number, whole_number
from behavioral.rundir.manifest import shown_json

SETTING = "setting"
Check = Callable[[Any, str], None]  # raises ValueError naming the value `name` (a flag, or a sweep file's key)
SCOPES = ("run", "model", "suite", "capture")  # the sweep tables a setting may be given in ([run], [[model]], ...)
UNSET = object()  # no value: a setting that runs made before it existed never had


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a run setting declares beside its type and default. `help` may name `{default}` (the suite's default
    for a decoding setting, else the field's); `check(value, name)` refuses a value; `suite_default`: the default of
    a decoding setting, which a suite may replace (its field then defaults to None); `identity`: a resume must
    match it, and `since` is the value runs whose manifests lack it ran with; `sweep`: the tables of a sweep file
    that may give it, under `key` where that differs from its name; `flag`: the argparse keywords of its flag beyond
    those its type gives (None: it has no flag of its own); `read` turns the parsed flag into the field's value
    (with the suite's declaration, for a value such as `all`); `recorded`: how its value in a run's manifest is checked
    where the manifest records another form than the setting's own (None: as the setting, `recorded_checks`)."""

    help: str
    check: Check | None = None
    suite_default: Any = UNSET
    identity: bool = False
    since: Any = UNSET
    sweep: tuple[str, ...] = ()
    key: str | None = None
    flag: Mapping[str, Any] | None = dataclasses.field(default_factory=dict)
    read: Callable[[Any, Any], Any] | None = None
    recorded: Check | None = None


def setting(default: Any = dataclasses.MISSING, help: str = "", **declared: Any) -> Any:
    """A RunConfig field with its declaration (see Setting); no `default` makes it required."""
    return dataclasses.field(default=default, metadata={SETTING: Setting(help, **declared)})


def declared(cls: type) -> dict[str, tuple[dataclasses.Field, Setting]]:
    """(field, declaration) of every setting of `cls`, by name, in field order."""
    return {f.name: (f, f.metadata[SETTING]) for f in dataclasses.fields(cls) if SETTING in f.metadata}


def checks(cls: type) -> dict[str, Check]:
    """Each setting's own check of its value, by name."""
    return {name: s.check for name, (_, s) in declared(cls).items() if s.check is not None}


def suite_defaults(cls: type) -> dict[str, Any]:
    """The decoding settings' defaults, which a suite may replace with its own (Suite.run_defaults), by name."""
    return {name: s.suite_default for name, (_, s) in declared(cls).items() if s.suite_default is not UNSET}


def _json_form(kind: Any) -> tuple[str, Callable[[Any], bool]] | None:
    """What JSON holds of a value of the annotated type `kind` (its optional None left out: a run records the value it
    resolved), as (what is expected, the test); None for a type without one JSON form."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = args[0] if len(args) == 1 else Any
    if kind is bool:
        return "true or false", lambda v: isinstance(v, bool)
    if kind is int:
        return "a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool)
    if kind is float:
        return "a finite number", lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)
                                             and math.isfinite(v))
    if kind is str:
        return "a string", lambda v: isinstance(v, str)
    if typing.get_origin(kind) is tuple and typing.get_args(kind) == (str, ...):
        return "a list of strings", lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v)
    return None


def _recorded(form: tuple[str, Callable[[Any], bool]] | None, check: Check | None) -> Check:
    """A check of a recorded value: its JSON form, then the setting's own check (of the value as the setting holds
    it: a list as a tuple)."""
    def recorded(value: Any, name: str) -> None:
        if form is not None and not form[1](value):
            raise ValueError(f"{name} is {shown_json(value)}; expected {form[0]}")
        if check is not None:
            check(tuple(value) if isinstance(value, list) else value, name)
    return recorded


def recorded_checks(cls: type) -> dict[str, Check]:
    """How each setting's value in a run's manifest is checked, by name: its declared `recorded` check, else the JSON
    form of its type followed by its own check (a damaged or edited manifest is refused naming the setting)."""
    hints = typing.get_type_hints(cls)
    return {name: s.recorded or _recorded(_json_form(hints[name]), s.check) for name, (_, s) in declared(cls).items()}


def identity_fields(cls: type) -> tuple[str, ...]:
    """The settings a resume must match, in field order."""
    return tuple(name for name, (_, s) in declared(cls).items() if s.identity)


def added_since(cls: type) -> dict[str, Any]:
    """The value runs made before a setting existed ran with, by name (settings that have one)."""
    return {name: s.since for name, (_, s) in declared(cls).items() if s.since is not UNSET}


def sweep_keys(cls: type, scope: str) -> dict[str, str]:
    """The keys a sweep file's `scope` table ([run], [[model]], a suite's, its capture table) may give, each to the
    setting it sets."""
    return {s.key or name: name for name, (_, s) in declared(cls).items() if scope in s.sweep}


def flag(name: str) -> str:
    """The `empathy-gap run` flag of a setting."""
    return f"--{name.replace('_', '-')}"


def add_setting_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type,
              defaults: Mapping[str, Any]) -> None:
    """Add the flag of each setting of `cls` that has one: whole and real numbers parsed as such, a bool a switch,
    the default the field's (a setting whose field defaults to None takes `defaults`' value, which its help shows)."""
    hints = typing.get_type_hints(cls)
    for name, (field, s) in declared(cls).items():
        if s.flag is None:
            continue
        kind, given = hints[name], dict(s.flag)
        if field.default is not dataclasses.MISSING and "default" not in given:
            given["default"] = field.default
        if kind is bool and "action" not in given:
            given["action"] = "store_true"
        elif "type" not in given and "action" not in given and "choices" not in given:
            scalar = {int: whole_number, float: real_number}
            for option, reader in scalar.items():
                if kind in (option, option | None):
                    given["type"] = reader
        shown = defaults.get(name, field.default)
        parser.add_argument(flag(name), help=s.help.format(default=shown), **given)


def config_from_flags(cls: type, args: argparse.Namespace, declaration: Any, **fixed: Any) -> Any:
    """`cls` from parsed flags (each setting's `read` applied, given the suite's `declaration`), with `fixed` for the
    fields no flag gives."""
    values = {}
    for name, (_, s) in declared(cls).items():
        if s.flag is not None:
            value = getattr(args, name)
            values[name] = s.read(value, declaration) if s.read is not None else value
    return cls(**values | fixed)
