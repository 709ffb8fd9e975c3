"""Files written so that a kill or a full disk never leaves half of one: JSON through a temporary file and a rename,
new files with the mode the umask gives, write errors that name the file, the one rule for a folder name taken
from the user or a file, and what tells one version of a file from another (file_key)."""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

# A name that may become one folder: never a path, never hidden, short enough for any file system.
FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RECORD_LIMIT = 64 * 2 ** 20  # the most bytes a manifest, seal ledger or sweep record may hold

T = TypeVar("T")
SETTLED = 2  # seconds since its last change before a file is known by its times (file_key)


def check_regular(path: Path, what: str, error: type[Exception] = ValueError) -> None:
    """`error`, naming `path` and `what` was expected, unless it is a regular file (not a link, FIFO or device)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror}); expected {what}") from None
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file (a FIFO, socket, device or folder)"
        raise error(f"{path}: is {kind}; expected {what}")


def read_regular(path: Path, what: str, limit: int | None = RECORD_LIMIT, follow: bool = False,
                 error: type[Exception] = ValueError) -> bytes:
    """The bytes of `path` where it is a regular file (no FIFO, socket or device, which would hang or never end a
    read; with `follow` False, no symbolic link either) of at most `limit` bytes; else `error`, naming it and `what`
    was expected. A missing file raises FileNotFoundError."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise
        kind = "a symbolic link" if path.is_symlink() else f"unreadable ({err.strerror})"
        raise error(f"{path}: is {kind}; expected {what}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, socket or device)"
        raise error(f"{path}: is {kind}; expected {what}")
    with os.fdopen(fd, "rb") as f:
        if limit is not None and info.st_size > limit:
            raise error(f"{path}: holds {info.st_size:,} bytes, more than the {limit:,} such a file may; expected "
                        f"{what}")
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:  # grew while it was read
        raise error(f"{path}: holds more than the {limit:,} bytes such a file may; expected {what}")
    return data


def write_error(path: Path, err: OSError) -> OSError:
    """`err` (a full disk, a lost mount, ...) as an error that names the file being written."""
    return OSError(f"cannot write {path}: {err}")


def file_mode() -> int:
    """The mode a new file gets under this process's umask (mkstemp would make it private)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_json_atomic(path: Path, data: dict, sort_keys: bool = True) -> None:
    """Write `data` as JSON to `path` through a temporary file of its own and a rename (keys sorted unless their
    order means something); an error names `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=sort_keys)
            f.write("\n")
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise write_error(path, err) from err


def file_key(path: Path) -> tuple | None:
    """What tells one version of a regular file from another, for what a process keeps of a file it read (None for
    anything but a regular file, which is never kept). A file changed in the last SETTLED seconds has no key: file
    times advance by the kernel's clock tick, so two writes within one tick (of the same size) would look alike."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(found.st_mode) or time.time_ns() - max(found.st_mtime_ns, found.st_ctime_ns) < SETTLED * 1e9:
        return None
    return os.fspath(path.absolute()), found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def kept(memo: OrderedDict, key: tuple | None, compute: Callable[[], T], limit: int) -> T:
    """`compute()`, kept in `memo` under `key` (a file_key; None: never kept) for a later call, the least recently
    asked for dropped past `limit` entries."""
    if key is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
        while len(memo) > limit:
            memo.popitem(last=False)
    memo.move_to_end(key)
    return memo[key]
