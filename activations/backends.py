"""The same residual-stream capture through the libraries users work in: plain torch hooks, nnsight, TransformerLens.

``capture(model, tokenizer, prompts, positions, layers, backend)`` returns float32 [n_hooks, n_prompts, P, d] with
hooks named as in ``capture.hook_names`` (``hook_embed``, ``blocks.{l}.hook_resid_post``) for all three backends, so
a script written against one can be checked against another. The prompts are token id lists; each batch is
left-padded with an attention mask and mask-derived position ids (the position of a token is its index in its own
prompt), so padding is invisible: a padded row equals the same prompt run alone up to float rounding.

- ``"torch"``: ``capture.resid_post`` (forward hooks on the HF modules; the fast path the engine uses).
- ``"nnsight"``: ``nnsight.TransformersModel(model, tokenizer=...)`` (nnsight 0.8: ``LanguageModel`` is a deprecated
  alias of it), reading ``<embedding>.output`` and ``<layer>.output`` (its first item where it is a tuple) inside
  ``.trace(input_ids=..., attention_mask=..., position_ids=...)``. nnsight installs a controller as every module's
  ``forward`` and leaves it there; this backend removes what it installed when it is done, and hands nnsight a copy
  of the tokenizer (nnsight sets the tokenizer's padding side).
- ``"transformer_lens"``: ``TransformerBridge.boot_transformers(name, hf_model=<deep copy>, tokenizer=<copy>)``
  (TransformerLens 4) and ``bridge.run_with_cache(ids, names_filter=names, attention_mask=..., position_ids=...)``.
  Booting replaces submodules of the model it is given and switches it to eager attention, so it gets a deep copy
  (twice the weights in memory while it runs). Token ids go in as a tensor, so no BOS is prepended.

Numerics: on a model in eager attention the three agree bit for bit (tiny Llama and SmolLM2-135M, fp32). The bridge
always computes attention eagerly (switching its copy back to sdpa changes nothing), so against a model loaded with
sdpa it differs by fp32 rounding: about 7e-7 of a hook's largest value, which is 3.7e-4 in absolute terms on
SmolLM2, whose residual stream reaches ~700. Compare backends on an eager model, or relative to the hook's scale.

The last layer's ``hook_resid_post`` is before the final norm in all three (see ``activations.capture``).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from activations.capture import Layers, decoder_layers, embedding, gather, hidden_of, hook_layer, hook_names, \
    resid_post
from behavioral.inference.engine import left_pad, pad_token_id
from behavioral.core.extras import require

BACKENDS = ("torch", "nnsight", "transformer_lens")


def _padded_positions(prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """[B, P] indices into the left-padded batch for positions in each unpadded prompt (negative: from its end)."""
    if len(positions) != len(prompts):
        raise ValueError(f"{len(positions)} position lists for {len(prompts)} prompts")
    counts = {len(p) for p in positions}
    if len(counts) != 1:
        raise ValueError(f"every prompt needs the same number of positions, got {sorted(counts)}")
    out = []
    for i, (prompt, pos) in enumerate(zip(prompts, positions)):
        n = len(prompt)
        row = []
        for p in pos:
            if not -n <= p < n:
                raise ValueError(f"position {p} out of range for prompt {i} of {n} tokens")
            row.append(width - n + (p % n))
        out.append(row)
    return torch.tensor(out, dtype=torch.long)


def _batch(model: nn.Module, tokenizer, prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]):
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad_token_id(tokenizer), device)
    mask = mask.long()
    position_ids = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return ids, mask, position_ids, _padded_positions(prompts, positions, ids.shape[1]).to(device)


def _module_path(model: nn.Module, module: nn.Module) -> str:
    for name, candidate in model.named_modules():
        if candidate is module:
            return name
    raise ValueError(f"module {type(module).__name__} is not part of {type(model).__name__}")


def _envoy(root, path: str):
    for name in path.split("."):
        root = root[int(name)] if name.isdigit() else getattr(root, name)
    return root


@contextmanager
def nnsight_model(model: nn.Module, tokenizer) -> Iterator:
    """``nnsight.TransformersModel`` around a loaded HF model, with nnsight's module instrumentation removed on exit.

    nnsight 0.8 puts a controller into each module's ``__dict__`` as ``forward`` (plus its ``__nnsight__`` state)
    and leaves it there; modules nnsight had not instrumented before are restored to their class ``forward``.
    """
    nnsight = require("nnsight", "the nnsight capture backend")
    wrapper_class = getattr(nnsight, "TransformersModel", None) or nnsight.LanguageModel
    fresh = [m for m in model.modules() if "__nnsight__" not in m.__dict__]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=getattr(nnsight, "NNsightDeprecationWarning", FutureWarning))
            yield wrapper_class(model, tokenizer=copy.deepcopy(tokenizer))
    finally:
        for module in fresh:
            module.__dict__.pop("__nnsight__", None)
            module.__dict__.pop("forward", None)


def transformer_lens_bridge(model: nn.Module, tokenizer):
    """A TransformerLens 4 ``TransformerBridge`` over a deep copy of ``model`` (booting modifies its model in place)."""
    bridge = require("transformer_lens.model_bridge", "the TransformerLens capture backend").TransformerBridge
    parameter = next(model.parameters())
    name = getattr(model, "name_or_path", "") or type(model).__name__
    return bridge.boot_transformers(
        name, hf_model=copy.deepcopy(model), tokenizer=copy.deepcopy(tokenizer),
        device=str(parameter.device), dtype=parameter.dtype,
    )


def _chunks(n: int, size: int | None) -> list[range]:
    size = size or n
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def capture(model: nn.Module, tokenizer, prompts: list[list[int]], positions: list[list[int]],
            layers: Layers | None = None, backend: str = "torch", batch_size: int | None = 16) -> np.ndarray:
    """Residual stream at chosen tokens: float32 [n_hooks, n_prompts, P, d], hooks in ``hook_names`` order.

    ``prompts`` are token id lists (run as they are: no BOS is added); ``positions[i]`` are P indices into the
    unpadded prompt i (negative counts from its end). Prompts run in left-padded batches of ``batch_size``
    (None: one batch).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if not prompts:
        raise ValueError("no prompts to capture")
    n_layers = len(decoder_layers(model))
    names = hook_names(n_layers, layers)
    chosen = [hook_layer(name) for name in names[1:]]
    runner = {"torch": _torch_runner, "nnsight": _nnsight_runner, "transformer_lens": _tl_runner}[backend]
    parts = []
    with runner(model, tokenizer, names, chosen) as run:
        for chunk in _chunks(len(prompts), batch_size):
            batch_prompts = [prompts[i] for i in chunk]
            ids, mask, position_ids, pos = _batch(model, tokenizer, batch_prompts, [positions[i] for i in chunk])
            with torch.inference_mode():
                parts.append(run(ids, mask, position_ids, pos).float().cpu())
    return torch.cat(parts, dim=1).numpy()


@contextmanager
def _torch_runner(model, tokenizer, names, layers):
    def run(ids, mask, position_ids, pos):
        return resid_post(model, ids, mask, positions=pos, layers=layers, position_ids=position_ids)
    yield run


@contextmanager
def _nnsight_runner(model, tokenizer, names, layers):
    embed_path = _module_path(model, embedding(model))
    layers_path = _module_path(model, decoder_layers(model))
    with nnsight_model(model, tokenizer) as lm:
        def run(ids, mask, position_ids, pos):
            saved: dict = {}  # only the chosen tokens are saved: [B, P, d] per hook
            with lm.trace(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False):
                saved["embed"] = gather(_envoy(lm, embed_path).output, pos).save()
                blocks = _envoy(lm, layers_path)
                for layer in sorted(set(layers)):  # in forward order: nnsight serves outputs as the model runs
                    saved[layer] = gather(hidden_of(blocks[layer].output), pos).save()
            return torch.stack([saved["embed"]] + [saved[layer] for layer in layers])
        yield run


@contextmanager
def _tl_runner(model, tokenizer, names, layers):
    bridge = transformer_lens_bridge(model, tokenizer)

    def run(ids, mask, position_ids, pos):
        _, cache = bridge.run_with_cache(ids, names_filter=names, attention_mask=mask, position_ids=position_ids,
                                         return_type=None)
        return torch.stack([gather(cache[name], pos) for name in names])
    yield run
