"""The activation store of a run directory: float16 shards (.npy) with Parquet indexes, memory-mapped on load."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from behavioral.suites.intergroup.groups import get_category

FOLDER = "activations"
META = "meta.json"
KINDS = ("persona", "experiencer", "final_mean", "final_sample")
REDUCTIONS = ("mean", "last")


class ActivationStoreError(ValueError):
    """An activation store that is missing or cannot answer the question asked."""


def shard_name(kind: str, key: str) -> str:
    """File stem of one shard of `kind`; `key` makes it unique (a setting × category, or a rank and counter)."""
    return f"{kind}--{key}"


def write_shard(run_dir: str | Path, kind: str, key: str, array: np.ndarray, index: pd.DataFrame) -> None:
    """Write one shard: the float16 array first, then its index, each through a rename (the index marks it done)."""
    if len(array) != len(index):
        raise ValueError(f"shard {kind}/{key}: {len(array)} vectors but {len(index)} index rows")
    folder = Path(run_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    stem = shard_name(kind, key)
    tmp = folder / f".{stem}.npy.tmp"
    with open(tmp, "wb") as f:
        np.save(f, array.astype(np.float16))
    os.replace(tmp, folder / f"{stem}.npy")
    tmp = folder / f".{stem}.parquet.tmp"
    index.reset_index(drop=True).to_parquet(tmp)
    os.replace(tmp, folder / f"{stem}.parquet")


def shard_done(run_dir: str | Path, kind: str, key: str) -> bool:
    """True once a shard's index is on disk (its array was written before it)."""
    return (Path(run_dir) / FOLDER / f"{shard_name(kind, key)}.parquet").is_file()


def indexed_keys(run_dir: str | Path, kind: str, columns: Sequence[str]) -> set[tuple[str, ...]]:
    """The `columns` values of every row already stored for `kind` (by any process)."""
    keys: set[tuple[str, ...]] = set()
    for path in (Path(run_dir) / FOLDER).glob(f"{kind}--*.parquet"):
        keys.update(map(tuple, pd.read_parquet(path, columns=list(columns)).itertuples(index=False)))
    return keys


def write_meta(run_dir: str | Path, meta: dict) -> None:
    """Record hook names, layers and d_model of the store."""
    folder = Path(run_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{META}.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, folder / META)


@dataclass
class ActivationStore:
    """Lazy access to a run's activations: arrays stay memory-mapped until a question selects rows from them."""

    root: Path
    meta: dict

    @property
    def hooks(self) -> list[str]:
        """Hook names in array order: hook_embed, then blocks.{l}.hook_resid_post."""
        return self.meta["hooks"]

    def _kind(self, kind: str) -> tuple[pd.DataFrame, list[np.ndarray]]:
        shards = sorted(self.root.glob(f"{kind}--*.parquet"))
        if kind == "final_sample":  # a kill between a sample shard and its mean shard: the cells were recomputed
            shards = [s for s in shards if (self.root / s.name.replace(kind, "final_mean", 1)).is_file()]
        if not shards:
            raise ActivationStoreError(f"{self.root}: no {kind} activations; was the run made with --capture?")
        frames, arrays = [], []
        for i, path in enumerate(shards):
            frame = pd.read_parquet(path)
            frame["_shard"], frame["_row"] = i, np.arange(len(frame))
            frames.append(frame)
            arrays.append(np.load(path.with_suffix(".npy"), mmap_mode="r"))
        return pd.concat(frames, ignore_index=True), arrays

    def _select(self, kind: str, **where) -> tuple[np.ndarray, pd.DataFrame]:
        index, arrays = self._kind(kind)
        for column, value in where.items():
            index = index[index[column] == value]
        if index.empty:
            raise ActivationStoreError(f"{self.root}: no {kind} activations for {where}")
        vectors = np.stack([arrays[s][r] for s, r in zip(index["_shard"], index["_row"])])
        return vectors, index.drop(columns=["_shard", "_row"]).reset_index(drop=True)

    def _spans(self, kind: str, category: str, setting: str) -> tuple[np.ndarray, pd.DataFrame]:
        """One row per key of a span kind (several processes may have stored the same key: the first is kept)."""
        vectors, index = self._select(kind, category=category, setting=setting)
        first = ~index.duplicated(self.meta["spans"][kind]["fields"]).to_numpy()
        return vectors[first], index[first].reset_index(drop=True)

    def persona(self, category: str, setting: str, reduction: str = "mean") -> tuple[np.ndarray, list[str]]:
        """Persona vectors (layers × identities × d_model) in Table 1 order ("a person" first), and the identities."""
        vectors, index = self._spans("persona", category, setting)
        names = index[self.meta["spans"]["persona"]["slot"]]
        order = {name: i for i, name in enumerate(get_category(category).with_unspecified)}
        rows = sorted(range(len(index)), key=lambda i: order[names[i]])
        r = REDUCTIONS.index(reduction)
        return np.moveaxis(vectors[rows, r].astype(np.float32), 0, 1), [names[i] for i in rows]

    def experiencer(self, category: str, setting: str, reduction: str = "mean") -> tuple[np.ndarray, pd.DataFrame]:
        """Experiencer vectors (layers × pairs × d_model) and the (perceiver, experiencer) of each pair."""
        vectors, index = self._spans("experiencer", category, setting)
        r = REDUCTIONS.index(reduction)
        return np.moveaxis(vectors[:, r].astype(np.float32), 0, 1), index[["perceiver", "experiencer"]]

    def final(self, category: str, setting: str) -> tuple[np.ndarray, pd.DataFrame]:
        """Per-cell means of the final-token state (layers × cells × d_model) in Table 1 order, with perceiver,
        experiencer and prompt count; the shares of several processes are combined weighted by their counts."""
        vectors, index = self._select("final_mean", category=category, setting=setting)
        order = {name: i for i, name in enumerate(get_category(category).with_unspecified)}
        weights = index["count"].to_numpy(dtype=np.float64)
        cells = sorted(set(zip(index["perceiver"], index["experiencer"])), key=lambda c: (order[c[0]], order[c[1]]))
        means, counts = [], []
        for perceiver, experiencer in cells:
            rows = np.flatnonzero((index["perceiver"] == perceiver) & (index["experiencer"] == experiencer))
            w = weights[rows]
            means.append(np.tensordot(w / w.sum(), vectors[rows].astype(np.float64), axes=1))
            counts.append(int(w.sum()))
        labels = pd.DataFrame(cells, columns=["perceiver", "experiencer"]).assign(count=counts)
        return np.moveaxis(np.stack(means).astype(np.float32), 0, 1), labels

    def final_samples(self, category: str, setting: str) -> tuple[np.ndarray, pd.DataFrame]:
        """Single-prompt final-token states (layers × samples × d_model) with their item fields: per cell, the
        per_cell_samples items of smallest seeded rank, whichever processes ran them."""
        vectors, index = self._select("final_sample", category=category, setting=setting)
        cell = self.meta["cell"]
        keep = index.sort_values("sample_rank", kind="stable").groupby(cell, sort=False).head(
            self.meta["per_cell_samples"]).index.sort_values()
        index = index.loc[keep].drop(columns="sample_rank").reset_index(drop=True)
        return np.moveaxis(vectors[keep].astype(np.float32), 0, 1), index


def _capture_advice(run_dir: Path) -> str:
    """How to get an activation store for the run in `run_dir`: its suite's capture kinds, or that it has none."""
    from behavioral.suites import get_suite, names  # the registry imports every suite

    manifest = run_dir / "manifest.json"
    suite = json.loads(manifest.read_text()).get("config", {}).get("suite") if manifest.is_file() else None
    if suite not in names():
        return "rerun `empathy-gap run` with --capture into a new --out"
    spec = get_suite(suite).capture
    return (f"rerun `empathy-gap run {suite}` with --capture ({', '.join(spec.kinds)}) into a new --out" if spec
            else f"suite {suite!r} cannot capture activations")


def load(run_dir: str | Path) -> ActivationStore:
    """Open the activation store of a run directory (nothing is read into memory yet)."""
    root = Path(run_dir) / FOLDER
    if not Path(run_dir).is_dir():
        raise ActivationStoreError(f"{run_dir}: no such run directory")
    if not (root / META).is_file():
        raise ActivationStoreError(f"{run_dir}: holds no activation store; {_capture_advice(Path(run_dir))}")
    return ActivationStore(root, json.loads((root / META).read_text()))
