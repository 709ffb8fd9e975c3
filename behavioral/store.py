"""The run directory: a manifest and one Parquet row per prompt, written atomically so a kill loses nothing finished."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"
RESULTS = "results"

SCHEMA = pa.schema(
    [
        ("unit_id", pa.string()),
        ("setting", pa.string()),
        ("category", pa.string()),
        ("perceiver", pa.string()),
        ("experiencer", pa.string()),
        ("event_id", pa.string()),
        ("emotion", pa.string()),
        ("response", pa.string()),
        ("intensity", pa.float64()),
        ("refused", pa.bool_()),
        ("score_answer", pa.float64()),
        ("expected_intensity", pa.float64()),
        ("numeric_mass", pa.float64()),
    ]
)


class RunDirError(ValueError):
    """A run directory that cannot be used as asked."""


def write_json_atomic(path: Path, data: dict) -> None:
    """Write `data` as JSON to `path` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def read_manifest(run_dir: str | Path) -> dict:
    """The manifest of a run directory, or a RunDirError naming what is missing."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no {MANIFEST}; expected a run directory written by `empathy-gap run`")
    return json.loads(path.read_text())


def _parts(run_dir: Path) -> list[Path]:
    return sorted((run_dir / RESULTS).glob("*.parquet"))


def finished_units(run_dir: str | Path) -> set[str]:
    """Ids of the work units whose rows are already on disk."""
    done: set[str] = set()
    for part in _parts(Path(run_dir)):
        done.update(pq.read_table(part, columns=["unit_id"]).column("unit_id").unique().to_pylist())
    return done


def write_part(run_dir: str | Path, name: str, rows: list[dict]) -> Path:
    """Write `rows` as one Parquet part file; it appears only once complete."""
    out = Path(run_dir) / RESULTS
    out.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    final = out / f"{name}.parquet"
    tmp = out / f".{name}.parquet.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, final)
    return final


def read_results(run_dir: str | Path) -> pd.DataFrame:
    """All result rows of a run directory as one DataFrame (columns of SCHEMA)."""
    parts = _parts(Path(run_dir))
    if not parts:
        return SCHEMA.empty_table().to_pandas()
    return pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in parts]).to_pandas()
