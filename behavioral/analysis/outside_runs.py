"""Where a command's output folder may lie: outside every run directory, or inside one only under the folders that
commands write there (its analysis/ and the studies' interp/), never among the files only its run writes (results/,
activations/, the manifest); `analyze --out`, the studies' --out and `export --to` go through the one rule."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from behavioral.analysis.output_folder import OutputFolderError, is_run_directory

ANALYSIS_DIR = "analysis"  # a run directory's analysis: `analyze RUN_DIR` writes RUN_DIR/analysis
INTERP_DIR = "interp"  # a study's default output folder: RUN_DIR/interp/STUDY of the first run
OUTPUT_DIRS = (ANALYSIS_DIR, INTERP_DIR)


def check_outside_runs(folder: str | Path, flag: str = "--out", allowed: Sequence[str] = OUTPUT_DIRS) -> None:
    """Refuse, with one line naming `flag`, an output folder that is a run directory or lies inside one anywhere
    but under its `allowed` folders (none: anywhere inside it)."""
    target = Path(folder).resolve()
    for run_dir in (p for p in (target, *target.parents) if is_run_directory(p)):
        if run_dir == target:
            raise OutputFolderError(f"{flag} {folder}: is a run directory, whose files only its run writes; expected "
                                    "a folder outside it" + _under(allowed))
        part = target.relative_to(run_dir).parts[0]
        if part not in allowed:
            raise OutputFolderError(f"{flag} {folder}: is inside the run directory {run_dir} (in its {part}/); "
                                    "expected a folder outside it" + _under(allowed))


def _under(allowed: Sequence[str]) -> str:
    """' or under its analysis/ or interp/' for the allowed folders, '' for none."""
    return f" or under its {' or '.join(f'{name}/' for name in allowed)}" if allowed else ""
