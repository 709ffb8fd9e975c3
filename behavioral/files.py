"""Files written so that a kill or a full disk never leaves half of one: JSON through a temporary file and a rename,
new files with the mode the umask gives, write errors that name the file, and the one rule for a folder name taken
from the user or a file."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

# A name that may become one folder: never a path, never hidden, short enough for any file system.
FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def write_error(path: Path, err: OSError) -> OSError:
    """`err` (a full disk, a lost mount, ...) as an error that names the file being written."""
    return OSError(f"cannot write {path}: {err}")


def file_mode() -> int:
    """The mode a new file gets under this process's umask (mkstemp would make it private)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_json_atomic(path: Path, data: dict) -> None:
    """Write `data` as JSON to `path` through a temporary file and a rename; an error names `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise write_error(path, err) from err
