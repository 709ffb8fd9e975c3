"""Capture during a suite run, using causality: an identity span's states depend only on the prompt up to the span's
end, so they are computed once per distinct value of the item fields that decide that prefix (the suite's
CaptureSpec); final-token states are folded into per-cell running sums, with a seeded sample of single prompts. Where
the model runs on a GPU, shards are copied to the host and written by one background thread, in order, so the run's
forwards do not wait for them; on a CPU they are written in the run's thread (a writer thread there competes with the
forwards for the cores: a capture run took 6-9% longer with it on 2 cores)."""

from __future__ import annotations

import hashlib
import heapq
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from activations.capture import ResidualTrace, decoder_layers, hook_names, parse_layers, resid_post
from activations.spans import prompt_spans
from activations.store import FOLDER, REDUCTIONS, indexed_keys, read_index, write_meta, write_shard
from behavioral.inference.engine import halving_on_oom, left_pad, pad_token_id
from behavioral.inference.models import input_device
from behavioral.suite.protocol import CaptureSpec, Item
from behavioral.suite.work import WorkUnit

FLUSH_CELLS = 16  # completed cells written per shard
FLUSH_SPANS = 256  # span vectors written per shard
BACKGROUND_WRITES = ("cuda",)  # the device types whose runs write shards from a background thread

Key = tuple[str, ...]


def sample_rank(seed: int, item_id: str) -> int:
    """An item's place in its cell's seeded sample: the K items with the smallest rank are kept, whichever process
    ran them."""
    return int.from_bytes(hashlib.sha256(f"{seed}|{item_id}".encode()).digest()[:7], "big")


class Recorder:
    """Writes the identity activations of one process's share of a run into RUN_DIR/activations."""

    def __init__(self, model, tokenizer, chat_format: str, out: Path, spec: CaptureSpec, kinds: Sequence[str],
                 layers: str, per_cell_samples: int, seed: int, batch_size: int, rank: int = 0,
                 run_id: str | None = None):
        self.model, self.tokenizer, self.chat_format = model, tokenizer, chat_format
        self.out, self.spec, self.kinds = Path(out), spec, tuple(kinds)
        n_layers = len(decoder_layers(model))
        self.layers = parse_layers(layers, n_layers)
        self.hooks = hook_names(n_layers, self.layers)
        self.per_cell_samples, self.seed, self.batch_size, self.rank = per_cell_samples, seed, batch_size, rank
        self.run_id = run_id
        self.device = input_device(model)
        self.span_kinds = [k for k in self.kinds if k in spec.spans]
        self.stored: dict[str, set[Key]] = {k: indexed_keys(self.out, k, spec.spans[k][1], run_id)
                                           for k in self.span_kinds}
        self._spans: dict[str, list[tuple[Key, np.ndarray]]] = defaultdict(list)
        self._sums: dict[Key, torch.Tensor] = {}  # float64, on the model's device
        self._counts: dict[Key, int] = defaultdict(int)
        self._expected: dict[Key, int] = defaultdict(int)
        self._samples: dict[Key, list] = defaultdict(list)  # heap of (-rank, item_id, fields, state on the device)
        self._ready: list[tuple[Key, torch.Tensor, int]] = []  # (cell, float64 mean on the device, count)
        self._flushed: set[Key] = set()
        self._shards = 0
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="activation-shards") \
            if self.device.type in BACKGROUND_WRITES else None
        self._writes: list[Future] = []
        write_meta(self.out, self.meta())

    @property
    def tracer(self):
        """The engine tracer that hands each prompt's final-token states to the run (None without `final`)."""
        if "final" not in self.kinds:
            return None
        return lambda positions: ResidualTrace(self.model, self.layers, positions=positions)

    def meta(self) -> dict:
        """What the store holds: hook names, layers, width, kinds, the suite's span and cell fields, sampling."""
        return {"hooks": self.hooks, "layers": self.layers, "d_model": self.model.config.hidden_size,
                "kinds": list(self.kinds), "per_cell_samples": self.per_cell_samples, "dtype": "float16",
                "reductions": list(REDUCTIONS), "cell": list(self.spec.cell),
                "spans": {k: {"slot": slot, "fields": list(fields)} for k, (slot, fields) in self.spec.spans.items()},
                "run_id": self.run_id}

    def _cell(self, item: Item) -> Key:
        return tuple(item.fields[f] for f in self.spec.cell)

    def _key(self, kind: str, item: Item) -> Key:
        return tuple(item.fields[f] for f in self.spec.spans[kind][1])

    def _fresh(self, kind: str, item: Item) -> bool:
        """True where the item's key of a span kind is not stored yet and its prompt marks the kind's slot (a prompt
        that names no identity, e.g. GIEBench's Raw, has no span to store)."""
        slot = self.spec.spans[kind][0]
        return self._key(kind, item) not in self.stored[kind] and any(s.name == slot for s in item.prompt().slots)

    # --- planning and resume --------------------------------------------------------------------------------------

    def plan(self, units: Iterable[WorkUnit]) -> None:
        """Learn how many items of each cell this process runs, and which cells it already stored."""
        for unit in units:
            for item in unit.items:
                self._expected[self._cell(item)] += 1
        self._flushed = flushed_cells(self.out, self.rank, self.spec.cell, self.run_id)

    def needs(self, unit: WorkUnit) -> bool:
        """True where some of the unit's activations are not in the store yet (its rows may be)."""
        if "final" in self.kinds and any(self._cell(item) not in self._flushed for item in unit.items):
            return True
        return any(self._fresh(kind, item) for kind in self.span_kinds for item in unit.items)

    # --- one batch --------------------------------------------------------------------------------------------------

    def add(self, units: Sequence[WorkUnit], states: Sequence[torch.Tensor] | None) -> None:
        """Span states of every new key among the batch's items, and the final-token states [hooks, d] of its items
        (unit then item order) folded into their cells."""
        items = [item for unit in units for item in unit.items]
        for kind in self.span_kinds:
            fresh = {}
            for item in items:
                key = self._key(kind, item)
                if key not in fresh and self._fresh(kind, item):
                    fresh[key] = item
            if fresh:
                vectors = self._span_vectors(list(fresh.values()), self.spec.spans[kind][0])
                self._spans[kind] += list(zip(fresh, vectors))
                self.stored[kind].update(fresh)
        if states is not None:
            for item, state in zip(items, states):
                self._fold(item, state)
        if len(self._ready) >= FLUSH_CELLS or any(len(v) >= FLUSH_SPANS for v in self._spans.values()):
            self.flush()

    def _span_vectors(self, items: Sequence[Item], slot: str) -> np.ndarray:
        """[items, 2 (mean, last), hooks, d]: states over the slot's span, from the prompt cut right after it; in
        batches of batch_size, halved on CUDA out-of-memory as the engine's are (the halved size is kept)."""
        chunks = [list(items[k:k + self.batch_size]) for k in range(0, len(items), self.batch_size)]
        return np.stack(halving_on_oom(lambda chunk: self._span_batch(chunk, slot), chunks, self._halve))

    def _halve(self, size: int) -> None:
        """Keep the batch size an out-of-memory halving left, for the batches that follow."""
        self.batch_size = size

    def _span_batch(self, items: Sequence[Item], slot: str) -> np.ndarray:
        """`_span_vectors` of one batch, in one forward that stops after the last captured layer."""
        cut, spans = [], []
        for item in items:
            ids, token_spans = prompt_spans(self.tokenizer, item.prompt(), self.chat_format)
            s = token_spans[slot]
            cut.append(ids[:s.end])
            spans.append((s.start, s.end))
        ids, mask = left_pad(cut, pad_token_id(self.tokenizer), self.device)
        width = ids.shape[1]
        longest = max(e - s for s, e in spans)
        positions = torch.tensor([[width - (e - s) + min(i, e - s - 1) for i in range(longest)] for s, e in spans],
                                 device=self.device)
        states = resid_post(self.model, ids, attention_mask=mask, positions=positions, layers=self.layers,
                            position_ids=(mask.long().cumsum(1) - 1).clamp(min=0))  # [hooks, B, P, d]
        lengths = torch.tensor([e - s for s, e in spans], device=self.device)
        valid = (torch.arange(longest, device=self.device)[None, :] < lengths[:, None]).float()
        mean = (states.float() * valid[None, :, :, None]).sum(2) / lengths[None, :, None]
        last = states[:, torch.arange(len(spans)), lengths - 1].float()
        # cast to the store's float16 on the device (the same rounding as numpy's), half the bytes to copy
        return torch.stack([mean, last], dim=2).permute(1, 2, 0, 3).half().cpu().numpy()

    def _fold(self, item: Item, state: torch.Tensor) -> None:
        cell = self._cell(item)
        if cell in self._flushed:
            return
        self._sums[cell] = self._sums.get(cell, 0) + state.double()
        self._counts[cell] += 1
        if self.per_cell_samples:
            heap = self._samples[cell]
            # a copy: a row of the engine's batch would keep the whole batch's states alive
            entry = (-sample_rank(self.seed, item.item_id), item.item_id, dict(item.fields), state.clone())
            if len(heap) < self.per_cell_samples:
                heapq.heappush(heap, entry)
            elif entry[0] > heap[0][0]:
                heapq.heapreplace(heap, entry)
        if self._counts[cell] == self._expected[cell]:
            self._ready.append((cell, self._sums.pop(cell) / self._counts[cell], self._counts[cell]))
            self._flushed.add(cell)

    # --- writing ----------------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Queue the completed cells (means and their samples) and the buffered span states for writing; open cells
        stay in memory, so a kill loses only those and the writes still queued (the rerun recomputes them)."""
        key = f"r{self.rank:03d}-{self._next_shard()}"
        for kind, rows in self._spans.items():
            if rows:
                index = pd.DataFrame([k for k, _ in rows], columns=list(self.spec.spans[kind][1]))
                stacked = np.stack([v for _, v in rows])
                self._write(kind, key, lambda stacked=stacked: stacked, index)
        self._spans.clear()
        if not self._ready:
            return
        cells = [c for c, _, _ in self._ready]
        index = pd.DataFrame(cells, columns=list(self.spec.cell)).assign(count=[n for _, _, n in self._ready])
        samples = [entry for cell in cells for entry in sorted(self._samples.pop(cell, []), reverse=True)]
        if samples:
            sample_index = pd.DataFrame([fields for _, _, fields, _ in samples])
            sample_index["item_id"] = [item_id for _, item_id, _, _ in samples]
            sample_index["sample_rank"] = [-negated for negated, _, _, _ in samples]
            states = [s for *_, s in samples]
            self._write("final_sample", key, lambda: _host(states), sample_index)
        means = [m for _, m, _ in self._ready]
        self._write("final_mean", key, lambda: _host(means), index)
        self._ready = []

    def _write(self, kind: str, key: str, array: Callable[[], np.ndarray], index: pd.DataFrame) -> None:
        """Write one shard, or queue it (its array made on the writer's thread, where a device copy waits off the
        run's path), first raising the error of any queued write that failed."""
        if self._writer is None:
            write_shard(self.out, kind, key, array(), index, self.run_id)
            return
        self._raise_failed([f for f in self._writes if f.done()])
        self._writes = [f for f in self._writes if not f.done()]
        self._writes.append(self._writer.submit(lambda: write_shard(self.out, kind, key, array(), index,
                                                                    self.run_id)))

    def close(self, flush: bool = True) -> None:
        """Flush (unless the run failed), wait for every queued write and raise the first that failed."""
        try:
            if flush:
                self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
        self._raise_failed(self._writes)
        self._writes = []

    @staticmethod
    def _raise_failed(writes: Sequence[Future]) -> None:
        for write in writes:
            write.result()

    def _next_shard(self) -> str:
        """One past the highest shard index of this rank on disk, so no shard overwrites another."""
        name = re.compile(rf"\w+--r{self.rank:03d}-(\d+)\.(?:npy|parquet)$")
        folder = self.out / FOLDER
        existing = [int(m.group(1)) for p in folder.iterdir() if (m := name.match(p.name))] if folder.is_dir() else []
        self._shards = max([self._shards, *existing]) + 1
        return f"{self._shards:06d}"


def _host(states: Sequence[torch.Tensor]) -> np.ndarray:
    """Device states stacked and copied to the host in one transfer, as float64 (exact for every model dtype), so
    the store's cast to float16 rounds once, in numpy."""
    return torch.stack(list(states)).double().cpu().numpy()


def flushed_cells(run_dir: Path, rank: int, cell: Sequence[str], run_id: str | None) -> set[Key]:
    """Cells whose final-token means this rank of the run `run_id` already stored."""
    cells: set[Key] = set()
    for path in (Path(run_dir) / FOLDER).glob(f"final_mean--r{rank:03d}-*.parquet"):
        frame = read_index(path, run_id, cell)
        cells.update(map(tuple, frame.itertuples(index=False)))
    return cells
