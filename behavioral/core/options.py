"""Typed options declared once: a frozen dataclass whose fields carry their flag (name, help, choices) in metadata.
The CLI's flags, their help and defaults are derived from it, and a script that builds the dataclass in Python gets
the same protocol as the command line (inspect_ai's task config, argparse-free)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

FLAG = "flag"
SIZE_MAX = 2 ** 31 - 1  # the largest count, size or limit a whole-number option takes unless it declares its own
SEED_MAX = 2 ** 63 - 1  # the largest seed (a signed 64-bit integer, what every generator the toolkit seeds takes)
SEED = {"minimum": 0, "maximum": SEED_MAX}  # a seed option's bounds: option(0, "...", **SEED)


@dataclasses.dataclass(frozen=True)
class Flag:
    """How a field appears on the command line: `--name` (default: the field's name with dashes), its help, the
    values a tuple field may take (`all` selects every one; compared after `fold`), a `read` that turns the flag's
    text into the field's value (e.g. a file's contents), a metavar, and the smallest and largest value a number may
    take (checked by `check_bounds`; a whole number's largest is SIZE_MAX unless declared)."""

    help: str
    name: str | None = None
    choices: Sequence[str] | None = None
    fold: Callable[[str], str] = str
    read: Callable[[str], Any] | None = None
    metavar: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None


def option(default: Any, help: str, **flag: Any) -> Any:
    """A dataclass field with an immutable `default` and its command-line flag (see Flag)."""
    return dataclasses.field(default=default, metadata={FLAG: Flag(help, **flag)})


def comma_values(values: str | Sequence[str] | None) -> list[str]:
    """Flag values given repeated and/or comma-separated ("a,b" "c"), stripped, in order, without repeats."""
    if isinstance(values, str):
        values = [values]
    return list(dict.fromkeys(v.strip() for value in values or () for v in value.split(",") if v.strip()))


def choices(values: str | Sequence[str] | None, known: Sequence[str], what: str,
            fold: Callable[[str], str] = str) -> tuple[str, ...]:
    """Repeated/comma-separated flag values, or all of `known` (none given, or `all`); names are compared after
    `fold` and an unknown one is a ValueError naming the known ones."""
    names = comma_values(values)
    if not names or "all" in names:
        return tuple(known)
    by_key = {fold(k): k for k in known}
    for name in names:
        if fold(name) not in by_key:
            raise ValueError(f"unknown {what} {quoted(name)}; expected one of {', '.join(known)} or all")
    return tuple(dict.fromkeys(by_key[fold(n)] for n in names))


def quoted(value: Any, limit: int = 40) -> str:
    """`value` as repr shows it, cut to `limit` characters with its length where longer, so a message never echoes a
    5,000-character value whole."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(value) if isinstance(value, str) else len(text)} characters)"


def _flags(cls: type) -> list[tuple[dataclasses.Field, Flag, Any]]:
    """(field, flag, resolved type) of each field of `cls` that has a flag."""
    hints = typing.get_type_hints(cls)
    return [(f, f.metadata[FLAG], hints[f.name]) for f in dataclasses.fields(cls) if FLAG in f.metadata]


def _scalar(kind: Any) -> Any:
    """int, float, str or bool from a type such as `int | None`."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    return kind


def _is_tuple(kind: Any) -> bool:
    """True for `tuple[...]` and `tuple[...] | None`."""
    return typing.get_origin(_scalar(kind)) is tuple


def _dest(field: dataclasses.Field) -> str:
    return f"option_{field.name}"


def flag_name(field: dataclasses.Field) -> str:
    """The `--flag` of a field."""
    return field.metadata[FLAG].name or f"--{field.name.replace('_', '-')}"


def check_number(value: int | float, name: str, minimum: int | float | None = None,
                 maximum: int | float | None = None) -> None:
    """A ValueError naming `name` where a number is not finite, below `minimum` or above `maximum` (a whole number:
    SIZE_MAX unless given), so every option and setting states its bounds the same way."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if maximum is None and isinstance(value, int):
        maximum = SIZE_MAX
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {quoted(value)}")


def check_bounds(options: Any) -> None:
    """A ValueError naming the flag of the first number of `options` (a field's value, or each of a tuple's) that
    check_number refuses under the field's declared bounds (for __post_init__)."""
    for field, flag, _ in _flags(type(options)):
        value = getattr(options, field.name)
        for number in value if isinstance(value, tuple) else (value,):
            if isinstance(number, (int, float)) and not isinstance(number, bool):
                check_number(number, flag_name(field), flag.minimum, flag.maximum)


def whole_number(text: str) -> int:
    """A flag's text as a whole number (argparse's `type`), or a refusal saying what was expected."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {quoted(text)}") from None


def real_number(text: str) -> float:
    """A flag's text as a number (argparse's `type`), or a refusal saying what was expected; its bounds, finiteness
    included, are checked where the option is declared."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {quoted(text)}") from None


NUMBER_TYPES = {int: whole_number, float: real_number}  # argparse's `type` of a numeric field


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) if value else "none"
    return "none" if value is None else str(value)


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type,
              skip: Sequence[str] = ()) -> None:
    """Add a flag per field of `cls` that declares one, but the fields named in `skip` (e.g. those another Options
    on the same parser declares: from_flags reads one flag into the same field of both); each flag's help ends with
    the field's default."""
    for field, flag, kind in _flags(cls):
        if field.name in skip:
            continue
        default = field.default
        shown = flag.choices and _is_tuple(kind) and tuple(default) == tuple(flag.choices)
        text = flag.help.replace("%", "%%")  # argparse formats help with %
        help = f"{text} (default: {'all' if shown else _shown(default)})"
        if _scalar(kind) is bool:
            parser.add_argument(flag_name(field), dest=_dest(field), action="store_true", help=text)
        elif _is_tuple(kind):
            known = f"{', '.join(flag.choices)} or all; " if flag.choices else ""
            parser.add_argument(flag_name(field), dest=_dest(field), action="append",
                                metavar=flag.metavar or field.name.upper(),
                                help=f"{known}{help}; repeatable or comma-separated")
        else:  # a value of a few choices shows them ({a,b}), any other its field's name
            metavar = flag.metavar or (None if flag.choices else field.name.upper())
            parser.add_argument(flag_name(field), dest=_dest(field), metavar=metavar, help=help,
                                type=str if flag.read else NUMBER_TYPES.get(_scalar(kind), _scalar(kind)),
                                choices=flag.choices)


def fits(value: Any, kind: Any) -> bool:
    """True where plain data `value` (JSON or TOML: a tuple as a list) can stand for a field of type `kind`."""
    if kind is Any:
        return True
    if isinstance(kind, type) and kind is not bool and kind in (int, float):
        return isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    args = typing.get_args(kind)
    if type(None) in args:
        return value is None or any(fits(value, a) for a in args if a is not type(None))
    if typing.get_origin(kind) is tuple:
        return isinstance(value, (list, tuple)) and all(fits(v, args[0]) for v in value)
    return isinstance(kind, type) and isinstance(value, kind)


def type_name(kind: Any) -> str:
    """`kind` as a reader would write it: int, str | None, tuple[str, ...]."""
    return str(kind) if typing.get_args(kind) else getattr(kind, "__name__", str(kind))


def from_mapping(cls: type, values: dict[str, Any], where: str, owner: str, read: bool = True) -> Any:
    """An instance of `cls` (the options of `owner`, e.g. "suite 'scm'") from plain data (a config file's table, a
    manifest's object): each key must be a field, each value of its type (a list for a tuple), a tuple field with
    choices takes `all` or known names, and with `read` a field whose flag reads a file reads it (a manifest holds
    what was read); the first bad key is a ValueError naming `where`.key, its value and what was expected."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    given: dict[str, Any] = {}
    for name, value in values.items():
        if name not in fields:
            raise ValueError(f"{where}.{name} is not an option of {owner}; expected some of "
                             f"{', '.join(fields)}")
        flag = fields[name].metadata.get(FLAG)
        if read and flag and flag.read and isinstance(value, str):
            value = flag.read(value)
        nullable = fields[name].default is None
        if not (fits(value, hints[name]) or (nullable and value is None)):
            raise ValueError(f"{where}.{name} is {quoted(value)}; expected {type_name(hints[name])}")
        if _is_tuple(hints[name]) and value is not None:
            value = choices(list(value), flag.choices, f"{where}.{name}", flag.fold) if flag and flag.choices \
                else tuple(value)
        try:  # the class's own checks, one field at a time, so the error names it
            cls(**{name: value})
        except (ValueError, OSError) as err:  # OSError: a path too long to look up
            reason = err.strerror or err if isinstance(err, OSError) else err
            raise ValueError(f"{where}.{name} is {quoted(values[name])}; expected a value it accepts ({reason})") \
                from None
        given[name] = value
    try:
        return cls(**given)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def from_flags(cls: type, args: argparse.Namespace) -> Any:
    """An instance of `cls` from parsed flags: a flag left out keeps the field's default."""
    given: dict[str, Any] = {}
    for field, flag, kind in _flags(cls):
        value = getattr(args, _dest(field), None)
        if value is None or value is False:
            continue
        if _is_tuple(kind):
            value = choices(value, flag.choices, flag_name(field), flag.fold) if flag.choices else \
                tuple(comma_values(value))
        elif flag.read:
            value = flag.read(value)
        given[field.name] = value
    return cls(**given)

