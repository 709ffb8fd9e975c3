"""The run directory's rows: one Parquet row per prompt, each part stamped with the run's identity (its manifest's,
behavioral.manifest) and sealed (its sha256 and rows recorded in its rank's seal ledger, and checked on every read),
written so that a kill loses nothing finished and no two processes ever write for the same rank."""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
import re
import socket
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from behavioral.files import file_mode, write_error
from behavioral.manifest import Manifest, RunDirError, read_manifest

RESULTS = "results"
KEY = ["unit_id", "item_id", "sample"]  # one row per key: a sample of a work unit's item
RUN_ID = "empathy_gap.run_id"  # the schema metadata key of the run identity every log and part carries

# The columns every suite's rows have; the suite's item fields follow them.
CORE = pa.schema(
    [
        ("unit_id", pa.string()),
        ("item_id", pa.string()),
        ("sample", pa.int32()),  # 0.. per item; 0 alone unless sampling asks for more
        ("response", pa.string()),  # generated reply (null in score mode)
        ("answer", pa.string()),  # the parsed answer's label (score mode: the greedy label); null when refused
        ("value", pa.float64()),  # the answer's value where answers have values
        ("refused", pa.bool_()),  # the reply gave no valid answer
        ("truncated", pa.bool_()),  # the reply reached max_new_tokens undecided (null in score mode)
        ("score_answer", pa.string()),  # score mode: the label greedy decoding reaches inside the answer set
        ("score_value", pa.float64()),  # its value
        ("expected", pa.float64()),  # the mean value under the distribution over the set
        ("valid_mass", pa.float64()),  # the probability the answer set holds
        ("start_mass", pa.float64()),  # the probability that the first answer token begins an answer of the set
        ("probs", pa.list_(pa.float64())),  # every label's probability (renormalised, label order of the answer
        # set): sets of up to 32 labels, any set with --store-probs; null otherwise
        ("unit_probs", pa.list_(pa.float64())),  # score/both modes, first row of a work unit (first item, sample 0):
        # the mean of `probs` over the unit's scored items, where they share one answer set; null on every other row
        # and in runs made before this column (read as null)
        # score/both modes, how the answer tree was read (behavioral.lazy_tree; null in runs made before these):
        ("tree_nodes", pa.int32()),  # nodes read: every node of the trie with --answer-tree full
        ("expected_bound", pa.float64()),  # `expected` lies within this of the full tree's (0: read in full)
        ("probs_bound", pa.float64()),  # each of `probs`, their total variation distance and valid_mass: within this
        ("entropy_bound", pa.float64()),  # the entropy of `probs` (nats): within this
    ]
)


def result_schema(fields: Sequence[str], run_id: str | None = None) -> pa.Schema:
    """The schema of a suite's rows: CORE, then its item fields as strings; with `run_id`, stamped with the identity
    of the run that writes them (kept in every row log and Parquet part, see `_parts`)."""
    clash = set(fields) & set(CORE.names)
    if clash:
        raise ValueError(f"item fields {sorted(clash)} clash with the core result columns; rename them")
    return stamp(pa.schema([*CORE, *((f, pa.string()) for f in fields)]), run_id)


# Files of one rank in RESULTS: row logs r{rank}-{index}.arrows, parts r{rank}-{index}.parquet, the seal ledger of
# its parts r{rank}-seals.json (`_ledger`), and temporaries.
_RANK_FILE = re.compile(r"^\.?r(\d{3})-(\w+)\.(arrows|parquet|json)(\.tmp)?$")


# --- one process per rank ---------------------------------------------------------------------------------------

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


# --- row logs and parts -------------------------------------------------------------------------------------------

_ARROW_STREAM = b"\xff\xff\xff\xff"  # how every message of an Arrow IPC stream begins


def _read_log(path: Path) -> pa.Table:
    """Every complete batch of an Arrow stream log; a batch cut short by a kill is dropped. A missing log raises; a
    file that is not an Arrow stream at all is a RunDirError naming it."""
    with open(path, "rb") as f:
        start = f.read(len(_ARROW_STREAM))
    if start and not _ARROW_STREAM.startswith(start):
        raise RunDirError(f"{path}: not an Arrow row log (damaged, or not written by empathy-gap); expected the "
                          "results folder to hold only the run's own files: move it away")
    batches, schema = [], None
    with pa.OSFile(str(path)) as f:
        try:
            with pa.ipc.open_stream(f) as reader:
                schema = reader.schema
                while True:
                    batches.append(reader.read_next_batch())
        except (StopIteration, pa.ArrowInvalid, OSError):
            pass
    return pa.Table.from_batches(batches, schema=schema) if schema is not None else CORE.empty_table()


def _parquet(path: Path, read):
    """`read(path)` of one Parquet part, or a RunDirError naming it where it cannot be read (empty, cut short, not
    Parquet)."""
    try:
        return read(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise RunDirError(f"{path}: not a readable Parquet part ({str(err).split(': ', 1)[-1]}); expected only the "
                          "run's own complete parts in its results folder: move it away (a part of this run is "
                          "recomputed on resume)") from None


def stamp(schema: pa.Schema, run_id: str | None) -> pa.Schema:
    """`schema` carrying the identity of the run that writes it, beside its other metadata (as it is where None)."""
    return schema if run_id is None else schema.with_metadata({**(schema.metadata or {}), RUN_ID.encode(): run_id})


def run_id_of(schema: pa.Schema) -> str | None:
    """The run identity a part's or log's schema carries (None: written before parts carried one)."""
    found = (schema.metadata or {}).get(RUN_ID.encode())
    return None if found is None else found.decode(errors="replace")


def check_run_id(path: Path, found: str | None, run_id: str | None) -> None:
    """A RunDirError where the file `path`, of the run `found`, belongs to another run than `run_id` (None: a run
    made before its files carried an identity, whose files carry none)."""
    if found != run_id:
        whose = "carries no run identity" if found is None else f"was written by run {found}"
        mine = f"run {run_id}" if run_id else "a run made before its files carried an identity"
        raise RunDirError(f"{path}: {whose}, but this run directory is {mine}; expected only this run's own files "
                          "(was it copied in from another run?): move it away")


# --- seals: what a run wrote, checked on every read ------------------------------------------------------------------

class UncheckedPartsWarning(UserWarning):
    """A run made before runs sealed their parts, whose parts are read without a check of their content."""


def _ledger(results: Path, rank: int) -> Path:
    """The seal ledger of `rank`'s parts: a JSON object of part name to {"sha256": of its bytes, "rows": its rows}."""
    return results / f"r{rank:03d}-seals.json"


def _is_seal(seal) -> bool:
    """True for one ledger entry: the sha256 of a part's bytes (hex) and its rows (at least one)."""
    return isinstance(seal, dict) and isinstance(seal.get("sha256"), str) and len(seal["sha256"]) == 64 \
        and type(seal.get("rows")) is int and seal["rows"] > 0


def _read_ledger(ledger: Path) -> dict[str, dict]:
    """The seals one ledger holds ({} where there is none yet); a file that is not a ledger is a RunDirError naming
    it."""
    try:
        seals = json.loads(ledger.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        seals = None
    if not (isinstance(seals, dict) and all(_is_seal(seal) for seal in seals.values())):
        raise RunDirError(f"{ledger}: not a seal ledger; expected the JSON object empathy-gap keeps of the sha256 and "
                          "rows of each part it wrote (is it damaged or edited?)")
    return seals


def _read_seals(results: Path) -> dict[str, dict]:
    """Every rank's seals, by part name."""
    seals: dict[str, dict] = {}
    for ledger in sorted(results.glob("r[0-9][0-9][0-9]-seals.json")):
        seals |= _read_ledger(ledger)
    return seals


def _run_seals(run_dir: Path, manifest: Manifest) -> dict[str, dict] | None:
    """The seals a run's parts are checked against; None, with one warning, for a run made before runs sealed their
    parts."""
    if manifest.seals is None:
        warnings.warn(f"{run_dir}: made before runs sealed their parts, so its parts cannot be checked for edits or "
                      "for parts copied in from another run", UncheckedPartsWarning)
        return None
    return _read_seals(run_dir / RESULTS)


def _seal_of(part: Path, seals: dict[str, dict]) -> dict | None:
    """The seal of `part`; `seals`, read earlier, are read again where they lack it (a process may have sealed it
    since)."""
    if part.name not in seals:
        seals.update(_read_seals(part.parent))
    return seals.get(part.name)


def _check_seal(part: Path, sha256: str, rows: int, seals: dict[str, dict]) -> None:
    """A RunDirError naming `part` where it is not what its run sealed under its name; an unsealed copy of another
    of the run's own parts passes (the duplicate check names both)."""
    seal = _seal_of(part, seals)
    if seal is None:
        if any(s["sha256"] == sha256 for s in seals.values()):
            return
        raise RunDirError(f"{part}: not sealed by this run (sha256 {sha256}, {rows} rows; no seal ledger of its "
                          "results names it); expected only the run's own parts (was it copied in from another "
                          "run?): move it away")
    if seal["sha256"] != sha256:
        raise RunDirError(f"{part}: its content differs from what this run sealed (sha256 {sha256}, {rows} rows; "
                          f"sealed {seal['sha256']}, {seal['rows']} rows); expected the run's own part unchanged (was "
                          "it edited or swapped?): move it away (its work units are recomputed on resume)")


def _open_part(part: Path) -> tuple[str, pq.ParquetFile]:
    """The sha256 of one part's bytes and the Parquet file they hold (the file read once)."""
    data = part.read_bytes()
    return hashlib.sha256(data).hexdigest(), pq.ParquetFile(pa.BufferReader(data))


def _check_part(part: Path, run_id: str | None, seals: dict[str, dict] | None) -> pq.ParquetFile:
    """One part, checked: readable, of the run `run_id`, holding rows and, where its run seals its parts (`seals`),
    the part the run sealed; a RunDirError names it."""
    sha256, file = _parquet(part, _open_part)
    check_run_id(part, run_id_of(file.schema_arrow), run_id)
    rows = file.metadata.num_rows
    if not rows:
        raise RunDirError(f"{part}: holds no rows; expected every part to hold the rows of the work units it "
                          "finished (a run never writes an empty part): move it away")
    if seals is not None:
        _check_seal(part, sha256, rows, seals)
    return file


def _part_files(results: Path, seals: dict[str, dict] | None) -> list[Path]:
    """The parts to read: every one but an unsealed part whose log is still there (being sealed now, or left so by
    a kill between the two), whose rows its log holds."""
    return [p for p in sorted(results.glob("*.parquet"))
            if seals is None or _seal_of(p, seals) is not None or not p.with_suffix(".arrows").exists()]


def check_parts(run_dir: str | Path) -> None:
    """Every Parquet part checked (`_check_part`): what a resume checks before the model loads (the rows are read,
    and logs checked, once it runs)."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    seals = _run_seals(run_dir, manifest)
    for part in _part_files(run_dir / RESULTS, seals):
        _check_part(part, manifest.run_id, seals)


def _parts(run_dir: Path) -> list[tuple[Path, pa.Table]]:
    """(file, rows) of the Parquet parts, each checked (`_check_part`), and of the logs not yet sealed into parts,
    each checked to be of the run its manifest names."""
    manifest = read_manifest(run_dir)
    seals = _run_seals(run_dir, manifest)
    results = run_dir / RESULTS

    def read(part: Path) -> tuple[Path, pa.Table]:
        file = _check_part(part, manifest.run_id, seals)
        return part, _parquet(part, lambda _: file.read())

    out = [read(p) for p in _part_files(results, seals)]
    done = {p for p, _ in out}
    for log in sorted(results.glob("*.arrows")):
        part = log.with_suffix(".parquet")
        if part in done:
            continue
        try:
            rows = _read_log(log)
        except FileNotFoundError:  # sealed by another process since the listing
            if not part.is_file():
                raise RunDirError(f"{log} vanished without its part {part.name}; expected one or the other") from None
            out.append(read(part))
            continue
        if rows.num_rows:  # a log cut short before its first batch holds nothing
            check_run_id(log, run_id_of(rows.schema), manifest.run_id)
            out.append((log, rows))
    return [(path, table.replace_schema_metadata(None)) for path, table in out]


def _next_index(results: Path, rank: int) -> int:
    """One past the highest index of this rank's logs and parts, so no new file can overwrite an old one."""
    indices = [int(m.group(2)) for p in results.iterdir()
               if (m := _RANK_FILE.match(p.name)) and int(m.group(1)) == rank and m.group(2).isdigit()]
    return max(indices, default=-1) + 1


def _encoded(table: pa.Table) -> bytes:
    """`table` as the bytes of one Parquet part."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def parquet_bytes(rows: list[dict], schema: pa.Schema) -> int:
    """The size of `rows` written as one Parquet part (what they will take on disk)."""
    return len(_encoded(pa.Table.from_pylist(rows, schema=schema)))


def _write_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename; an error names `path`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_error(path, err) from err


def _seal_part(table: pa.Table, part: Path, ledger: Path) -> None:
    """Write `table` as the Parquet part `part`, then record its seal (the sha256 of its bytes, its rows) in the
    rank's `ledger`, whose only writer the caller is; a kill between the two leaves a part without a seal, which
    `_seal` writes again from its log."""
    data = _encoded(table)
    _write_file(part, data)
    seals = _read_ledger(ledger) | {part.name: {"sha256": hashlib.sha256(data).hexdigest(), "rows": table.num_rows}}
    _write_file(ledger, (json.dumps(seals, indent=1, sort_keys=True) + "\n").encode())


class RowLog:
    """This process's append-only log of result rows: each write is flushed at once, a kill leaves every finished
    write readable, and closing seals the log into a Parquet part. The caller holds the rank's RunLock."""

    def __init__(self, run_dir: str | Path, schema: pa.Schema, rank: int = 0):
        results = Path(run_dir) / RESULTS
        results.mkdir(parents=True, exist_ok=True)
        self.path = results / f"r{rank:03d}-{_next_index(results, rank):06d}.arrows"
        self.rank = rank
        self.schema = schema
        self._sink = None
        self._writer = None

    def write(self, rows: list[dict]) -> None:
        """Append `rows` and flush them to disk."""
        try:
            if self._writer is None:
                self._sink = pa.OSFile(str(self.path), "wb")
                self._writer = pa.ipc.new_stream(self._sink, self.schema)
            self._writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))
            self._sink.flush()
        except OSError as err:
            raise write_error(self.path, err) from err

    def close(self) -> None:
        """Seal the log as a Parquet part (written beside it, then renamed, then its seal recorded) and remove the
        log; an error names the file."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        try:
            writer.close()
            self._sink.close()
        except OSError as err:
            raise write_error(self.path, err) from err
        _seal(self.path, self.rank)

    def __enter__(self) -> "RowLog":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # the error in flight says what went wrong; the log keeps every finished write for the next run to seal
            self.close()
        except OSError:
            pass


def _seal(log: Path, rank: int) -> None:
    """Turn one row log of `rank` into its sealed Parquet part and remove the log. A sealed part is kept (a kill came
    after its seal); a part without a seal (a kill came before it, or the part is not the log's) is written again
    from the log."""
    part = log.with_suffix(".parquet")
    ledger = _ledger(log.parent, rank)
    if not (part.exists() and part.name in _read_ledger(ledger)):
        rows = _read_log(log)
        if rows.num_rows:
            _seal_part(rows, part, ledger)
    log.unlink()


def seal_logs(run_dir: str | Path, rank: int) -> None:
    """Seal the row logs a killed process of `rank` left behind and remove its stale temporaries; the caller holds
    that rank's RunLock."""
    results = Path(run_dir) / RESULTS
    if not results.is_dir():
        return
    for path in sorted(results.iterdir()):
        m = _RANK_FILE.match(path.name)
        if not m or int(m.group(1)) != rank:
            continue
        if m.group(4):
            path.unlink()
        elif m.group(3) == "arrows":
            _seal(path, rank)


def seal_unlocked_logs(run_dir: str | Path, held: int) -> None:
    """Seal the logs of every rank but `held` (whose lock the caller has) that no running process holds."""
    results = Path(run_dir) / RESULTS
    if not results.is_dir():
        return
    ranks = {int(m.group(1)) for p in results.iterdir() if (m := _RANK_FILE.match(p.name))} - {held}
    for rank in sorted(ranks):
        lock = RunLock(run_dir, rank)
        if lock.acquire(raise_if_held=False):
            try:
                seal_logs(run_dir, rank)
            finally:
                lock.release()


def finished_units(run_dir: str | Path) -> set[str]:
    """Ids of the work units whose rows are already on disk (a unit's rows are always written together); a part of
    another run, or one its run did not seal, is a RunDirError naming it."""
    done: set[str] = set()
    for _, table in _parts(Path(run_dir)):
        done.update(table.column("unit_id").unique().to_pylist())
    return done


def write_part(run_dir: str | Path, name: str, rows: list[dict], schema: pa.Schema) -> Path:
    """Write `rows` as one Parquet part file (`schema` stamped with the run's identity), sealed in rank 0's ledger
    (the caller writes the run alone, as an importer does); it appears only once complete."""
    out = Path(run_dir) / RESULTS
    out.mkdir(parents=True, exist_ok=True)
    final = out / f"{name}.parquet"
    _seal_part(pa.Table.from_pylist(rows, schema=schema), final, _ledger(out, 0))
    return final


def _check_unique(run_dir: Path, parts: list[tuple[Path, pa.Table]]) -> None:
    """Refuse results that hold a key twice, naming an example and the files involved."""
    keys = pd.concat([t.select(KEY).to_pandas().assign(file=p.name) for p, t in parts], ignore_index=True)
    repeated = keys.duplicated(KEY, keep=False)
    if not repeated.any():
        return
    dup = keys[repeated]
    first = dup.iloc[0]
    files = sorted(dup["file"].unique())
    raise RunDirError(
        f"{run_dir / RESULTS}: {int(keys.duplicated(KEY).sum())} duplicate rows (same unit, item and sample), e.g. "
        f"item {first['item_id']!r} of unit {first['unit_id']!r}, in {', '.join(files)}; expected each prompt once "
        "(were parts copied in from another run?): remove the extra files or rerun into a new --out"
    )


def _with_core(table: pa.Table) -> pa.Table:
    """`table` with the CORE columns it lacks (written before they were added) inserted as nulls in their place."""
    for i, field in enumerate(CORE):
        if field.name not in table.column_names:
            table = table.add_column(i, field, pa.nulls(table.num_rows, field.type))
    return table


def read_results(run_dir: str | Path) -> pd.DataFrame:
    """All result rows of a run directory as one DataFrame (CORE columns, then the suite's fields; a CORE column
    added since a part was written reads as null); duplicate keys, parts of another schema, parts of another run
    than its manifest's and parts its run did not seal are errors."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such run directory")
    parts = _parts(run_dir)
    if not parts:
        return CORE.empty_table().to_pandas()
    parts = [(path, _with_core(table)) for path, table in parts]
    first_path, first = parts[0]
    for path, table in parts[1:]:
        if not table.schema.equals(first.schema):
            raise RunDirError(f"{path} has other columns than {first_path.name} ({', '.join(table.column_names)}); "
                              "expected every part of a run directory to come from the same suite and version")
    _check_unique(run_dir, parts)
    return pa.concat_tables([t for _, t in parts]).to_pandas()
