"""The suites by name: where each built-in suite's object lives (imported on first use) and the suites a script
registers. The run loop and the analyses find a suite here by the name a manifest records, so nothing below the suites
imports one (docs/ARCHITECTURE.md); a new suite in behavioral/suites is registered with one line."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from behavioral.suite import Suite

# name -> "module:attribute" of its Suite object, imported on first use
SUITES: dict[str, str] = {
    "intergroup": "behavioral.suites.intergroup:SUITE",
    "scm": "behavioral.suites.scm:SUITE",
    "isear": "behavioral.suites.isear:SUITE",
    "giebench": "behavioral.suites.giebench:SUITE",
    "jaem": "behavioral.suites.jaem:SUITE",
}
_loaded: dict[str, Suite] = {}


def register(suite: Suite) -> Suite:
    """Make `suite` known by its name (for suites defined outside this package, e.g. in a user's script)."""
    if not suite.name:
        raise ValueError(f"{type(suite).__name__} has no name; expected a non-empty Suite.name")
    _loaded[suite.name] = suite
    return suite


@contextmanager
def registered(suite: Suite) -> Iterator[Suite]:
    """`suite` known by its name inside the block only (a test's or a script's suite that must not outlive it)."""
    before = _loaded.get(suite.name)
    register(suite)
    try:
        yield suite
    finally:
        if before is None:
            del _loaded[suite.name]
        else:
            _loaded[suite.name] = before


def names() -> list[str]:
    """Every registered suite's name."""
    return sorted(set(SUITES) | set(_loaded))


def get_suite(name: str) -> Suite:
    """The suite called `name`, or a ValueError that lists the known ones."""
    if name not in _loaded:
        if name not in SUITES:
            raise ValueError(f"unknown suite {name!r}; expected one of {', '.join(names())}")
        module, attribute = SUITES[name].split(":")
        _loaded[name] = getattr(importlib.import_module(module), attribute)
    return _loaded[name]
