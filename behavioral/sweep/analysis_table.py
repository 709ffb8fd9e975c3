"""A sweep's analysis options: a suite's `analysis` table (its AnalyzeOptions' values, as `empathy-gap analyze`
takes them as flags) checked where a sweep file or sweep.json gives it, and the options a suite setting's analysis
runs with, the command's own values replacing the recorded ones key by key."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from behavioral.core.options import FLAG, flag_name, from_mapping, quoted
from behavioral.suite.registry import get_suite

TEXT = (str, str | None)  # an option of free text, not one of declared choices: a file, a folder or a model


def analysis_class(suite: str) -> type | None:
    """The AnalyzeOptions of `suite` (None: its analysis takes none), which imports the suite: a sweep file is read
    without it unless a table gives analysis options."""
    return get_suite(suite).AnalyzeOptions


def checked(suite: str, values: Mapping[str, Any], where: str, named: bool = False) -> dict[str, Any]:
    """`values` (an analysis table written at `where`) as the suite's AnalyzeOptions hold them: each key one of its
    options, each value of its type and accepted by its checks. A value that names a file, a folder or a model (an
    option of free text), or one no flag takes, is refused unless `named` (the user's own command or script gives
    it): a sweep file shared with its folder, or its sweep.json, never makes an analysis read a file or a model."""
    cls = analysis_class(suite) if values else None
    if cls is None:
        if values:
            raise ValueError(f"{where}: suite {suite!r} takes no analysis options")
        return {}
    options = from_mapping(cls, dict(values), where, f"suite {suite!r}'s analysis", read=False)
    if not named:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            flag = field.metadata.get(FLAG)
            if field.name in values and (flag is None or (hints[field.name] in TEXT and not flag.choices)):
                given = f" ({flag_name(field)})" if flag is not None else ""
                raise ValueError(f"{where}.{field.name} is {quoted(values[field.name])}, which names a file, a model "
                                 "or an object; a sweep's analysis table sets numbers, switches and named choices "
                                 f"only: give it to `empathy-gap analyze SWEEP`{given} or to analyze_sweep's options")
    return {key: getattr(options, key) for key in values}


def analysis_options(suite: str, recorded: Mapping[str, Any], given: Mapping[str, Any], where: str) -> Any:
    """The AnalyzeOptions of one suite setting's analysis (None: the suite has none): its `recorded` values, each key
    replaced by the command's own `given` ones (both `checked`); a combination the options refuse names `where`."""
    cls = analysis_class(suite)
    if cls is None:
        return None
    try:
        return cls(**(dict(recorded) | dict(given)))
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
