"""Residual-stream capture with plain torch forward hooks: the fast path, and the one the engine uses.

In the style of baukit's TraceDict, with TransformerLens's hook names:

- ``hook_embed``: the token embedding's output (before any scaling or position embedding the model adds after it),
- ``blocks.{l}.hook_resid_post``: the output hidden states of decoder layer ``l``.

Relation to Hugging Face's ``output_hidden_states`` (a tuple of L + 1 tensors for L decoder layers):

- ``hook_embed`` equals ``hidden_states[0]`` for Llama, Qwen2, Mistral and SmolLM2. It differs where the model changes
  the embedding before the first layer: Gemma multiplies it by sqrt(d_model) in the model's forward (Gemma 3's
  scaled embedding module already includes the factor), GPT-2 adds position embeddings (TransformerLens names those
  ``hook_pos_embed``).
- ``blocks.{l}.hook_resid_post`` equals ``hidden_states[l + 1]`` for every layer but the last.
- ``blocks.{L-1}.hook_resid_post`` is the last layer's output BEFORE the final norm, as in TransformerLens; HF's
  ``hidden_states[L]`` (``hidden_states[-1]``) is taken AFTER the final norm, so the two differ.

Stored tensors are detached, not cloned: HF decoders never modify hidden states in place. With ``positions`` only
the rows' chosen tokens are kept, [B, P, d] per hook instead of the whole [B, T, d] sequence.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Sequence

import torch
from torch import nn

EMBED = "hook_embed"

# Where the decoder layer list sits in common HF causal LMs (checked in order).
_LAYER_PATHS = (
    "model.layers",  # Llama, Qwen2/3, Mistral, Gemma 1/2/3 text, SmolLM2, Phi-3, OLMo
    "model.language_model.layers",  # multimodal wrappers (Gemma 3, Llava, Mistral 3)
    "language_model.model.layers",
    "transformer.h",  # GPT-2, GPT-J, Falcon, Bloom
    "gpt_neox.layers",  # Pythia, GPT-NeoX
    "model.decoder.layers",  # OPT
    "transformer.blocks",  # MPT
    "transformer.layers",
    "layers",  # a bare decoder (LlamaModel, ...)
    "h",
)
_EMBED_PATHS = (
    "model.embed_tokens",
    "model.language_model.embed_tokens",
    "language_model.model.embed_tokens",
    "transformer.wte",
    "gpt_neox.embed_in",
    "model.decoder.embed_tokens",
    "transformer.word_embeddings",
    "embed_tokens",
    "wte",
)


def hook_names(n_layers: int, layers: Sequence[int] | None = None) -> list[str]:
    """``hook_embed`` then ``blocks.{l}.hook_resid_post`` for the chosen layers (None: all ``n_layers``)."""
    chosen = range(n_layers) if layers is None else _check_layers(layers, n_layers)
    return [EMBED] + [f"blocks.{l}.hook_resid_post" for l in chosen]


def parse_layers(spec: str, n_layers: int) -> list[int]:
    """Layers from a CLI string: ``"all"`` or comma-separated indices such as ``"0,4,8"`` (sorted, deduplicated)."""
    text = spec.strip().lower()
    if text == "all":
        return list(range(n_layers))
    valid = f"valid layers are 0..{n_layers - 1} or 'all'"
    parts = [p.strip() for p in text.split(",")]
    if not text or any(not p for p in parts):
        raise ValueError(f"malformed layer list {spec!r}: {valid}")
    layers = set()
    for part in parts:
        try:
            layer = int(part)
        except ValueError:
            raise ValueError(f"malformed layer {part!r} in {spec!r}: {valid}") from None
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer} out of range in {spec!r}: {valid}")
        layers.add(layer)
    return sorted(layers)


def _check_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    out = []
    for layer in layers:
        try:
            index = operator.index(layer)  # ints, numpy and 0-d torch integers; not floats or strings
        except TypeError:
            index = None
        if index is None or isinstance(layer, bool) or not 0 <= index < n_layers:
            raise ValueError(f"layer {layer!r} out of range: valid layers are 0..{n_layers - 1}")
        out.append(index)
    return out


def _get_path(root, path: str):
    obj = root
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layer ModuleList of an HF causal LM (model.model.layers, transformer.h, ...)."""
    for path in _LAYER_PATHS:
        found = _get_path(model, path)
        if isinstance(found, nn.ModuleList) and len(found):
            return found
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__} (looked for {', '.join(_LAYER_PATHS)})")


def embedding(model: nn.Module) -> nn.Module:
    """The token embedding of an HF causal LM (model.model.embed_tokens, else get_input_embeddings(), ...)."""
    found = _get_path(model, "model.embed_tokens")
    if isinstance(found, nn.Module):
        return found
    getter = getattr(model, "get_input_embeddings", None)
    if getter is not None:
        try:
            found = getter()
        except (NotImplementedError, AttributeError):
            found = None
        if isinstance(found, nn.Module):
            return found
    for path in _EMBED_PATHS:
        found = _get_path(model, path)
        if isinstance(found, nn.Module):
            return found
    raise ValueError(f"cannot find the token embedding of {type(model).__name__}")


def n_layers_of(model: nn.Module) -> int:
    """Number of decoder layers."""
    return len(decoder_layers(model))


def _hidden(output):
    """The hidden states of a module output: the tensor itself, or the first item of a tuple / ModelOutput."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    first = getattr(output, "last_hidden_state", None)
    if isinstance(first, torch.Tensor):
        return first
    raise TypeError(f"cannot read hidden states from a module output of type {type(output).__name__}")


class ResidualTrace:
    """Context manager: forward hooks on the embedding and the chosen decoder layers, outputs kept by hook name.

    >>> with ResidualTrace(model, layers=[0, 3], positions=pos) as trace:
    ...     model(input_ids=ids, attention_mask=mask)
    >>> trace.stacked().shape  # [3, B, P, d]: hook_embed, blocks.0.hook_resid_post, blocks.3.hook_resid_post

    ``positions`` [B, P] (or [P], the same for every row) indexes the sequence of the forward's input; only those
    tokens are kept. A module called more than once inside the block (generation) keeps its last call.
    Every hook is removed on exit, also when the block raises.
    """

    def __init__(self, model: nn.Module, layers: Sequence[int] | None = None, positions: torch.Tensor | None = None):
        self.model = model
        blocks = decoder_layers(model)
        self.layers = list(range(len(blocks))) if layers is None else _check_layers(layers, len(blocks))
        self.names = hook_names(len(blocks), self.layers)
        self.modules: dict[str, nn.Module] = {EMBED: embedding(model)}
        for layer, name in zip(self.layers, self.names[1:]):
            self.modules[name] = blocks[layer]
        if positions is not None:
            positions = torch.as_tensor(positions, dtype=torch.long)
            if positions.ndim not in (1, 2):
                raise ValueError(f"positions must be [B, P] or [P], got shape {tuple(positions.shape)}")
        self.positions = positions
        self.activations: dict[str, torch.Tensor] = {}
        self._handles: list = []

    def _keep(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden.detach()
        if self.positions is None:
            return hidden
        pos = self.positions.to(hidden.device)
        if pos.ndim == 1:
            return hidden[:, pos]
        if pos.shape[0] != hidden.shape[0]:
            raise ValueError(f"positions has {pos.shape[0]} rows for a batch of {hidden.shape[0]}")
        rows = torch.arange(hidden.shape[0], device=hidden.device)[:, None]
        return hidden[rows, pos]

    def _hook(self, name: str):
        def hook(module, args, output):
            self.activations[name] = self._keep(_hidden(output))
        return hook

    def __enter__(self) -> "ResidualTrace":
        self.activations = {}
        try:
            for name, module in self.modules.items():
                self._handles.append(module.register_forward_hook(self._hook(name)))
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Remove every hook this trace registered."""
        while self._handles:
            self._handles.pop().remove()

    def __exit__(self, *exc) -> None:
        self.remove()

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.activations[name]

    def stacked(self) -> torch.Tensor:
        """[n_hooks, B, P or T, d] in hook order (``self.names``)."""
        missing = [n for n in self.names if n not in self.activations]
        if missing:
            raise RuntimeError(f"no forward reached {', '.join(missing)}")
        return torch.stack([self.activations[n] for n in self.names])


def _accepts(model: nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def resid_post(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               positions: torch.Tensor | None = None, layers: Sequence[int] | None = None,
               **forward_kwargs) -> torch.Tensor:
    """One forward under a ResidualTrace; [n_hooks, B, P or T, d] in ``hook_names`` order.

    ``forward_kwargs`` go to the model unchanged (position_ids, a 4-D additive mask as ``attention_mask``,
    past_key_values), so the engine's batch layout works; ``positions`` then index the tokens of this forward.
    Without a cache no KV cache is built, and only the last position's logits are computed where the model allows.
    """
    if "past_key_values" not in forward_kwargs:
        forward_kwargs.setdefault("use_cache", False)
    if "logits_to_keep" not in forward_kwargs and _accepts(model, "logits_to_keep"):
        forward_kwargs["logits_to_keep"] = 1
    with torch.inference_mode(), ResidualTrace(model, layers, positions) as trace:
        model(input_ids=input_ids, attention_mask=attention_mask, **forward_kwargs)
    return trace.stacked()
