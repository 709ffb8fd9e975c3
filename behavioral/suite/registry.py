"""The suites and the studies by name: where each built-in suite's and study's object lives (imported on first use)
and the suites a script registers. The run loop, the analyses and the studies find a suite here by the name a manifest
records, and `run_study` a study by its name, so nothing imports a layer above its own (docs/ARCHITECTURE.md); a new
suite in behavioral/suites or study in interp is registered with one line."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from behavioral.suite.protocol import Suite, SuiteDeclaration

# name -> "module:attribute" of its Suite object, imported on first use
SUITES: dict[str, str] = {
    "intergroup": "behavioral.suites.intergroup.suite:SUITE",
    "scm": "behavioral.suites.scm.suite:SUITE",
    "isear": "behavioral.suites.isear.suite:SUITE",
    "giebench": "behavioral.suites.giebench.suite:SUITE",
    "jaem": "behavioral.suites.jaem.suite:SUITE",
}
# name -> "module:attribute" of its SuiteDeclaration, where its options module declares it apart from the Suite (the
# command line parses a run's flags from it without importing the suite's data or analysis); a suite not listed
# declares them on its Suite object
DECLARATIONS: dict[str, str] = {name: f"behavioral.suites.{name}.options:DECLARATION" for name in SUITES}
_loaded: dict[str, Suite] = {}
_declared: dict[str, SuiteDeclaration] = {}


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


def _object(where: str):
    """The object a table's "module:attribute" names, its module imported."""
    module, attribute = where.split(":")
    return getattr(importlib.import_module(module), attribute)


def get_suite(name: str) -> Suite:
    """The suite called `name`, or a ValueError that lists the known ones.

    >>> from behavioral import get_suite
    >>> suite = get_suite("intergroup")
    >>> options = suite.Options(categories=("religion",), settings=("P0S1T0",), limit_events=1)
    >>> suite.name, options.limit_events
    ('intergroup', 1)
    """
    if name not in _loaded:
        if name not in SUITES:
            raise ValueError(f"unknown suite {name!r}; expected one of {', '.join(names())}")
        _loaded[name] = _object(SUITES[name])
    return _loaded[name]


def get_declaration(name: str) -> SuiteDeclaration:
    """What the suite called `name` declares (its options, run defaults, capture kinds, flags), from its options
    module alone where DECLARATIONS lists one, else its Suite; a ValueError lists the known suites."""
    if name in _loaded or name not in DECLARATIONS:
        return get_suite(name)
    if name not in _declared:
        _declared[name] = _object(DECLARATIONS[name])
    return _declared[name]
