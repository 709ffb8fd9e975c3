"""What an answer trie reads from the logits at the prompt's end and after each tree node, without the full-vocabulary
logits: normalisers, the trie tokens' logits and each position's top tokens, reduced from the output head's input a
vocabulary slice at a time (a whole [B, 1 + T, V] float32 tensor is 13 GB at B = 256, T = 101, V = 128k)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ContextManager

import torch
from torch import nn

READ_BYTES = 2**30  # float32 logits computed or read at a time


@dataclass(frozen=True)
class TreeLogits:
    """Per row and logit position [B, P]: `lse` over the whole output (padding rows included), `lse_stops` over the
    tokens that do not continue a word or number already begun (padding rows included: the mass where an answer may
    end, read directly, as 1 minus the continuing mass cannot be resolved in float32 where an ending is rare) and
    `lse_starts` over the tokens that start an answer; `columns` [B, P, U] the logits of the trie's distinct tokens
    (`vocab`, ascending); `top_values`, `top_indices` [B, P, k] each position's k best tokens."""

    vocab: torch.Tensor
    lse: torch.Tensor
    lse_stops: torch.Tensor
    lse_starts: torch.Tensor
    columns: torch.Tensor
    top_values: torch.Tensor
    top_indices: torch.Tensor

    @classmethod
    def of(cls, logits: torch.Tensor, vocab: torch.Tensor, continues: torch.Tensor, starts: torch.Tensor,
           k: int) -> "TreeLogits":
        """The reduction of full logits [B, P, V] (differentiable, for attribution)."""
        logits = logits.float()
        device = logits.device
        return cls(vocab.to(device), torch.logsumexp(logits, dim=-1),
                   _outside_lse(logits, continues.to(device)), _subset_lse(logits, starts.to(device)),
                   logits[:, :, vocab.to(device)], *logits.topk(k, dim=-1))

    @classmethod
    @torch.no_grad()
    def of_hidden(cls, hidden: torch.Tensor, head: nn.Linear, vocab: torch.Tensor, continues: torch.Tensor,
                  starts: torch.Tensor, k: int) -> "TreeLogits":
        """The same reduction from the output head's input [B, P, d], the head's rows a slice at a time (each slice's
        logits in the head's dtype, then float32, as the model's own logits would be), on the head's device."""
        with _loaded(head):
            return cls._of_weights(hidden, head.weight, head.bias, vocab, continues, starts, k)

    @classmethod
    def _of_weights(cls, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, vocab: torch.Tensor,
                    continues: torch.Tensor, starts: torch.Tensor, k: int) -> "TreeLogits":
        """`of_hidden` through a head's weight [V, d] and bias."""
        hidden = hidden.to(weight.device)
        device, (n, p, _), v = weight.device, hidden.shape, weight.shape[0]
        step = max(k, READ_BYTES // (4 * n * p))
        lse = lse_stops = lse_starts = torch.full((n, p), float("-inf"), device=device)
        top_values = torch.empty(n, p, 0, device=device)
        top_indices = torch.empty(n, p, 0, dtype=torch.long, device=device)
        continues, starts = continues.to(device), starts.to(device)
        for lo in range(0, v, step):
            chunk = nn.functional.linear(hidden, weight[lo:lo + step], None if bias is None else bias[lo:lo + step])
            chunk = chunk.float()
            lse = torch.logaddexp(lse, torch.logsumexp(chunk, dim=-1))
            lse_stops = torch.logaddexp(lse_stops, _outside_lse(chunk, continues[lo:lo + step]))
            lse_starts = torch.logaddexp(lse_starts, _subset_lse(chunk, starts[lo:lo + step]))
            values, indices = chunk.topk(min(k, chunk.shape[-1]), dim=-1)
            top_values, order = torch.cat([top_values, values], dim=-1).topk(
                min(k, top_values.shape[-1] + values.shape[-1]), dim=-1)
            top_indices = torch.cat([top_indices, indices + lo], dim=-1).gather(-1, order)
        vocab = vocab.to(device)
        columns = nn.functional.linear(hidden, weight[vocab], None if bias is None else bias[vocab]).float()
        return cls(vocab, lse, lse_stops, lse_starts, columns, top_values, top_indices)


def _loaded(module: nn.Module) -> ContextManager:
    """A block in which `module`'s weights sit on its execution device: accelerate keeps an offloaded module's on
    meta between forwards (a model split over devices with cpu or disk entries); any other module is left as it is."""
    if not getattr(getattr(module, "_hf_hook", None), "offload", False):
        return contextlib.nullcontext()
    from accelerate.utils import align_module_device

    return align_module_device(module)


def _subset_lse(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """logsumexp over the columns `mask` marks (a mask over the first ids; columns past it are outside)."""
    return torch.logsumexp(logits[..., :len(mask)][..., mask], dim=-1)


def _outside_lse(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """logsumexp over the columns `mask` does not mark, those past its end included."""
    outside = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
    outside[:len(mask)] = ~mask[:logits.shape[-1]]
    return torch.logsumexp(logits.masked_fill(~outside, float("-inf")), dim=-1)


def output_head(model, device) -> nn.Linear | None:
    """The model's output head where its logits are exactly head(its decoder's last hidden state) (checked once on
    a short input, without hooks: no soft-capping or scaling after the head), else None (also where the check's
    logits are all zero and prove nothing)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if not isinstance(head, nn.Linear) or decoder is None or decoder is model:
        return None
    ids = (torch.arange(1, 4, device=device) % head.weight.shape[0])[None]  # not 0: often padding, embedded as zeros
    with torch.inference_mode():
        logits = model(input_ids=ids).logits.float()
        hidden = getattr(decoder(input_ids=ids), "last_hidden_state", None)
        if hidden is None:
            return None
        same = torch.equal(head(hidden).float().to(logits.device), logits)  # a split model's head may sit elsewhere
    return head if same and bool(logits.abs().max() > 0) else None


@contextlib.contextmanager
def head_inputs(head: nn.Linear) -> Iterator[list[torch.Tensor]]:
    """Inside the block the head computes no logits: it keeps its input (appended to the yielded list) and returns a
    [..., 1] placeholder."""
    caught: list[torch.Tensor] = []
    saved = head.__dict__.get("forward")  # an accelerate hook may have replaced the method

    def keep(hidden: torch.Tensor) -> torch.Tensor:
        caught.append(hidden)
        return hidden[..., :1]

    head.forward = keep
    try:
        yield caught
    finally:
        if saved is None:
            del head.forward
        else:
            head.forward = saved
