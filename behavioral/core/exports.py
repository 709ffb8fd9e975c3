"""A package's names imported on first use (PEP 562): a package re-exports what its modules define without importing
the heavy ones until a name is read, so importing one light module of it (a suite's options, which the command line
parses a run's flags from) imports nothing else of it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package` that imports each name of `modules` (module -> the names it defines) on
    first use and keeps it on the package; any other name is an AttributeError (so a submodule of that name is
    imported). A name is never also a submodule's: the submodule would shadow it once imported."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
