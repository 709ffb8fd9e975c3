"""Packages only some features need (TransformerLens, nnsight, UMAP, GGUF loading, GenderBench's nltk parser): the
engine, the run loop and every suite work without them, and a feature that needs one says so in one line."""

from __future__ import annotations

import importlib
from types import ModuleType

# import name -> the distribution that provides it
PACKAGES = {"transformer_lens": "transformer-lens", "nnsight": "nnsight", "umap": "umap-learn", "gguf": "gguf",
            "nltk": "nltk"}


class MissingPackageError(ValueError):
    """A feature was asked for whose package is not installed."""


def require(module: str, feature: str) -> ModuleType:
    """`module` imported, or a MissingPackageError naming `feature`, the package and the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = PACKAGES.get(module.split(".")[0], module.split(".")[0])
        raise MissingPackageError(f"{feature} needs the package {package}, which is not installed: "
                                  f"pip install {package}") from None
