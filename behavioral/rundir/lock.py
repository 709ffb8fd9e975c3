"""One process per rank of a run directory (or a sweep's folder): an exclusive lock the system releases when its
process dies, so a killed run never blocks its resume and a second process on the same rank is refused at once,
before anything heavy is imported or loaded."""

from __future__ import annotations

import datetime
import fcntl
import os
import socket
from pathlib import Path

from behavioral.core.files import file_mode
from behavioral.rundir.manifest import RunDirError


class RunLock:
    """An exclusive lock on one rank of a run directory (or a sweep's folder), held by the process writing that
    rank's rows; the system releases it when the process dies, so a killed run never blocks its resume."""

    def __init__(self, run_dir: str | Path, rank: int = 0, what: str = "run"):
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.what = what  # what the folder holds, as the refusal names it: a run, a sweep
        self.path = self.run_dir / f".rank{rank:03d}.lock"
        self._fd: int | None = None
        self._made: list[Path] = []

    def acquire(self, raise_if_held: bool = True) -> bool:
        """Take the lock, creating the run directory if needed; if another process holds it, raise a RunDirError
        naming the holder (or return False when `raise_if_held` is False)."""
        self._made = [p for p in (self.run_dir, *self.run_dir.absolute().parents) if not p.exists()][::-1]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, file_mode())
            except OSError as err:
                self._remove_made()
                kind = "a symbolic link" if self.path.is_symlink() else f"not a lock file ({err.strerror})"
                raise RunDirError(f"{self.path}: is {kind}; expected the lock file empathy-gap keeps for rank "
                                  f"{self.rank} (or none): remove it") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 400).decode(errors="replace").strip() or "another process"
                os.close(fd)
                self._remove_made()
                if not raise_if_held:
                    return False
                raise RunDirError(
                    f"{self.run_dir} is in use: rank {self.rank} is being written by {holder} (lock {self.path.name}); "
                    f"wait for that {self.what} to finish or stop it, then rerun the same command to resume"
                ) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous holder removed the file while we opened it: lock the new one
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on host {socket.gethostname()} since {started}".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        """Give the lock up and remove its file, and any directory acquire() made that stayed empty."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
        self._remove_made()

    def _remove_made(self) -> None:
        for folder in reversed(self._made):
            try:
                folder.rmdir()
            except OSError:
                break
        self._made = []

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def is_lock_file(path: Path) -> bool:
    """True for a RunLock file (which a running process keeps in its run directory)."""
    return path.name.startswith(".rank") and path.name.endswith(".lock")
