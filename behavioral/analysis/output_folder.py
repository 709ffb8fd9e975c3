"""The one rule for what a command writes: only inside its own output folder, only the files that folder's manifest
names, and never over a folder it did not make. `analyze`, `import` and every study write through `output_folder`."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from behavioral.core.files import FOLDER_NAME, write_json_atomic
from behavioral.rundir.provenance import provenance

MANIFEST = "manifest.json"
OUTPUT = "output"  # the manifest key that marks a folder as a command's output and lists its files
STAGING = ".staging-"  # prefix of the folder a command writes into before its files are moved into place
STAGING_MARK = ".empathy-gap-staging"  # the file that marks a staging folder as one a command made


class OutputFolderError(ValueError):
    """An output folder a command may not write into."""


@dataclass
class OutputFolder:
    """A command's output folder while it is written: files go to `path` (a staging folder inside `final`) and
    appear in `final` together once the command's block ends; `record` is what manifest.json says besides the list
    of files. Sub-folders named in `keep` (run directories the command makes and resumes) are written in `final`
    directly and never replaced."""

    final: Path
    command: str
    path: Path
    record: dict = field(default_factory=dict)
    keep: tuple[str, ...] = ()
    files: list[str] = field(default_factory=list)  # once committed: the files written, relative to `final`

    def sub(self, name: str) -> Path:
        """The staged sub-folder `name`, where a part of the output goes: one folder name (FOLDER_NAME), never a
        path, so nothing read from a file can place a write outside the output folder."""
        if not FOLDER_NAME.fullmatch(name):
            raise OutputFolderError(f"--out {self.final}: a sub-folder named {name[:80]!r}; expected a folder name "
                                    "(letters, digits, '.', '_' or '-', at most 64)")
        return self.path / name

    def written(self) -> list[Path]:
        """The committed files' paths in `final`, manifest.json last."""
        return [self.final / name for name in (*self.files, MANIFEST)]


def _is_run(manifest) -> bool:
    """True for a run directory's manifest: a JSON object with a config and no output entry."""
    return isinstance(manifest, dict) and "config" in manifest and not isinstance(manifest.get(OUTPUT), dict)


def is_run_directory(folder: Path) -> bool:
    """True where `folder`'s manifest.json is a run directory's (`_is_run`); a folder without a readable one is not."""
    path = folder / MANIFEST
    try:
        return path.is_file() and _is_run(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False


def _earlier_output(final: Path, command: str, flag: str) -> dict | None:
    """The `output` entry of `final`'s manifest when it marks an earlier output of `command`, None without a
    manifest; any other manifest is an OutputFolderError naming what the folder is (and the flag that named it)."""
    path = final / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise OutputFolderError(f"{flag} {final}: its {MANIFEST} is not valid JSON; expected a new folder or an "
                                f"earlier output of `{command}`") from None
    entry = manifest.get(OUTPUT) if isinstance(manifest, dict) else None
    if not isinstance(entry, dict):
        if _is_run(manifest):
            what = "a run directory"
        elif isinstance(manifest, dict) and "provenance" in manifest:
            what = "an output of an older version, whose manifest does not list its files (remove it yourself)"
        else:
            what = f"a folder whose {MANIFEST} lists no files written by an empathy-gap command"
        raise OutputFolderError(f"{flag} {final}: is {what}; expected a new folder or an earlier output of "
                                f"`{command}`, and nothing else is ever replaced")
    if entry.get("command") != command:
        raise OutputFolderError(f"{flag} {final}: is the output of `{entry.get('command')}`; expected a new folder or "
                                f"an earlier output of `{command}`")
    if not isinstance(entry.get("files"), list):
        raise OutputFolderError(f"{flag} {final}: its {MANIFEST} has no list of files under {OUTPUT!r}; the manifest "
                                "is damaged")
    return entry


def _staging(folder: Path) -> bool:
    """True for a staging folder a command made (and a killed one left): its name and its mark say so."""
    return folder.name.startswith(STAGING) and (folder / STAGING_MARK).is_file()


def _entries(final: Path, keep: Sequence[str]) -> list[str]:
    """Every file and symbolic link under `final` (POSIX paths relative to it), sub-folders named in `keep` and
    staging folders left by killed commands aside."""
    found = []
    for root, dirs, files in os.walk(final):
        rel = Path(root).relative_to(final)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d not in keep and not _staging(Path(root) / d)]
        found += [(rel / name).as_posix() for name in files]
        found += [(rel / d).as_posix() for d in dirs if (Path(root) / d).is_symlink()]
    return sorted(found)


def symlink_on_the_way(final: Path, within: Path | None = None) -> Path | None:
    """The first of `final` and the folders between it and `within` (the folder the user named, from which `final`
    was derived; None: `final` is what the user named) that is a symbolic link, else None: a link there, which the
    command did not make, would carry its writes elsewhere."""
    folders = [final]
    if within is not None:
        folders += [p for p in final.parents if within in p.parents]
    return next((p for p in folders if p.is_symlink()), None)


def check_output_folder(final: str | Path, command: str, keep: Sequence[str] = (), flag: str = "--out",
                        within: str | Path | None = None) -> list[str]:
    """Refuse, with one line naming `flag`, an output folder that `command` may not write: a symbolic link, or one
    below a link between it and `within` (see symlink_on_the_way); anything but a new or empty folder, or an
    earlier output of `command` holding only the files its manifest names (and the `keep` sub-folders). Returns the
    files of the earlier output, which the new one replaces."""
    final = Path(final)
    link = symlink_on_the_way(final, None if within is None else Path(within))
    if link is not None:
        raise OutputFolderError(f"{flag} {final}: {'is' if link == final else f'lies below {link}, which is'} a "
                                "symbolic link, which would carry the writes elsewhere; expected a folder of its own "
                                f"(name the folder it points to as {flag} if that is where you want them)")
    if not final.exists():
        return []
    if not final.is_dir():
        raise OutputFolderError(f"{flag} {final}: exists and is not a folder")
    earlier = _earlier_output(final, command, flag)
    listed = set(earlier["files"]) | {MANIFEST} if earlier else set()
    entries = _entries(final, keep)
    strangers = [e for e in entries if e not in listed]
    if strangers:
        whose = f"the earlier `{command}` did not write" if earlier else "no empathy-gap output manifest names"
        more = f" and {len(strangers) - 1} more" if len(strangers) > 1 else ""
        raise OutputFolderError(f"{flag} {final}: holds {strangers[0]}{more}, which {whose}; expected a new or "
                                f"empty folder, or an earlier output of `{command}`, and nothing else is ever "
                                f"replaced: choose another {flag}")
    return [e for e in entries if e != MANIFEST]  # files found inside `final`, never a path the manifest names elsewhere


def _write_manifest(final: Path, record: dict) -> None:
    """manifest.json in `final`, through a temporary file and a rename."""
    write_json_atomic(final / MANIFEST, record)


def _staged_files(staging: Path) -> list[str]:
    """The files written into the staging folder, as POSIX paths relative to it."""
    files = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*")
                   if (p.is_file() or p.is_symlink()) and p.relative_to(staging).as_posix() != STAGING_MARK)
    if MANIFEST in files:
        raise RuntimeError(f"a command wrote {MANIFEST} itself; it belongs to OutputFolder.record")
    return files


def _remove_emptied(final: Path, files: Sequence[str]) -> None:
    """Remove the folders under `final` that removing `files` left empty."""
    for folder in sorted({p for f in files for p in (final / f).parents if p != final and final in p.parents},
                         key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _commit(out: OutputFolder, earlier: list[str]) -> None:
    """Move the staged files into place; the manifest lists the old and new files while they move (a kill then
    leaves a folder a rerun may still replace, the first commit's included) and only the new ones, marked complete,
    at the end."""
    files = out.files = _staged_files(out.path)
    entry = {"command": out.command, "files": files, "complete": True}
    _write_manifest(out.final, out.record | {OUTPUT: entry | {"files": sorted(set(files) | set(earlier)),
                                                             "complete": False}})
    for name in files:
        (out.final / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(out.path / name, out.final / name)
    gone = [name for name in earlier if name not in files]
    for name in gone:
        (out.final / name).unlink(missing_ok=True)
    _remove_emptied(out.final, gone)
    _write_manifest(out.final, {"provenance": provenance()} | out.record | {OUTPUT: entry})
    for stale in out.final.glob(f"{STAGING}*"):
        if _staging(stale):
            shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def output_folder(final: str | Path, command: str, record: dict | None = None, keep: Sequence[str] = (),
                  flag: str = "--out", within: str | Path | None = None) -> Iterator[OutputFolder]:
    """The output folder of `command` at `final` (given as `flag`, or derived from the folder `within`), checked
    first (see check_output_folder). Write files into the yielded folder's `path` and fill its `record`; when the
    block ends they replace the earlier output's files in `final` and manifest.json names them. If the block fails,
    nothing it wrote stays and a folder made for it is removed again."""
    final = Path(final)
    earlier = check_output_folder(final, command, keep, flag, within)
    made = [p for p in (final, *final.absolute().parents) if not p.exists()][::-1]
    final.mkdir(parents=True, exist_ok=True)
    out = OutputFolder(final, command, Path(tempfile.mkdtemp(dir=final, prefix=STAGING)), dict(record or {}),
                       tuple(keep))
    out.path.chmod(0o755)  # mkdtemp makes it private to its owner
    (out.path / STAGING_MARK).touch()
    try:
        yield out
        _commit(out, earlier)
    except BaseException:
        shutil.rmtree(out.path, ignore_errors=True)
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    finally:
        shutil.rmtree(out.path, ignore_errors=True)
