"""The inference engine: batched greedy generation and answer-trie scoring of chat prompts (token ids in, answers out)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from behavioral.answer_trie import AnswerTrie, Scores

END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")

T = TypeVar("T")


class EngineError(ValueError):
    """A model or tokenizer the engine cannot run as asked."""


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
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, seq in enumerate(batch):
        ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq):] = 1
    return ids.to(device), mask.to(device)


class Engine:
    """Runs prompts through a causal LM in batches; halves the batch and retries on CUDA out-of-memory."""

    def __init__(self, model, tokenizer, batch_size: int = 16, max_new_tokens: int = 8):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.device = next(model.parameters()).device
        self.pad_id = pad_token_id(tokenizer)
        self.stop_ids = stop_token_ids(model, tokenizer)
        self._prefix = None

    def _batched(self, fn: Callable[[Sequence[list[int]]], list[T]], prompts: Sequence[list[int]]) -> list[T]:
        out: list[T] = []
        start = 0
        while start < len(prompts):
            chunk = prompts[start:start + self.batch_size]
            try:
                out.extend(fn(chunk))
            except torch.cuda.OutOfMemoryError:
                if self.batch_size == 1:
                    raise
                torch.cuda.empty_cache()
                self.batch_size //= 2
                continue
            start += len(chunk)
        return out

    def generate(self, prompts: Sequence[list[int]]) -> list[str]:
        """Greedy continuations of `prompts` (at most max_new_tokens, stopping at EOS or end of turn)."""
        return self._batched(self._generate_batch, prompts)

    @torch.inference_mode()
    def _generate_batch(self, batch: Sequence[list[int]]) -> list[str]:
        ids, mask = left_pad(batch, self.pad_id, self.device)
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=self.max_new_tokens,
            eos_token_id=self.stop_ids, pad_token_id=self.pad_id, temperature=None, top_p=None, top_k=None,
        )
        return self.tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)

    def score(self, prompts: Sequence[list[int]], trie: AnswerTrie) -> list[Scores]:
        """The distribution of each prompt's answer over the trie's answers, read in one tree-masked forward."""
        return self._batched(lambda batch: self._score_batch(batch, trie), prompts)

    @torch.inference_mode()
    def _prefix_cache(self, prefix: tuple[int, ...]):
        """The KV cache of a shared prefix (batch of one), computed once and kept while prompts keep sharing it."""
        if self._prefix is None or self._prefix[0] != prefix:
            ids = torch.tensor([prefix], device=self.device)
            self._prefix = (prefix, self.model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values)
        return self._prefix[1]

    @torch.inference_mode()
    def _score_batch(self, batch: Sequence[list[int]], trie: AnswerTrie) -> list[Scores]:
        """Layout per row: [shared prefix (cached) | left padding | rest of the prompt | answer tree]."""
        n_prefix = shared_prefix_length(batch)
        suffixes = [ids[n_prefix:] for ids in batch]
        ids, mask = left_pad(suffixes, self.pad_id, self.device)
        n, width, t = len(batch), ids.shape[1], len(trie)
        lengths = mask.sum(dim=1)
        input_ids = torch.cat([ids, trie.tokens.to(self.device).expand(n, t)], dim=1)
        positions = torch.cat([
            n_prefix + (mask.cumsum(dim=1) - 1).clamp(min=0),
            n_prefix + lengths[:, None] + trie.depth.to(self.device)[None, :] - 1,
        ], dim=1)
        real = mask[:, None, :].bool()
        allowed = torch.zeros(n, width + t, n_prefix + width + t, dtype=torch.bool, device=self.device)
        allowed[:, :, :n_prefix] = True
        own = allowed[:, :, n_prefix:]
        own[:, :width, :width] = torch.tril(torch.ones(width, width, dtype=torch.bool, device=self.device)) & real
        own[:, width:, :width] = real
        own[:, width:, width:] = trie.ancestry.to(self.device)
        own |= torch.eye(width + t, dtype=torch.bool, device=self.device)  # pad rows attend to themselves
        cache = None
        if n_prefix:
            cache = copy.deepcopy(self._prefix_cache(tuple(batch[0][:n_prefix])))
            cache.batch_repeat_interleave(n)
        dtype = next(self.model.parameters()).dtype
        bias = torch.zeros(allowed.shape, dtype=dtype, device=self.device).masked_fill(~allowed, torch.finfo(dtype).min)
        logits = self.model(
            input_ids=input_ids, attention_mask=bias[:, None], position_ids=positions, past_key_values=cache,
            use_cache=cache is not None, logits_to_keep=t + 1,
        ).logits
        return trie.read(logits)


def shared_prefix_length(batch: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix all prompts share, leaving each at least one token of its own."""
    first = batch[0]
    limit = min(len(ids) for ids in batch) - 1
    n = 0
    while n < limit and all(ids[n] == first[n] for ids in batch):
        n += 1
    return n
