"""The activation store of a run directory: float16 shards (.npy) with Parquet indexes, memory-mapped on load."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from activations.capture import Layers, select_layers
from behavioral.core.files import check_regular, read_regular, write_json_atomic
from behavioral.rundir.manifest import MANIFEST, RunDirError, read_manifest
from behavioral.core.selection import select_rows
from behavioral.rundir.parts import check_run_id, run_id_of, stamp

FOLDER = "activations"
META = "meta.json"
REDUCTIONS = ("mean", "last")


class ActivationStoreError(ValueError):
    """An activation store that is missing or cannot answer the question asked."""


def shard_name(kind: str, key: str) -> str:
    """File stem of one shard of `kind`; `key` makes it unique (a setting × category, or a rank and counter)."""
    return f"{kind}--{key}"


def write_shard(run_dir: str | Path, kind: str, key: str, array: np.ndarray, index: pd.DataFrame,
                run_id: str | None = None) -> None:
    """Write one shard: the float16 array first, then its index stamped with the run's identity, each through a
    rename (the index marks it done)."""
    if len(array) != len(index):
        raise ValueError(f"shard {kind}/{key}: {len(array)} vectors but {len(index)} index rows")
    folder = Path(run_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    stem = shard_name(kind, key)
    tmp = folder / f".{stem}.npy.tmp"
    with open(tmp, "wb") as f:
        np.save(f, array.astype(np.float16, copy=False))
    os.replace(tmp, folder / f"{stem}.npy")
    tmp = folder / f".{stem}.parquet.tmp"
    table = pa.Table.from_pandas(index.reset_index(drop=True), preserve_index=False)
    pq.write_table(table.replace_schema_metadata(stamp(table.schema, run_id).metadata), tmp)
    os.replace(tmp, folder / f"{stem}.parquet")


def read_index(path: Path, run_id: str | None, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """One shard's index (its `columns`, or all), or a RunDirError where another run than `run_id` wrote it."""
    table = pq.read_table(path, columns=None if columns is None else list(columns))
    check_run_id(path, run_id_of(table.schema), run_id)
    return table.to_pandas()


def indexed_keys(run_dir: str | Path, kind: str, columns: Sequence[str], run_id: str | None
                 ) -> set[tuple[str, ...]]:
    """The `columns` values of every row the run `run_id` already stored for `kind` (by any process)."""
    keys: set[tuple[str, ...]] = set()
    for path in (Path(run_dir) / FOLDER).glob(f"{kind}--*.parquet"):
        keys.update(map(tuple, read_index(path, run_id, columns).itertuples(index=False)))
    return keys


def write_meta(run_dir: str | Path, meta: dict) -> None:
    """Record hook names, layers and d_model of the store, in the order given (each rank of a run writes it, each
    through its own temporary file)."""
    write_json_atomic(Path(run_dir) / FOLDER / META, meta, sort_keys=False)


@dataclass
class ActivationStore:
    """Lazy access to a run's activations: arrays stay memory-mapped until a question selects rows from them.

    Every accessor's array has one row per hook (``hooks`` order), or, with `layers`, one per hook `layers` names
    (`select`), in the order named."""

    root: Path
    meta: dict

    @property
    def hooks(self) -> list[str]:
        """Hook names in array order: hook_embed, then blocks.{l}.hook_resid_post."""
        return self.meta["hooks"]

    def select(self, layers: Layers) -> list[str]:
        """The captured hooks `layers` names, in the order named (activations.capture.select_layers: a hook name or
        ``--layers`` entry; an integer is a block, a negative one counting back from the last block captured)."""
        return select_layers(layers, self.hooks, "layers", "captured")

    def rows(self, layers: Layers) -> list[int]:
        """The array rows of the hooks `layers` names (`select`)."""
        return [self.hooks.index(h) for h in self.select(layers)]

    def _at(self, states: np.ndarray, layers: Layers | None) -> np.ndarray:
        return states if layers is None else states[self.rows(layers)]

    def _kind(self, kind: str) -> tuple[pd.DataFrame, list[np.ndarray]]:
        shards = sorted(self.root.glob(f"{kind}--*.parquet"))
        if kind == "final_sample":  # a kill between a sample shard and its mean shard: the cells were recomputed
            shards = [s for s in shards if (self.root / s.name.replace(kind, "final_mean", 1)).is_file()]
        if not shards and kind == "final_sample" and not self.meta.get("per_cell_samples"):
            raise ActivationStoreError(f"{self.root}: no single-prompt final-token samples; the run kept none "
                                       "(--per-cell-samples 0): rerun with --per-cell-samples K into a new --out")
        if not shards:
            raise ActivationStoreError(f"{self.root}: no {kind} activations; was the run made with --capture?")
        frames, arrays = [], []
        for i, path in enumerate(shards):
            for file in (path, path.with_suffix(".npy")):  # read and memory-mapped: a FIFO would block, a link lead out
                check_regular(file, "a shard the run wrote", ActivationStoreError)
            frame = read_index(path, self.meta.get("run_id"))
            frame["_shard"], frame["_row"] = i, np.arange(len(frame))
            frames.append(frame)
            arrays.append(np.load(path.with_suffix(".npy"), mmap_mode="r"))
        return pd.concat(frames, ignore_index=True), arrays

    def _select(self, kind: str, **where) -> tuple[np.ndarray, pd.DataFrame]:
        index, arrays = self._kind(kind)
        try:
            index = select_rows(index, where, f"{self.root}: {kind} activations")
        except ValueError as err:
            raise ActivationStoreError(str(err)) from None
        if index.empty:
            raise ActivationStoreError(f"{self.root}: no {kind} activations for {where}")
        vectors = np.stack([arrays[s][r] for s, r in zip(index["_shard"], index["_row"])])
        return vectors, index.drop(columns=["_shard", "_row"]).reset_index(drop=True)

    def slot_field(self, kind: str) -> str:
        """The index field that holds a span kind's identity: the last of the fields that decide its prefix (the
        slot's own value; CaptureSpec's rule)."""
        spans = self.meta.get("spans", {})
        if kind not in spans:
            raise ActivationStoreError(f"{self.root}: no span kind {kind!r}; captured: {', '.join(spans) or 'none'}")
        return spans[kind]["fields"][-1]

    def spans(self, kind: str, reduction: str = "mean", layers: Layers | None = None,
              **where) -> tuple[np.ndarray, pd.DataFrame]:
        """Span states (hooks × rows × d_model, float32) of one capture kind and the index of their prefix fields,
        one row per key (the first stored where several processes stored it), in sorted key order. `where` selects
        rows by field: a value or a list of values; `reduction` is ``mean`` or ``last`` over the span's tokens."""
        if layers is not None:
            self.select(layers)  # a bad layer is named before any shard is read
        if reduction not in REDUCTIONS:
            raise ActivationStoreError(f"unknown reduction {reduction!r}; expected one of {', '.join(REDUCTIONS)}")
        self.slot_field(kind)
        vectors, index = self._select(kind, **where)
        fields = self.meta["spans"][kind]["fields"]
        first = ~index.duplicated(fields).to_numpy()
        vectors, index = vectors[first], index[first].reset_index(drop=True)
        order = index.sort_values(fields, kind="stable").index.to_numpy()
        states = vectors[order, REDUCTIONS.index(reduction)].astype(np.float32)
        return self._at(np.moveaxis(states, 0, 1), layers), index.loc[order].reset_index(drop=True)

    def identities(self, kind: str, reduction: str = "mean", layers: Layers | None = None,
                   **where) -> tuple[np.ndarray, list[str]]:
        """One vector per identity of a span kind (hooks × identities × d_model): the mean over the selected rows
        that hold that identity (e.g. one persona across settings), identities in sorted order."""
        states, index = self.spans(kind, reduction, layers, **where)
        names = index[self.slot_field(kind)].to_numpy()
        identities = sorted(set(names))
        return np.stack([states[:, names == name].mean(1) for name in identities], axis=1), identities

    def final(self, layers: Layers | None = None, **where) -> tuple[np.ndarray, pd.DataFrame]:
        """Per-cell means of the final-token state (hooks × cells × d_model) with the cell fields and prompt count,
        cells in sorted order; the shares of several processes are combined weighted by their counts."""
        if layers is not None:
            self.select(layers)
        vectors, index = self._select("final_mean", **where)
        cell = list(self.meta["cell"])
        weights = index["count"].to_numpy(dtype=np.float64)
        groups = index.groupby(cell, sort=True).indices
        means, counts = [], []
        for rows in groups.values():
            w = weights[rows]
            means.append(np.tensordot(w / w.sum(), vectors[rows].astype(np.float64), axes=1))
            counts.append(int(w.sum()))
        labels = pd.DataFrame(list(groups), columns=cell).assign(count=counts)
        return self._at(np.moveaxis(np.stack(means).astype(np.float32), 0, 1), layers), labels

    def final_samples(self, layers: Layers | None = None, **where) -> tuple[np.ndarray, pd.DataFrame]:
        """Single-prompt final-token states (hooks × samples × d_model) with their item fields: per cell, the
        per_cell_samples items of smallest seeded rank, whichever processes ran them."""
        if layers is not None:
            self.select(layers)
        vectors, index = self._select("final_sample", **where)
        cell = self.meta["cell"]
        keep = index.sort_values("sample_rank", kind="stable").groupby(cell, sort=False).head(
            self.meta["per_cell_samples"]).index.sort_values()
        index = index.loc[keep].drop(columns="sample_rank").reset_index(drop=True)
        return self._at(np.moveaxis(vectors[keep].astype(np.float32), 0, 1), layers), index


def _capture_advice(run_dir: Path) -> str:
    """How to get an activation store for the run in `run_dir` (its manifest names the suite)."""
    try:
        suite = read_manifest(run_dir).suite
    except RunDirError:
        suite = "SUITE"
    return f"rerun `empathy-gap run {suite}` with --capture into a new --out"


def load(run_dir: str | Path) -> ActivationStore:
    """Open the activation store of a run directory (nothing is read into memory yet)."""
    root = Path(run_dir) / FOLDER
    if not Path(run_dir).is_dir():
        raise ActivationStoreError(f"{run_dir}: no such run directory")
    if not (root / META).is_file():
        raise ActivationStoreError(f"{run_dir}: holds no activation store; {_capture_advice(Path(run_dir))}")
    meta = json.loads(read_regular(root / META, "the activation store's meta.json", error=ActivationStoreError))
    if (Path(run_dir) / MANIFEST).exists():  # a store read as a run's (a bare store, as tests build, has no manifest)
        check_run_id(root / META, meta.get("run_id"), read_manifest(run_dir).run_id)
    return ActivationStore(root, meta)
