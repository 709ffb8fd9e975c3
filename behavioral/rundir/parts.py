"""The run directory's rows: one Parquet row per prompt, each part stamped with the run's identity (its manifest's,
behavioral.rundir.manifest) and sealed (its sha256 and rows recorded in its rank's seal ledger, and checked on every read),
written so that a kill loses nothing finished and no two processes ever write for the same rank."""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from behavioral.core.files import file_key, kept, read_regular, write_error
from behavioral.rundir.manifest import MANIFEST, Manifest, RunDirError, read_manifest
from behavioral.core.options import quoted
from behavioral.rundir.lock import RunLock

RESULTS = "results"
KEY = ["unit_id", "item_id", "sample"]  # one row per key: a sample of a work unit's item
RUN_ID = "empathy_gap.run_id"  # the schema metadata key of the run identity every log and part carries
DIGESTS_KEPT = 4096  # parts' digests a process keeps (_open_part), the least recently asked for dropped first
_DIGESTS: OrderedDict[tuple, str] = OrderedDict()

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
        # score/both modes, how the answer tree was read (behavioral.inference.lazy_tree; null in runs made before these):
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


# --- row logs and parts -------------------------------------------------------------------------------------------

_ARROW_STREAM = b"\xff\xff\xff\xff"  # how every message of an Arrow IPC stream begins


def _read_log(path: Path) -> pa.Table:
    """Every complete batch of an Arrow stream log; a batch cut short by a kill is dropped. A missing log raises; a
    file that is not an Arrow stream at all (or no regular file) is a RunDirError naming it."""
    data = read_regular(path, "a row log of the run (a regular file)", limit=None, error=RunDirError)
    if data and not _ARROW_STREAM.startswith(data[:len(_ARROW_STREAM)]):
        raise RunDirError(f"{path}: not an Arrow row log (damaged, or not written by empathy-gap); expected the "
                          "results folder to hold only the run's own files: move it away")
    batches, schema = [], None
    try:
        with pa.ipc.open_stream(pa.BufferReader(data)) as reader:
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
    """The seals one ledger holds ({} where there is none yet); a file that is not a ledger (or no regular file, or
    past the size limit) is a RunDirError naming it."""
    what = "the JSON object empathy-gap keeps of the sha256 and rows of each part it wrote"
    try:
        seals = json.loads(read_regular(ledger, what, error=RunDirError))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        if isinstance(err, RunDirError):
            raise
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
        ledgers = sorted((run_dir / RESULTS).glob("r[0-9][0-9][0-9]-seals.json"))
        if ledgers:
            raise RunDirError(f"{run_dir / MANIFEST}: records no seals, but {ledgers[0].name} seals its parts; "
                              "expected the manifest of the run that sealed them (was \"seals\" removed from it?)")
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
    """The sha256 of one part's bytes and the Parquet file they hold (the file read once; a regular file only). A
    process hashes each version of a part once: an unchanged part's digest is kept (`file_key`)."""
    key = file_key(part)  # before the read: a part changed while it is read is never kept under its old times
    data = read_regular(part, "a Parquet part of the run (a regular file)", limit=None, error=RunDirError)
    digest = kept(_DIGESTS, key, lambda: hashlib.sha256(data).hexdigest(), DIGESTS_KEPT)
    return digest, pq.ParquetFile(pa.BufferReader(data))


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
    a kill between the two), whose rows are read only once its log is resealed. (A deleted part's units are
    unfinished: a resume computes them again.)"""
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
    """(file, rows) of the sealed Parquet parts, each checked (`_check_part`), its units those of the run's plan,
    each unit in one part with its planned rows (`_check_units`), each value within its column's range
    (`_check_values`). Row logs are never read here: only resealed after a kill (`seal_logs`)."""
    manifest = read_manifest(run_dir)
    seals = _run_seals(run_dir, manifest)
    out = []
    for part in _part_files(run_dir / RESULTS, seals):
        file = _check_part(part, manifest.run_id, seals)
        table = _parquet(part, lambda _: file.read()).replace_schema_metadata(None)
        _check_values(part, table, manifest)
        out.append((part, table))
    _check_units(run_dir, manifest, out)
    return out


# --- what each stored column may hold, checked on every read ---------------------------------------------------------

ROUNDING = 1e-6  # how far rounding may carry a stored probability past [0, 1], or a distribution's sum past 1


def _probability(values: np.ndarray) -> np.ndarray:
    return np.isfinite(values) & (values >= -ROUNDING) & (values <= 1 + ROUNDING)


def _check_values(path: Path, table: pa.Table, manifest: Manifest) -> None:
    """A RunDirError naming the file, row and column where a stored value is out of its column's range: masses and
    every probability in [0, 1], each distribution summing to 1 and as long as one of the run's answer sets, node
    counts within its largest tree, expected values within its labels' values, bounds finite and at least 0 (a
    probability bound at most 1) wherever a tree was read, samples within the run's. A null (NaN) is a value the
    row has not (a reply's row in score columns)."""
    sets = manifest.answers or ()
    column = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names
              if name in CORE.names and not pa.types.is_list(table.schema.field(name).type)}
    number = {name: np.asarray(column[name], dtype=float) for name in column if name not in
              ("unit_id", "item_id", "response", "answer", "score_answer", "refused", "truncated")}
    nan = {name: np.isnan(values) for name, values in number.items()}
    read = ~nan["tree_nodes"] if "tree_nodes" in nan else np.zeros(table.num_rows, bool)
    checks = [(name, "a probability (0 to 1) or null", nan[name] | _probability(number[name]))
              for name in ("valid_mass", "start_mass") if name in number]
    checks += [(name, "a finite number or null", nan[name] | np.isfinite(number[name]))
               for name in ("value", "score_value", "expected") if name in number]
    valued = [a for a in sets if a.low is not None]
    if valued and "expected" in number:
        low, high = min(a.low for a in valued), max(a.high for a in valued)
        checks.append(("expected", f"a value within the answers' {low:g} to {high:g}, or null",
                       nan["expected"] | ((number["expected"] >= low - ROUNDING) & (number["expected"] <= high +
                                                                                     ROUNDING))))
    if "tree_nodes" in number:
        most = max((a.nodes for a in sets), default=None)
        checks.append(("tree_nodes", f"a count of the tree's nodes (0 to {most})" if most else "a count of nodes",
                       ~read | ((number["tree_nodes"] >= 0) & (number["tree_nodes"] <= (most or np.inf)))))
    for name, most in (("expected_bound", np.inf), ("probs_bound", 1 + ROUNDING), ("entropy_bound", np.inf)):
        if name in number:
            ok = np.isfinite(number[name]) & (number[name] >= 0) & (number[name] <= most)
            unread = ~read | (nan["expected"] if name == "expected_bound" else False)
            checks.append((name, "a finite bound of at least 0" + (" and at most 1" if most < np.inf else "")
                           + " where the tree was read", ok | (unread & nan[name])))
    if "sample" in number:
        samples = manifest.config.get("samples")
        checks.append(("sample", f"a sample index below {samples}" if samples else "a sample index of at least 0",
                       (number["sample"] >= 0) & (number["sample"] < (samples or np.inf))))
    lengths = {a.labels for a in sets}
    for name in ("probs", "unit_probs"):
        if name in table.column_names:
            checks.append((name, "null, or one probability per label of an answer set"
                           + (f" ({' or '.join(map(str, sorted(lengths)))} labels)" if lengths else "")
                           + " summing to 1", _distributions(table.column(name), lengths)))
    for name, what, ok in checks:
        if not ok.all():
            row = int(np.argmin(ok))
            shown = table.column(name)[row].as_py()
            unit, item = table.column("unit_id")[row].as_py(), table.column("item_id")[row].as_py()
            raise RunDirError(f"{path}: row {row} (unit {quoted(unit)}, item {quoted(item)}): {name} is "
                              f"{quoted(shown)}; expected {what} (was the part edited?): move it away")


def _distributions(values: pa.ChunkedArray, lengths: set[int]) -> np.ndarray:
    """[rows] True where a list column's row is null, or a list of probabilities summing to 1 whose length is one of
    `lengths` (any, where none is known)."""
    values = values.combine_chunks()
    rows = len(values)
    present = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
    size = np.asarray(pc.list_value_length(values).fill_null(0).to_numpy(zero_copy_only=False), int)
    flat = np.asarray(pc.list_flatten(values).to_numpy(zero_copy_only=False), dtype=float)
    parent = np.asarray(pc.list_parent_indices(values).to_numpy(zero_copy_only=False), int)
    bad = np.bincount(parent, weights=~_probability(flat), minlength=rows) > 0
    total = np.bincount(parent, weights=np.nan_to_num(flat), minlength=rows)
    sized = np.isin(size, sorted(lengths)) if lengths else size > 0
    return ~present | (~bad & sized & (np.abs(total - 1) <= ROUNDING * np.maximum(size, 1)))


def _check_units(run_dir: Path, manifest: Manifest, parts: list[tuple[Path, pa.Table]]) -> None:
    """A RunDirError naming the part that holds a work unit the run's plan does not, a unit another part holds too,
    or a unit with other rows than its plan's; a plan that names no units (made before plans did) bounds their
    number."""
    plan = manifest.plan
    planned = None if plan is None else plan.unit_rows(manifest.config.get("unit_size", 1),
                                                       manifest.config.get("samples", 1))
    if parts:
        _check_unique(run_dir, parts)  # the same rows twice are named as such
    owner: dict[str, Path] = {}
    for path, table in parts:
        counts = table.column("unit_id").value_counts().to_pylist()
        for entry in counts:
            unit, rows = entry["values"], entry["counts"]
            if planned is not None and unit not in planned:
                raise RunDirError(f"{path}: holds work unit {quoted(unit)}, which the run's plan does not; expected "
                                  "only the planned units' rows (was the part forged or copied in?): move it away")
            if unit in owner:
                raise RunDirError(f"{path}: holds work unit {quoted(unit)}, which {owner[unit].name} holds too; "
                                  "expected each unit's rows in one part (was a part copied in?): move one away")
            if planned is not None and rows != planned[unit]:
                raise RunDirError(f"{path}: holds {rows} rows of work unit {quoted(unit)}, whose plan has "
                                  f"{planned[unit]}; expected a unit's rows written together (was the part edited?)")
            owner[unit] = path
    if plan is not None and planned is None and len(owner) > plan.units:
        raise RunDirError(f"{run_dir / RESULTS}: holds {len(owner)} work units, more than the {plan.units} of the "
                          "run's plan; expected only the run's own units (were parts copied in?)")


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


def _seal_part(table: pa.Table, part: Path, ledger: Path | None) -> None:
    """Write `table` as the Parquet part `part`, then record its seal (the sha256 of its bytes, its rows) in the
    rank's `ledger` (None: a run made before seals, whose parts stay unsealed), whose only writer the caller is; a
    kill between the two leaves a part without a seal, which `_seal` writes again from its log."""
    data = _encoded(table)
    _write_file(part, data)
    if ledger is None:
        return
    seals = _read_ledger(ledger) | {part.name: {"sha256": hashlib.sha256(data).hexdigest(), "rows": table.num_rows}}
    _write_file(ledger, (json.dumps(seals, indent=1, sort_keys=True) + "\n").encode())


class RowLog:
    """This process's append-only log of result rows: each write is flushed at once, a kill leaves every finished
    write readable, and closing seals the log into a Parquet part. The caller holds the rank's RunLock."""

    def __init__(self, run_dir: str | Path, schema: pa.Schema, rank: int = 0, sealed: bool = True):
        results = Path(run_dir) / RESULTS
        results.mkdir(parents=True, exist_ok=True)
        self.path = results / f"r{rank:03d}-{_next_index(results, rank):06d}.arrows"
        self.rank = rank
        self.schema = schema
        self.sealed = sealed  # False: a run made before seals, whose parts stay unsealed (see _run_seals)
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
        _seal(self.path, self.rank, self.sealed, fresh=True)  # the run wrote only units no part held

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


def _seal(log: Path, rank: int, sealed: bool, fresh: bool = False) -> None:
    """Turn one row log of `rank` into its Parquet part, `sealed` (a run made before seals: not), and remove the log.
    A sealed part is kept (a kill came after its seal); a part without a seal (a kill came before it, or the part
    is not the log's) is written again from the log, with only the rows of units no sealed part holds (all of them
    where the writer knows its rows are `fresh`). A log whose sealed part is gone is refused: a log never stands in
    for a part the run sealed."""
    part = log.with_suffix(".parquet")
    ledger = _ledger(log.parent, rank)
    if part.name in _read_ledger(ledger):
        if not part.is_file():
            raise RunDirError(f"{part}: sealed by this run but missing, and {log.name} stands in its place; expected "
                              "the sealed part (was it deleted?): restore it, or run again into a new --out")
    else:
        rows = _read_log(log)
        if not fresh and rows.num_rows:
            check_run_id(log, run_id_of(rows.schema), read_manifest(log.parent.parent).run_id)
        held = set() if fresh else _sealed_units(log.parent)
        if held and rows.num_rows:
            rows = rows.filter(pc.invert(pc.is_in(rows.column("unit_id"), pa.array(sorted(held), pa.string()))))
        if rows.num_rows:
            _seal_part(rows, part, ledger if sealed else None)
    log.unlink()


def _sealed_units(results: Path) -> set[str]:
    """The work units the sealed parts in `results` hold (each part checked against its seal)."""
    seals = _read_seals(results)
    units: set[str] = set()
    for name in seals:
        part = results / name
        if part.is_file():
            sha256, file = _parquet(part, _open_part)
            _check_seal(part, sha256, file.metadata.num_rows, seals)
            units.update(file.read(columns=["unit_id"]).column("unit_id").unique().to_pylist())
    return units


def seal_logs(run_dir: str | Path, rank: int) -> None:
    """Seal the row logs a killed process of `rank` left behind and remove its stale temporaries; the caller holds
    that rank's RunLock."""
    results = Path(run_dir) / RESULTS
    if not results.is_dir():
        return
    sealed = read_manifest(run_dir).seals is not None
    for path in sorted(results.iterdir()):
        m = _RANK_FILE.match(path.name)
        if not m or int(m.group(1)) != rank:
            continue
        if m.group(4):
            path.unlink()
        elif m.group(3) == "arrows":
            _seal(path, rank, sealed)


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
    return pa.concat_tables([t for _, t in parts]).to_pandas()
