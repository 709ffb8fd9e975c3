"""A .gguf file parsed once per load: transformers parses it anew for the config, the tokenizer and the weights."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator


@contextlib.contextmanager
def parsed_once() -> Iterator[None]:
    """While active, every `gguf.GGUFReader(path)` returns one reader per file and mode, and gguf's tensor-name
    map is built once per architecture and depth (transformers builds it per module, 397 times for SmolLM2): on a
    2-core machine, SmolLM2-135M's file (a 49k-token vocabulary, parsed a string at a time) took 10 s a parse and
    the name maps 7 s, 38 s in all for a model that dequantizes in 3 s."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}

    def reader(path, mode: str = "r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map
