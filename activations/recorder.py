"""Capture during a suite run, using causality: persona states once per (setting, persona), experiencer states once
per (setting, perceiver, experiencer), final-token states as per-cell running sums plus a seeded sample per cell."""

from __future__ import annotations

import hashlib
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from activations.capture import decoder_layers, hook_names, resid_post
from activations.spans import prompt_spans
from activations.store import FOLDER, REDUCTIONS, shard_done, write_meta, write_shard
from behavioral.corpus import Event
from behavioral.engine import left_pad, pad_token_id
from behavioral.groups import get_category
from behavioral.prompts import build
from behavioral.settings import get_setting
from behavioral.work import WorkUnit

FLUSH_CELLS = 16

Cell = tuple[str, str, str, str]  # setting, category, perceiver, experiencer


class Recorder:
    """Writes identity activations of one process's share of a run into RUN_DIR/activations."""

    def __init__(self, model, tokenizer, chat_format: str, out: Path, kinds: Sequence[str],
                 layers: list[int] | None, per_cell_samples: int, seed: int, batch_size: int, rank: int = 0):
        self.model, self.tokenizer, self.chat_format = model, tokenizer, chat_format
        self.out, self.kinds, self.layers = Path(out), tuple(kinds), layers
        self.per_cell_samples, self.seed, self.batch_size = per_cell_samples, seed, batch_size
        self.hooks = hook_names(len(decoder_layers(model)), layers)
        self.device = next(model.parameters()).device
        self._sums: dict[Cell, torch.Tensor] = {}
        self._counts: dict[Cell, int] = defaultdict(int)
        self._expected: dict[Cell, int] = defaultdict(int)
        self._samples: dict[Cell, set[str]] = {}
        self._sampled: list[tuple[Cell, str, np.ndarray]] = []
        self._ready: list[tuple[Cell, np.ndarray, int]] = []
        self._flushed: set[Cell] = set()
        self._shards = 0
        self.rank = rank

    def meta(self) -> dict:
        """What the store holds: hook names, layers, width, kinds and sampling."""
        return {"hooks": self.hooks, "layers": self.layers, "d_model": self.model.config.hidden_size,
                "kinds": list(self.kinds), "per_cell_samples": self.per_cell_samples, "dtype": "float16",
                "reductions": list(REDUCTIONS)}

    # --- persona and experiencer: one truncated forward per key --------------------------------------------

    def identity_pass(self, settings: Sequence[str], categories: Sequence[str], event: Event) -> None:
        """Persona and experiencer vectors for every (setting, category) not stored yet; run by one process."""
        write_meta(self.out, self.meta())
        for setting in settings:
            narrative = event.narrative(get_setting(setting).narrative_form)
            for name in categories:
                identities = get_category(name).with_unspecified
                key = f"{setting}--{name}"
                if "persona" in self.kinds and not shard_done(self.out, "persona", key):
                    items = [(p, identities[0]) for p in identities]
                    vectors = self._span_vectors(setting, items, event.emotion, narrative, "persona")
                    index = pd.DataFrame({"setting": setting, "category": name, "identity": list(identities)})
                    write_shard(self.out, "persona", key, vectors, index)
                if "experiencer" in self.kinds and not shard_done(self.out, "experiencer", key):
                    items = [(p, x) for p in identities for x in identities]
                    vectors = self._span_vectors(setting, items, event.emotion, narrative, "experiencer")
                    index = pd.DataFrame({"setting": setting, "category": name,
                                          "perceiver": [p for p, _ in items], "experiencer": [x for _, x in items]})
                    write_shard(self.out, "experiencer", key, vectors, index)

    def _span_vectors(self, setting: str, items, emotion: str, narrative: str, span: str) -> np.ndarray:
        """[items, 2 (mean, last), hooks, d]: states over the span, from the prompt cut right after the span."""
        out = []
        for start in range(0, len(items), self.batch_size):
            cut, spans = [], []
            for perceiver, experiencer in items[start:start + self.batch_size]:
                prompt = build(setting, perceiver, experiencer, emotion, narrative)
                ids, token_spans = prompt_spans(self.tokenizer, prompt, self.chat_format)
                s = token_spans[span]
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
            out.append(torch.stack([mean, last], dim=2).permute(1, 2, 0, 3).cpu().numpy())
        return np.concatenate(out)

    # --- final token: running sums per cell -----------------------------------------------------------------

    def plan(self, units: Sequence[WorkUnit], out: Path) -> None:
        """Learn how many prompts of each cell this process runs, and which cells it already stored."""
        for unit in units:
            cell = (unit.setting, unit.category, unit.perceiver, unit.experiencer)
            self._expected[cell] += len(unit.events)
        self._flushed = flushed_cells(out, self.rank)

    def needs(self, unit: WorkUnit) -> bool:
        """True where the unit's final-token states are not in the store yet."""
        return "final" in self.kinds and (unit.setting, unit.category, unit.perceiver, unit.experiencer) \
            not in self._flushed

    def _sample_of(self, cell: Cell, events: Sequence[str]) -> set[str]:
        if cell not in self._samples:
            seed = int(hashlib.sha256(f"{self.seed}|{'|'.join(cell)}".encode()).hexdigest()[:12], 16)
            k = min(self.per_cell_samples, len(events))
            self._samples[cell] = set(random.Random(seed).sample(sorted(events), k))
        return self._samples[cell]

    def add(self, units: Sequence[WorkUnit], states: torch.Tensor, all_events: Sequence[str]) -> None:
        """Fold a batch's final-token states [prompts, hooks, d] (unit then event order) into the cell sums."""
        row = 0
        for unit in units:
            cell = (unit.setting, unit.category, unit.perceiver, unit.experiencer)
            if cell in self._flushed:
                row += len(unit.events)
                continue
            block = states[row:row + len(unit.events)].double()
            self._sums[cell] = self._sums.get(cell, 0) + block.sum(0)
            self._counts[cell] += len(unit.events)
            sample = self._sample_of(cell, all_events)
            for i, event in enumerate(unit.events):
                if event.event_id in sample:
                    self._sampled.append((cell, event.event_id, states[row + i].float().numpy()))
            row += len(unit.events)
            if self._counts[cell] == self._expected[cell]:
                self._ready.append((cell, (self._sums.pop(cell) / self._counts[cell]).numpy(), self._counts[cell]))
                self._flushed.add(cell)
        if len(self._ready) >= FLUSH_CELLS:
            self.flush()

    def flush(self) -> None:
        """Write the completed cells (means and their samples) as one shard each; open cells stay in memory."""
        if not self._ready:
            return
        done = {cell for cell, _, _ in self._ready}
        key = f"r{self.rank:03d}-{self._next_shard()}"
        cells = [c for c, _, _ in self._ready]
        index = pd.DataFrame(cells, columns=["setting", "category", "perceiver", "experiencer"])
        index["count"] = [n for _, _, n in self._ready]
        samples = [(c, e, v) for c, e, v in self._sampled if c in done]
        if samples:
            sample_index = pd.DataFrame([c for c, _, _ in samples],
                                        columns=["setting", "category", "perceiver", "experiencer"])
            sample_index["event_id"] = [e for _, e, _ in samples]
            write_shard(self.out, "final_sample", key, np.stack([v for _, _, v in samples]), sample_index)
        write_shard(self.out, "final_mean", key, np.stack([m for _, m, _ in self._ready]), index)
        self._sampled = [s for s in self._sampled if s[0] not in done]
        self._ready = []

    def _next_shard(self) -> str:
        """One past the highest shard index of this rank on disk, so no shard overwrites another."""
        name = re.compile(rf"final_(?:mean|sample)--r{self.rank:03d}-(\d+)\.(?:npy|parquet)$")
        existing = [int(m.group(1)) for p in (self.out / FOLDER).iterdir() if (m := name.match(p.name))]
        self._shards = max([self._shards, *existing]) + 1
        return f"{self._shards:06d}"


def flushed_cells(run_dir: Path, rank: int) -> set[Cell]:
    """Cells whose final-token means this rank already stored."""
    cells: set[Cell] = set()
    for path in (Path(run_dir) / FOLDER).glob(f"final_mean--r{rank:03d}-*.parquet"):
        frame = pd.read_parquet(path, columns=["setting", "category", "perceiver", "experiencer"])
        cells.update(map(tuple, frame.itertuples(index=False)))
    return cells
