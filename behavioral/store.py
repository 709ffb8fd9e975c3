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


def _read_log(path: Path) -> pa.Table:
    """Every complete batch of an Arrow stream log; a batch cut short by a kill is dropped."""
    batches = []
    try:
        with pa.OSFile(str(path)) as f, pa.ipc.open_stream(f) as reader:
            while True:
                batches.append(reader.read_next_batch())
    except (StopIteration, pa.ArrowInvalid, OSError):
        pass
    return pa.Table.from_batches(batches, schema=SCHEMA)


def _tables(run_dir: Path) -> list[pa.Table]:
    """Result tables of the Parquet parts and of the logs not yet turned into parts."""
    results = run_dir / RESULTS
    parts = sorted(results.glob("*.parquet"))
    logs = [p for p in sorted(results.glob("*.arrows")) if not p.with_suffix(".parquet").exists()]
    return [pq.read_table(p, schema=SCHEMA) for p in parts] + [_read_log(p) for p in logs]


class RowLog:
    """This process's append-only log of result rows: each write is flushed at once, a kill leaves every finished
    write readable, and closing turns the log into a Parquet part."""

    def __init__(self, run_dir: str | Path, rank: int = 0):
        results = Path(run_dir) / RESULTS
        results.mkdir(parents=True, exist_ok=True)
        n = len({p.stem for p in results.glob(f"r{rank:03d}-*") if p.suffix in (".parquet", ".arrows")})
        self.path = results / f"r{rank:03d}-{n:06d}.arrows"
        self._sink = None
        self._writer = None

    def write(self, rows: list[dict]) -> None:
        """Append `rows` and flush them to disk."""
        if self._writer is None:
            self._sink = pa.OSFile(str(self.path), "wb")
            self._writer = pa.ipc.new_stream(self._sink, SCHEMA)
        self._writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
        self._sink.flush()

    def close(self) -> None:
        """Seal the log as a Parquet part (written beside it, then renamed) and remove the log."""
        if self._writer is None:
            return
        self._writer.close()
        self._sink.close()
        part = self.path.with_suffix(".parquet")
        tmp = self.path.with_suffix(".parquet.tmp")
        pq.write_table(_read_log(self.path), tmp)
        os.replace(tmp, part)
        self.path.unlink()
        self._writer = None

    def __enter__(self) -> "RowLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def finished_units(run_dir: str | Path) -> set[str]:
    """Ids of the work units whose rows are already on disk (a unit's rows are always written together)."""
    done: set[str] = set()
    for table in _tables(Path(run_dir)):
        done.update(table.column("unit_id").unique().to_pylist())
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
    tables = _tables(Path(run_dir))
    if not tables:
        return SCHEMA.empty_table().to_pandas()
    return pa.concat_tables(tables).to_pandas()
