"""A .gguf file's metadata read from its header (the GGUF format's key-value section) without the gguf package: a run
learns a model's blocks and context before anything loads, where gguf's reader parses the whole file (seconds for
SmolLM2's 49k-token vocabulary, a string at a time)."""

from __future__ import annotations

import struct
from collections.abc import Collection
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
# GGUF's value types: the struct format of each fixed-size one, then its string and array types
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


def gguf_metadata(path: str | Path, keys: Collection[str]) -> dict[str, object]:
    """The values of `keys` (numbers, booleans and strings; an array's is skipped) in the header of the .gguf file at
    `path`, read until all are found; a key the file lacks is left out. A file that is not GGUF, or ends inside its
    header, is a ValueError naming it."""
    path = Path(path)
    found: dict[str, object] = {}
    with open(path, "rb") as f:
        if f.read(4) != MAGIC:
            raise ValueError(f"{path}: not a GGUF file (it does not begin with {MAGIC!r})")
        try:
            version = _read(f, "<I")
            wide = "<Q" if version >= 2 else "<I"  # version 1 counted in 32 bits
            _read(f, wide)  # the tensors, whose descriptions follow the metadata
            for _ in range(_read(f, wide)):
                key = _string(f, wide)
                kind = _read(f, "<I")
                if key in keys and kind != ARRAY:
                    found[key] = _value(f, kind, wide)
                    if len(found) == len(keys):
                        break
                else:
                    _skip(f, kind, wide)
        except (struct.error, UnicodeDecodeError, KeyError) as err:
            raise ValueError(f"{path}: its GGUF header cannot be read ({err}); expected a whole .gguf file") from None
    return found


def _read(f: BinaryIO, fmt: str):
    """One value of struct format `fmt`."""
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def _string(f: BinaryIO, wide: str) -> str:
    """A GGUF string: its length, then its UTF-8 bytes."""
    return f.read(_read(f, wide)).decode("utf-8")


def _value(f: BinaryIO, kind: int, wide: str) -> object:
    """A scalar or string value of type `kind`."""
    return _string(f, wide) if kind == STRING else _read(f, SCALARS[kind])


def _skip(f: BinaryIO, kind: int, wide: str) -> None:
    """Move past a value of type `kind` without decoding it (an array's items one by one only where they are
    strings, whose lengths differ)."""
    if kind == STRING:
        f.seek(_read(f, wide), 1)
    elif kind == ARRAY:
        item, count = _read(f, "<I"), _read(f, wide)
        if item in SCALARS:
            f.seek(count * struct.calcsize(SCALARS[item]), 1)
        else:
            for _ in range(count):
                _skip(f, item, wide)
    else:
        f.seek(struct.calcsize(SCALARS[kind]), 1)
