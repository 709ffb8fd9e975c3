"""The inference engine: greedy generation and answer-trie scoring of chat prompts, sharing each common prefix's KV cache.

A batch is laid out per row as [shared prefix (cached once) | left padding | rest of the prompt | new tokens], with
an explicit 4-D attention mask and explicit positions, so padding in the middle is invisible to the model.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import ContextManager, TypeVar

import torch
from torch import nn
from transformers.cache_utils import DynamicCache, DynamicLayer

from behavioral.inference.answer_space import AnswerTrie, Scores
from behavioral.inference.models import input_device
from behavioral.inference.prefix_plan import batches, cached_prefixes, common_length, with_branch_points
from behavioral.inference.lazy_tree import AnswerTree, expansion
from behavioral.inference.tree_logits import TreeLogits, head_inputs, output_head

TREE_FIELDS = tuple(f.name for f in fields(TreeLogits) if f.name != "vocab")  # the fields per row and position
END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")

T = TypeVar("T")
R = TypeVar("R")


class EngineError(ValueError):
    """A model or tokenizer the engine cannot run as asked."""


@dataclass(frozen=True)
class Generation:
    """One continuation: its text; whether decoding stopped at max_new_tokens with the turn still open and the answer
    not yet decided; the answer distribution where the same pass scored it (`Engine.generate_and_score`); and the
    final prompt token's activations [hooks, d] (on the model's device, in its dtype) when a tracer was active."""

    text: str
    truncated: bool
    scores: Scores | None = None
    state: torch.Tensor | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedy at temperature 0 (the default), else sampled at `temperature` from the
    smallest set of tokens holding `top_p` of the probability."""

    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ValueError(f"--temperature must be at least 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"--top-p must lie in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        """True when decoding takes the most likely token."""
        return self.temperature == 0


def stream_seed(*parts) -> int:
    """A 63-bit seed from (run seed, item id, sample index, ...): the same parts give the same random stream in any
    batch, on any rank, after any resume."""
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big") >> 1


Until = Callable[[str], bool]  # True once the reply so far decides the answer, so decoding may stop


def stop_token_ids(model, tokenizer) -> list[int]:
    """EOS ids of the generation config and tokenizer, plus the end-of-turn tokens the vocabulary has."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None)
        ids.update([eos] if isinstance(eos, int) else eos or [])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    if not ids:
        raise EngineError(f"tokenizer {tokenizer.name_or_path!r} has no EOS or end-of-turn token to stop generation")
    return sorted(ids)


def pad_token_id(tokenizer) -> int:
    """The tokenizer's pad id, or its EOS id where it has no pad token (padding is masked out either way)."""
    if tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    if tokenizer.eos_token_id is None:
        raise EngineError(f"tokenizer {tokenizer.name_or_path!r} has neither a pad nor an EOS token to pad batches")
    return tokenizer.eos_token_id


def left_pad(batch: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and attention mask for a batch of token id lists."""
    width = max(len(ids) for ids in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.bool)
    for row, seq in enumerate(batch):
        if seq:
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = True
    return ids.to(device), mask.to(device)


def shared_prefix_length(batch: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix all prompts share, leaving each at least one token of its own."""
    return max(0, min(min(len(ids) - 1, common_length(batch[0], ids)) for ids in batch))


def halving_on_oom(run: Callable[[list[T]], Sequence[R]], chunks: Sequence[list[T]],
                   on_halve: Callable[[int], None] | None = None) -> list[R]:
    """run(chunk)'s results over `chunks`, in order; a chunk that runs CUDA out of memory is split in half and
    retried, as Engine batches are (a chunk of one re-raises), and on_halve(the halved size) is told."""
    out: list[R] = []
    pending = list(chunks)
    while pending:
        chunk = pending.pop(0)
        try:
            results = run(chunk)
        except torch.cuda.OutOfMemoryError:
            if len(chunk) == 1:
                raise
            torch.cuda.empty_cache()
            half = len(chunk) // 2
            if on_halve is not None:
                on_halve(half)
            pending[:0] = [chunk[:half], chunk[half:]]
            continue
        out.extend(results)
    return out


def cache_keyword(model) -> str:
    """The forward keyword, and output field, of a model's KV cache: `cache` where the installed transformers has
    it (5.24 deprecates `past_key_values`, to be removed in 5.40), else `past_key_values` (older releases)."""
    try:
        names = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in names else "past_key_values"


def extendable(cache):
    """A copy of a KV cache that can be extended without changing `cache`: its layers are copied, their tensors
    shared (a cache layer's update concatenates or slices, never writes in place; a deep copy would also copy the
    whole batch a stored row is a view of)."""
    out = copy.copy(cache)
    out.layers = [copy.copy(layer) for layer in cache.layers]
    return out


class PrefixCache:
    """KV caches of shared token prefixes (batch of one); a new prefix extends the longest stored one it starts with."""

    CAPACITY = 8

    def __init__(self, model, capacity: int = CAPACITY):
        self.model = model
        self.capacity = capacity
        self.cache_key = cache_keyword(model)
        self.entries: OrderedDict[tuple[int, ...], object] = OrderedDict()
        self.tokens_computed = 0
        self.plain: bool | None = None  # whether the model's cache layers are plain (stackable row by row)

    @torch.inference_mode()
    def get(self, prefix: tuple[int, ...], device):
        """A cache holding `prefix`; callers copy it before extending it."""
        if prefix in self.entries:
            self.entries.move_to_end(prefix)
            return self.entries[prefix]
        base = self.base(prefix)
        cache = extendable(self.entries[base]) if base else None
        ids = torch.tensor([prefix[len(base):]], device=device)
        positions = torch.arange(len(base), len(prefix), device=device)[None]
        out = self.model(input_ids=ids, position_ids=positions, use_cache=True, logits_to_keep=1,
                         **{self.cache_key: cache})
        self.tokens_computed += len(prefix) - len(base)
        cache = getattr(out, self.cache_key)
        if self.plain is None:
            self.plain = all(type(layer) is DynamicLayer for layer in cache.layers)
        self.store(prefix, cache)
        return cache

    def store(self, prefix: tuple[int, ...], cache) -> None:
        """Keep `cache` as the KV cache of `prefix`, dropping the least recently used beyond capacity."""
        self.entries[prefix] = cache
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def base(self, prefix: tuple[int, ...], others: Sequence[tuple[int, ...]] = ()) -> tuple[int, ...]:
        """The longest stored prefix, or prefix among `others`, that `prefix` properly extends (() if none)."""
        return max((k for k in (*self.entries, *others) if len(k) < len(prefix) and prefix[:len(k)] == k),
                   key=len, default=())

    @torch.inference_mode()
    def rows(self, prefixes: Sequence[tuple[int, ...]], device):
        """A KV cache with one row per prefix, each row its prefix's stored cache left-padded to the longest (the
        caller masks the padding); None where every prefix is empty, or where they differ and the model's cache
        layers cannot be stacked row by row (sliding windows)."""
        distinct = list(dict.fromkeys(prefixes))
        if distinct == [()]:
            return None
        if len(distinct) == 1:
            cache = extendable(self.get(distinct[0], device))
            cache.batch_repeat_interleave(len(prefixes))
            return cache
        if self.plain is False:
            return None
        entries = {p: self.get(p, device) for p in distinct if p}
        if not self.plain:
            return None
        # prefixes of one length are concatenated in one copy and padded once (a copy per prefix and layer cost a
        # GPU a kernel launch each: thousands per batch at a pool's hundreds of prefixes)
        distinct.sort(key=len)
        width = len(distinct[-1])
        slot = {p: j for j, p in enumerate(distinct)}
        index = torch.tensor([slot[p] for p in prefixes], device=device)
        groups = [list(g) for _, g in itertools.groupby(distinct, key=len)]
        some = next(iter(entries.values()))
        cache = DynamicCache()
        for layer, first in enumerate(some.layers):
            stacked = []
            for field_name in ("keys", "values"):
                empty = getattr(first, field_name)[..., :0, :]
                parts = [torch.cat([getattr(entries[p].layers[layer], field_name) if p else empty for p in group])
                         for group in groups]
                padded = torch.cat([nn.functional.pad(t, (0, 0, width - t.shape[-2], 0)) for t in parts])
                stacked.append(padded[index.to(padded.device)])  # a split model keeps each layer on its device
            cache.update(*stacked, layer)
        return cache


class Batch:
    """One batch after each row's cached prefix: padded rest-of-prompt ids, which keys each row sees, positions.

    Rows read their prefixes (`prefixes[b]` tokens of prompt b; by default the prefix all rows share) from the
    engine's prefix store. `positions[b, j]` is the position in prompt b of column j of the first forward (padding
    columns repeat the first real one).
    """

    def __init__(self, engine: "Engine", prompts: Sequence[list[int]], prefixes: Sequence[int] | None = None):
        n = len(prompts)
        lengths = [0] * n
        if engine._share_prefix:
            lengths = list(prefixes) if prefixes is not None else [shared_prefix_length(prompts)] * n
        self.cache = engine.prefixes.rows([tuple(p[:k]) for p, k in zip(prompts, lengths)], engine.device)
        if self.cache is None and any(lengths):  # cache layers that cannot be stacked: one prefix for the batch
            lengths = [min(min(lengths), shared_prefix_length(prompts))] * n
            self.cache = engine.prefixes.rows([tuple(prompts[0][:lengths[0]])] * n, engine.device)
        self.ids, mask = left_pad([p[k:] for p, k in zip(prompts, lengths)], engine.pad_id, engine.device)
        self.mask = mask  # [B, width]: real (not padding) positions of the first forward
        cached = torch.tensor(lengths, device=engine.device)
        slots = torch.arange(max(lengths), device=engine.device)
        prefix_keys = slots[None, :] >= (max(lengths) - cached)[:, None]  # each row's prefix, left-padded
        self.keys = torch.cat([prefix_keys, mask], dim=1)  # [B, prefix + width]: keys each row may attend to
        self.positions = cached[:, None] + (mask.cumsum(dim=1) - 1).clamp(min=0)
        self.next_position = cached + mask.sum(dim=1)
        self.width = self.ids.shape[1]
        self.dtype = engine.dtype

    def prompt_mask(self) -> torch.Tensor:
        """[B, width, prefix + width] bool: causal over each row's own tokens, every prefix key, no padding."""
        n, w = self.ids.shape
        causal = torch.ones(w, w, dtype=torch.bool, device=self.ids.device).tril()
        allowed = self.keys[:, None, :].repeat(1, w, 1)
        allowed[:, :, -w:] &= causal
        allowed |= _diagonal_from(w, allowed.shape[2], allowed.shape[2] - w, self.ids.device)
        return allowed

    def bias(self, allowed: torch.Tensor) -> torch.Tensor:
        """Additive attention mask [B, 1, Q, K] from a boolean one."""
        zero = torch.zeros((), dtype=self.dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(self.dtype).min)[:, None]


def _widened(tree: TreeLogits, width: int) -> TreeLogits:
    """`tree` (one position) as position 0 of `width` positions, the others zero until a lazy read fills them."""
    def widen(x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros((x.shape[0], width, *x.shape[2:]))
        out[:, :1] = x
        return out

    return replace(tree, **{name: widen(getattr(tree, name)) for name in TREE_FIELDS})


def _diagonal_from(n: int, k: int, offset: int, device) -> torch.Tensor:
    """[n, k] bool with True at (i, offset + i): each query attends to itself (pad rows would otherwise see nothing)."""
    eye = torch.zeros(n, k, dtype=torch.bool, device=device)
    eye[torch.arange(n), offset + torch.arange(n)] = True
    return eye


class Engine:
    """Runs prompts through a causal LM in batches; halves the batch and retries on CUDA out-of-memory.

    Hook points are set for a block with `hooked` (a tracer that reads final-token states, an intervention that may
    edit hidden states, whether a batch's shared prefix is cached); outside it none is registered.
    """

    def __init__(self, model, tokenizer, batch_size: int = 16, max_new_tokens: int = 8,
                 max_batch_tokens: int | None = None, answer_tree: AnswerTree | None = None):
        self.model = model
        self.answer_tree = answer_tree or AnswerTree()  # how score mode reads answer trees (lazy, or full)
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.max_batch_tokens = max_batch_tokens
        self.device, self.dtype = input_device(model), next(model.parameters()).dtype
        self.pad_id = pad_token_id(tokenizer)
        self.stop_ids = stop_token_ids(model, tokenizer)
        self.prefixes = PrefixCache(model)
        # score mode reads answer trees through this head a vocabulary slice at a time (no full-vocabulary logits);
        # None where the model's logits are not the head's output alone (soft-capping, scaling)
        self.head = output_head(model, self.device)
        self.cache_key = self.prefixes.cache_key
        self.tokens_computed = 0  # positions run through the model outside the prefix cache, padding included
        self._tracer: Callable[[torch.Tensor], ContextManager] | None = None
        self._intervention: Callable[["Batch"], ContextManager] | None = None
        self._share_prefix = True
        self._trace: torch.Tensor | None = None

    @contextlib.contextmanager
    def hooked(self, tracer: Callable[[torch.Tensor], ContextManager] | None = None,
               intervention: Callable[["Batch"], ContextManager] | None = None,
               share_prefix: bool = True, answer_tree: AnswerTree | None = None) -> Iterator["Engine"]:
        """Inside the block: `tracer(positions)` is a context manager around each batch's first forward whose
        .stacked() gives [hooks, B, P, d] states at `positions` (activations.capture.ResidualTrace), returned with
        each result as `.state`; `intervention(batch)` a context manager around the same forward that may edit hidden
        states (patching, steering); with `share_prefix` False every prompt token is in that forward, so any
        position can be edited; `answer_tree`, if given, replaces how answer trees are read. The previous settings
        come back on exit."""
        saved = self._tracer, self._intervention, self._share_prefix, self.answer_tree
        self._tracer, self._intervention, self._share_prefix = tracer, intervention, share_prefix
        self.answer_tree = answer_tree or self.answer_tree
        try:
            yield self
        finally:
            self._tracer, self._intervention, self._share_prefix, self.answer_tree = saved

    def _prompt_forward(self, batch: "Batch", **kwargs):
        """The batch's first forward; with a tracer, also keeps each row's state at its last prompt token."""
        with self._intervention(batch) if self._intervention is not None else contextlib.nullcontext():
            if self._tracer is None:
                self._trace = None
                return self.model(**kwargs)
            last = torch.full((batch.ids.shape[0], 1), batch.width - 1, device=self.device)
            with self._tracer(last) as trace:
                out = self.model(**kwargs)
        # [B, hooks, d], left on the device: a recorder folds them there (a copy to the host per batch cost more
        # than the forward's gathers on an H200)
        self._trace = trace.stacked()[:, :, 0].transpose(0, 1)
        return out

    def _chunks(self, prompts: Sequence[list[int]], extra: int) -> list[list[tuple[int, int]]]:
        """Batches of (prompt index, cached prefix length) (behavioral.inference.prefix_plan): prefixes at the branch points
        of the prompts' prefix tree, rows by what is left after them, at most batch_size rows and, if set,
        max_batch_tokens positions (padded remainder plus `extra` new tokens per row)."""
        prefixes = cached_prefixes(prompts) if self._share_prefix else [0] * len(prompts)
        return batches(prompts, prefixes, self.batch_size, extra, self.max_batch_tokens)

    @torch.inference_mode()
    def _fill_prefixes(self, prefixes: Sequence[tuple[int, ...]]) -> None:
        """Compute the prefix store's missing `prefixes`, and the branch points between them, in batched forwards,
        each row extending the longest prefix stored or computed before it, so every shared segment runs once (a
        forward per prefix costs a GPU about as much as a batch of them). Models whose cache layers cannot be split
        row by row (sliding windows) compute each prefix when a batch asks. The store keeps all of them while
        the prompts run."""
        needed = with_branch_points(prefixes)
        self.prefixes.capacity = max(PrefixCache.CAPACITY, len(needed))
        todo = sorted((p for p in needed if p not in self.prefixes.entries), key=len)
        if todo and self.prefixes.plain is None:
            self.prefixes.get(todo.pop(0), self.device)  # tells whether the cache layers are plain
        if not todo or not self.prefixes.plain:
            return
        bases = {p: self.prefixes.base(p, todo) for p in todo}
        while todo:
            pending = set(todo)
            ready = [p for p in todo if bases[p] not in pending]  # every base stored: one level of the prefix tree
            todo = [p for p in todo if bases[p] in pending]
            chunks = [ready[i:i + self.batch_size] for i in range(0, len(ready), self.batch_size)]
            halving_on_oom(lambda chunk: self._prefix_batch(chunk, [len(bases[p]) for p in chunk]), chunks)

    def _prefix_batch(self, prefixes: list[tuple[int, ...]], cached: list[int]) -> list[None]:
        """One forward of `prefixes` after their `cached` stored bases; each row's KV cache (its base and new
        tokens, padding dropped) goes into the prefix store."""
        batch = Batch(self, [list(p) for p in prefixes], cached)
        out = self.model(input_ids=batch.ids, attention_mask=batch.bias(batch.prompt_mask()),
                         position_ids=batch.positions, use_cache=True, logits_to_keep=1,
                         **{self.cache_key: batch.cache})
        self.prefixes.tokens_computed += batch.ids.numel()
        layers = getattr(out, self.cache_key).layers
        # rows with the same padding are cut out of each layer in one copy (their base's keys, then their own), and
        # split into views: a copy per row and layer cost a GPU thousands of launches per pool
        stacked = batch.keys.shape[1] - batch.width  # the bases' keys come first, left-padded to this width
        groups: dict[tuple[int, int], list[int]] = {}
        for row, prefix in enumerate(prefixes):
            groups.setdefault((cached[row], len(prefix) - cached[row]), []).append(row)
        for (base, own), rows in groups.items():
            index = torch.tensor(rows, device=self.device)
            caches = [DynamicCache() for _ in rows]
            for number, layer in enumerate(layers):
                at = index.to(layer.keys.device)  # a split model keeps each layer's cache on that layer's device
                keys, values = (torch.cat([t[at, :, stacked - base:stacked], t[at, :, -own:]], dim=2)
                                for t in (layer.keys, layer.values))
                for cache, k, v in zip(caches, keys.split(1), values.split(1)):
                    cache.update(k, v, number)
            for row, cache in zip(rows, caches):
                self.prefixes.store(prefixes[row], cache)
        return [None] * len(prefixes)

    def _batched(self, fn: Callable[[list[int], list[int]], list[T]], prompts: Sequence[list[int]],
                 extra: int) -> list[T]:
        """fn(prompt indices, their cached prefix lengths) on each batch of the plan; results in prompt order, each
        with its final-token state where a tracer is active."""
        def run(chunk: list[tuple[int, int]]) -> list[tuple[int, T]]:
            rows = [i for i, _ in chunk]
            results = fn(rows, [k for _, k in chunk])  # the tracer holds this forward's states until the next one
            return [(i, r if self._trace is None else replace(r, state=self._trace[j]))
                    for j, (i, r) in enumerate(zip(rows, results))]

        def halved(size: int) -> None:
            self.batch_size = max(1, size)

        chunks = self._chunks(prompts, extra)
        self._fill_prefixes([tuple(prompts[i][:k]) for chunk in chunks for i, k in chunk])
        out: list[T | None] = [None] * len(prompts)
        for i, r in halving_on_oom(run, chunks, halved):
            out[i] = r
        return out  # type: ignore[return-value]

    def generate(self, prompts: Sequence[list[int]], until: Sequence[Until | None] | None = None,
                 sampling: Sampling | None = None, seeds: Sequence[int] | None = None) -> list[Generation]:
        """Continuations of `prompts`: at most max_new_tokens, stopping at EOS or end of turn, or as soon as
        `until[i]` (if given) says the reply of prompt i so far decides its answer. Greedy unless `sampling` says
        otherwise; then prompt i draws from its own random stream `seeds[i]` (see stream_seed), so its sample does
        not depend on the batch it lands in."""
        return self._generate_all(prompts, until, sampling, seeds, None)

    def generate_and_score(self, prompts: Sequence[list[int]], trie: AnswerTrie,
                           until: Sequence[Until | None] | None = None, sampling: Sampling | None = None,
                           seeds: Sequence[int] | None = None) -> list[Generation]:
        """`generate` and `score` of the same prompts with one prompt forward each: the tree-masked forward that
        scores the answer set also gives the first reply token's logits and the prompt's KV cache (the tree's keys
        are cropped before decoding). Each Generation carries its Scores. The trie must have no prefill."""
        if trie.prefill:
            raise ValueError("generate_and_score needs an answer trie without prefill; generate and score apart")
        return self._generate_all(prompts, until, sampling, seeds, trie)

    def _generate_all(self, prompts: Sequence[list[int]], until: Sequence[Until | None] | None,
                      sampling: Sampling | None, seeds: Sequence[int] | None,
                      trie: AnswerTrie | None) -> list[Generation]:
        """Check the per-prompt requests, then decode length-sorted batches (scoring them too with a `trie`)."""
        sampling = sampling or Sampling()
        for name, given in (("until predicates", until), ("seeds", seeds)):
            if given is not None and len(given) != len(prompts):
                raise ValueError(f"{len(given)} {name} for {len(prompts)} prompts; expected one each")
        if not sampling.greedy and seeds is None:
            raise ValueError("sampling needs one seed per prompt (behavioral.inference.engine.stream_seed)")
        return self._batched(
            lambda rows, prefixes: self._generate_batch(
                [prompts[i] for i in rows], prefixes, until and [until[i] for i in rows], sampling,
                seeds and [seeds[i] for i in rows], trie),
            prompts, self.max_new_tokens if trie is None else max(self.max_new_tokens, len(trie)),
        )

    def _next_tokens(self, logits: torch.Tensor, sampling: Sampling, uniforms: torch.Tensor | None) -> torch.Tensor:
        """The next token of each row: the argmax, or a draw by inverse CDF (tokens in id order, so the draw
        depends only on the row's probabilities and its uniform number) from the top-p set at the temperature."""
        if sampling.greedy:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
        if sampling.top_p < 1:
            ranked, order = probs.sort(dim=-1, descending=True)
            drop = ranked.cumsum(dim=-1) - ranked > sampling.top_p
            probs = probs.scatter(-1, order, ranked.masked_fill(drop, 0.0))
        cdf = probs.cumsum(dim=-1)
        target = uniforms.to(cdf.device)[:, None] * cdf[:, -1:]
        return torch.searchsorted(cdf, target).squeeze(1).clamp(max=probs.shape[-1] - 1)

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], prefixes: list[int], until: list[Until | None] | None,
                        sampling: Sampling, seeds: list[int] | None, trie: AnswerTrie | None = None) -> list[Generation]:
        batch = Batch(self, prompts, prefixes)
        n = len(prompts)
        scores: list[Scores | None] = [None] * n
        if trie is None:
            out = self._prompt_forward(
                batch, input_ids=batch.ids, attention_mask=batch.bias(batch.prompt_mask()),
                position_ids=batch.positions, use_cache=True, logits_to_keep=1, **{self.cache_key: batch.cache},
            )
            self.tokens_computed += batch.ids.numel()
            logits, cache = out.logits[:, -1], getattr(out, self.cache_key)
        else:
            scores, logits, cache = self._tree_read(batch, trie, use_cache=True)
        keys, position = batch.keys, batch.next_position
        uniforms = None
        if not sampling.greedy:  # [n, max_new_tokens]: row r's stream, one number per step
            uniforms = torch.stack([torch.rand(self.max_new_tokens, generator=torch.Generator().manual_seed(s),
                                               dtype=torch.float64) for s in seeds])
        replies: list[list[int]] = [[] for _ in range(n)]
        truncated = [False] * n
        alive = list(range(n))  # rows still decoding, in batch order
        stops = set(self.stop_ids)
        for step in range(self.max_new_tokens):
            token = self._next_tokens(logits, sampling, None if uniforms is None else uniforms[alive, step])
            token = token.to(self.device)  # a split model's head may sit on another device than the batch
            finished = set()
            for j, (row, t) in enumerate(zip(alive, token.tolist())):
                if t in stops:
                    finished.add(j)
                    continue
                replies[row].append(t)
                check = until[row] if until else None
                if check is not None and check(self.tokenizer.decode(replies[row], skip_special_tokens=True)):
                    finished.add(j)
            if step == self.max_new_tokens - 1:
                for j, row in enumerate(alive):
                    truncated[row] = j not in finished
                break
            if len(finished) == len(alive):
                break
            if finished:  # finished rows leave the batch
                keep = torch.tensor([j for j in range(len(alive)) if j not in finished], device=self.device)
                alive = [alive[j] for j in keep.tolist()]
                token, keys, position = token[keep], keys[keep], position[keep]
                cache.reorder_cache(keep)  # each layer's rows picked on that layer's device
            keys = torch.cat([keys, torch.ones(len(alive), 1, dtype=torch.bool, device=self.device)], dim=1)
            logits = self.model(
                input_ids=token[:, None], attention_mask=batch.bias(keys[:, None, :]), position_ids=position[:, None],
                use_cache=True, **{self.cache_key: cache},
            ).logits[:, -1]
            position = position + 1
            self.tokens_computed += len(alive)
        return [Generation(self.tokenizer.decode(r, skip_special_tokens=True), t, sc)
                for r, t, sc in zip(replies, truncated, scores)]

    def score(self, prompts: Sequence[list[int]], trie: AnswerTrie) -> list[Scores]:
        """The distribution of each prompt's answer over the trie's answer set (after its prefill, if any), read in
        one tree-masked forward."""
        prompts = [list(p) + list(trie.prefill) for p in prompts]
        return self._batched(lambda rows, prefixes: self._score_batch([prompts[i] for i in rows], prefixes, trie),
                             prompts, len(trie))

    @torch.inference_mode()
    def _score_batch(self, prompts: list[list[int]], prefixes: list[int], trie: AnswerTrie) -> list[Scores]:
        return self._tree_read(Batch(self, prompts, prefixes), trie, use_cache=False)[0]

    def _tree_read(self, batch: Batch, trie: AnswerTrie, use_cache: bool):
        """The batch's answer-tree scores, with `use_cache` also the first reply token's logits [B, V] and the
        prompt's KV cache (no tree keys): lazily (`_lazy_read`) or the whole tree in the prompt's forward."""
        if self.answer_tree.lazy_for(trie):
            return self._lazy_read(batch, trie, use_cache)
        if self.head is None:
            out = self.tree_forward(batch, trie, use_cache)
            scores, first = trie.read(out.logits), out.logits[:, 0]
        else:
            with head_inputs(self.head) as caught:
                out = self.tree_forward(batch, trie, use_cache)
            hidden = caught[-1]  # [B, 1 + T, d]
            first = self.head(hidden[:, 0]) if use_cache else None
            scores = trie.read(trie.reduce_hidden(hidden, self.head))
        cache = getattr(out, self.cache_key)
        if use_cache:
            cache.crop(-len(trie))  # the tree's keys; decoding continues after the prompt
        return scores, first, cache

    def _lazy_read(self, batch: Batch, trie: AnswerTrie, use_cache: bool):
        """`_tree_read` through the prompt's own forward, then rounds of the nodes behavioral.inference.lazy_tree.expansion
        picks (each attends to its prompt and its ancestors, whose keys earlier rounds left in a copy of the cache),
        until none is picked."""
        n, t = batch.ids.shape[0], len(trie)
        out = self._prompt_forward(
            batch, input_ids=batch.ids, attention_mask=batch.bias(batch.prompt_mask()), position_ids=batch.positions,
            use_cache=True, logits_to_keep=1, **{self.cache_key: batch.cache},
        )
        self.tokens_computed += batch.ids.numel()
        first, cache = out.logits[:, -1], getattr(out, self.cache_key)
        tree = _widened(trie.reduce(first[:, None]), 1 + t)
        computed = torch.zeros(n, 1 + t, dtype=torch.bool, device=tree.lse.device)
        computed[:, 0] = True
        grown = extendable(cache) if use_cache else cache
        nodes = torch.empty(n, 0, dtype=torch.long, device=self.device)  # the node of each tree key so far, -1 pad
        while True:
            reading = trie.reading(tree, computed)
            chosen = expansion(trie, reading, tree, computed, self.answer_tree.tolerance)
            if not chosen.any():
                return trie.read(tree, computed, reading), first, cache
            picked, logits = self._tree_round(batch, trie, chosen.to(self.device), nodes, grown)
            real = picked >= 0
            rows = torch.arange(n, device=self.device)[:, None].expand_as(picked)[real].to(computed.device)
            positions = picked[real].to(computed.device) + 1
            for name in TREE_FIELDS:
                getattr(tree, name)[rows, positions] = getattr(logits, name)[real.to(computed.device)]
            computed[rows, positions] = True
            nodes = torch.cat([nodes, picked], dim=1)

    def _tree_round(self, batch: Batch, trie: AnswerTrie, chosen: torch.Tensor, nodes: torch.Tensor,
                    cache) -> tuple[torch.Tensor, TreeLogits]:
        """One forward of each row's `chosen` [B, T] nodes after its prompt and the tree keys already in `cache`
        (`nodes`: their node ids, -1 for padding): the nodes placed [B, W] (-1 for padding) and their reduced
        logits."""
        n, width = chosen.shape[0], int(chosen.sum(1).max())
        order = torch.argsort((~chosen).to(torch.int8), dim=1, stable=True)[:, :width]  # chosen nodes first
        real = chosen.gather(1, order)
        ancestry = trie.ancestry.to(self.device)[order]  # [B, W, T]: each query's ancestors and itself
        earlier = ancestry.gather(2, nodes.clamp(min=0)[:, None, :].expand(n, width, nodes.shape[1]))
        own = torch.eye(width, dtype=torch.bool, device=self.device).expand(n, width, width)
        allowed = torch.cat([batch.keys[:, None, :].expand(n, width, -1), earlier & (nodes >= 0)[:, None, :]],
                            dim=2) & real[:, :, None]
        kwargs = dict(input_ids=trie.tokens.to(self.device)[order].masked_fill(~real, self.pad_id),
                      attention_mask=batch.bias(torch.cat([allowed, own], dim=2)),
                      position_ids=batch.next_position[:, None] + trie.depth.to(self.device)[order] - 1,
                      use_cache=True, logits_to_keep=width, **{self.cache_key: cache})
        self.tokens_computed += n * width
        picked = order.masked_fill(~real, -1)
        if self.head is None:
            return picked, trie.reduce(self.model(**kwargs).logits)
        with head_inputs(self.head) as caught:
            self.model(**kwargs)
        return picked, trie.reduce_hidden(caught[-1], self.head)

    def tree_forward(self, batch: Batch, trie: AnswerTrie, use_cache: bool):
        """The batch's prompts and the answer tree in one forward (each node sees its prompt and its ancestors);
        logits at the last prompt position and after every node; `use_cache` keeps the KV cache, tree included."""
        n, w, t = batch.ids.shape[0], batch.width, len(trie)
        tree = trie.tokens.to(self.device)
        input_ids = torch.cat([batch.ids, tree.expand(n, t)], dim=1)
        positions = torch.cat([batch.positions, batch.next_position[:, None] + trie.depth.to(self.device) - 1], dim=1)
        n_keys = batch.keys.shape[1] + t
        allowed = torch.zeros(n, w + t, n_keys, dtype=torch.bool, device=self.device)
        allowed[:, :w, :-t] = batch.prompt_mask()
        allowed[:, w:, :-t] = batch.keys[:, None, :]
        allowed[:, w:, -t:] = trie.ancestry.to(self.device)
        out = self._prompt_forward(
            batch, input_ids=input_ids, attention_mask=batch.bias(allowed), position_ids=positions,
            use_cache=use_cache or batch.cache is not None, logits_to_keep=t + 1, **{self.cache_key: batch.cache},
        )
        self.tokens_computed += input_ids.numel()
        return out
