"""Reading and editing the residual stream with plain torch forward hooks: the fast path, and the one the engine uses.

One primitive, ``ResidualHooks``, in the style of baukit's ``TraceDict(retain_output=..., edit_output=...)``: forward
hooks on residual-stream points that keep their output, replace it, or both. Capture (``ResidualTrace``,
``resid_post``), steering and patching are all built on it. Points are layer indices, named as TransformerLens names
them (``hook_name`` / ``hook_layer`` convert):

- ``EMBED_LAYER`` (-1), ``hook_embed``: the token embedding's output (before any scaling or position embedding the
  model adds after it),
- ``l``, ``blocks.{l}.hook_resid_post``: the output hidden states of decoder layer ``l``.

Relation to Hugging Face's ``output_hidden_states`` (a tuple of L + 1 tensors for L decoder layers):

- ``hook_embed`` equals ``hidden_states[0]`` for Llama, Qwen2, Mistral and SmolLM2. It differs where the model changes
  the embedding before the first layer: Gemma multiplies it by sqrt(d_model) in the model's forward (Gemma 3's
  scaled embedding module already includes the factor), GPT-2 adds position embeddings (TransformerLens names those
  ``hook_pos_embed``).
- ``blocks.{l}.hook_resid_post`` equals ``hidden_states[l + 1]`` for every layer but the last.
- ``blocks.{L-1}.hook_resid_post`` is the last layer's output BEFORE the final norm, as in TransformerLens; HF's
  ``hidden_states[L]`` (``hidden_states[-1]``) is taken AFTER the final norm, so the two differ.

Kept tensors are detached, not cloned: HF decoders never modify hidden states in place. With ``positions`` only
the rows' chosen tokens are kept, [B, P, d] per hook instead of the whole [B, T, d] sequence.
"""

from __future__ import annotations

import inspect
import operator
import re
from collections.abc import Callable, Sequence

import torch
from torch import nn

EMBED_LAYER = -1  # the layer index of hook_embed
EMBED_HOOK = "hook_embed"
_RESID_POST = re.compile(r"blocks\.(\d+)\.hook_resid_post")

Edit = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, hidden [B, T, d]) -> the hidden states to pass on

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


# --- names and layers ---------------------------------------------------------------------------------------------

def hook_name(layer: int) -> str:
    """TransformerLens's name of a residual-stream point: ``hook_embed`` for EMBED_LAYER (-1), else
    ``blocks.{layer}.hook_resid_post``."""
    index = layer_index(layer)
    if index is None or index < EMBED_LAYER:
        raise ValueError(f"no hook for layer {layer!r}: expected {EMBED_LAYER} (hook_embed) or a block index >= 0")
    return EMBED_HOOK if index == EMBED_LAYER else f"blocks.{index}.hook_resid_post"


def hook_layer(name: str) -> int:
    """The layer index of a hook name: EMBED_LAYER (-1) for ``hook_embed``, l for ``blocks.{l}.hook_resid_post``."""
    if name == EMBED_HOOK:
        return EMBED_LAYER
    match = _RESID_POST.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(f"unknown hook name {name!r}: expected {EMBED_HOOK} or blocks.<layer>.hook_resid_post")
    return int(match.group(1))


def hook_names(n_layers: int, layers: Sequence[int] | None = None) -> list[str]:
    """``hook_embed`` then ``blocks.{l}.hook_resid_post`` for the chosen layers (None: all ``n_layers``)."""
    chosen = range(n_layers) if layers is None else check_layers(layers, n_layers)
    return [hook_name(layer) for layer in (EMBED_LAYER, *chosen)]


LAYER_GRAMMAR = ("all, or a comma list of: embed; first, middle, last; block numbers (negative ones count back from "
                 "the last block: -1 is the last); inclusive ranges a-b such as 0-5 or -4--1; hook names "
                 "(hook_embed, blocks.3.hook_resid_post)")
_RANGE = re.compile(r"(-?\d+)-(-?\d+)")


def select_hooks(spec: str, hooks: Sequence[str], flag: str = "--layers", held: str = "captured") -> list[str]:
    """The hooks of `hooks` a layer spec names, in `hooks` order, each once: the one layer grammar (LAYER_GRAMMAR).

    Block numbers, ranges and first/middle/last refer to the blocks of `hooks` (a negative number counts back from
    the last of them); a range ``a-b`` is inclusive and names the blocks of `hooks` between a and b. ValueError
    naming `flag`, the entry, and the blocks `held` (what `hooks` are: "captured", "available").
    """
    text = spec.strip().lower()
    if text == "all":
        return list(hooks)
    blocks = sorted(hook_layer(h) for h in hooks if h != EMBED_HOOK)
    chosen: set[str] = set()
    for part in (p.strip() for p in text.split(",")):
        chosen.update(_entry(part, EMBED_HOOK in hooks, blocks, flag, held))
    return [h for h in hooks if h in chosen]


def parse_layers(spec: str, n_layers: int, flag: str = "--layers") -> list[int]:
    """The decoder layers (sorted, each once) a layer spec names over a model of `n_layers` blocks, by
    `select_hooks`; ``embed`` adds none, capture always keeps hook_embed."""
    named = select_hooks(spec, hook_names(n_layers), flag, "available")
    return [hook_layer(h) for h in named if h != EMBED_HOOK]


def _entry(part: str, has_embed: bool, blocks: list[int], flag: str, held: str) -> list[str]:
    """The hooks one comma-separated entry of a layer spec names (`select_hooks`)."""
    if part in ("embed", EMBED_HOOK):
        if not has_embed:
            raise ValueError(f"{flag} {part}: no token embeddings were {held}")
        return [EMBED_HOOK]
    if part in ("first", "middle", "last"):
        if not blocks:
            raise ValueError(f"{flag} {part}: no block outputs were {held}")
        return [hook_name(blocks[{"first": 0, "middle": len(blocks) // 2, "last": -1}[part]])]
    name = _RESID_POST.fullmatch(part)
    if name is not None:
        return [hook_name(_block(name.group(1), blocks, flag, held))]
    span = _RANGE.fullmatch(part)
    if span is None:
        return [hook_name(_block(part, blocks, flag, held))]
    low, high = (_block(end, blocks, flag, held, part) for end in span.groups())
    inside = [hook_name(b) for b in blocks if low <= b <= high]
    if not inside:
        raise ValueError(f"{flag}: range {part} names no block {held} (a-b is inclusive, a <= b); "
                         f"{held}: {_listing(blocks)}")
    return inside


def _block(text: str, blocks: list[int], flag: str, held: str, span: str | None = None) -> int:
    """The block number `text` names, a negative one counting back from the last of `blocks`: one of `blocks`, or
    for an end of the range `span`, between the first and the last."""
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"{flag}: unknown entry {text!r}; expected {LAYER_GRAMMAR}; "
                         f"blocks {held}: {_listing(blocks)}") from None
    if -len(blocks) <= number < 0:
        number = blocks[number]
    found = (bool(blocks) and blocks[0] <= number <= blocks[-1]) if span else number in blocks
    if not found:
        of = f" (an end of range {span})" if span else ""
        raise ValueError(f"{flag}: block {text}{of} was not {held}; {held}: {_listing(blocks)}")
    return number


def _listing(blocks: list[int]) -> str:
    """Sorted block numbers as ``0..29`` where they run without a gap, else as a list."""
    if len(blocks) > 2 and blocks == list(range(blocks[0], blocks[-1] + 1)):
        return f"{blocks[0]}..{blocks[-1]}"
    return str(blocks) if blocks else "none"


def layer_index(layer) -> int | None:
    """`layer` as an int: an integer (numpy and 0-d torch integers too) as itself, a hook name (``hook_embed``,
    ``blocks.3.hook_resid_post``) as its layer (`hook_layer`); None for anything else (floats, bools, other text)."""
    if isinstance(layer, bool):
        return None
    if isinstance(layer, str):
        return hook_layer(layer) if layer == EMBED_HOOK or _RESID_POST.fullmatch(layer) else None
    try:
        return operator.index(layer)
    except TypeError:
        return None


def check_layers(layers: Sequence[int | str], n_layers: int, embed: bool = False) -> list[int]:
    """`layers` (block indices or hook names) as ints, each a decoder layer 0..n_layers-1 (or EMBED_LAYER where
    `embed`); ValueError naming the first that is not."""
    low = EMBED_LAYER if embed else 0
    out = []
    for layer in layers:
        index = layer_index(layer)
        if index is None or not low <= index < n_layers:
            raise ValueError(f"layer {layer!r} out of range: valid layers are {low}..{n_layers - 1}")
        out.append(index)
    return out


# --- modules ------------------------------------------------------------------------------------------------------

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


def hidden_of(output) -> torch.Tensor:
    """The hidden states of a module output: the tensor itself, or the first item of a tuple / ModelOutput."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    first = getattr(output, "last_hidden_state", None)
    if isinstance(first, torch.Tensor):
        return first
    raise TypeError(f"cannot read hidden states from a module output of type {type(output).__name__}")


def _with_hidden(output, hidden: torch.Tensor):
    """`output` with its hidden states replaced (a tensor, or the first item of a tuple or list)."""
    if isinstance(output, torch.Tensor):
        return hidden
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    if isinstance(output, list):
        return [hidden, *output[1:]]
    raise TypeError(f"cannot edit the hidden states of a module output of type {type(output).__name__}")


def gather(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[B, P, d] states of `hidden` [B, T, d] at `positions` [B, P] (or [P], the same for every row)."""
    positions = positions.to(hidden.device)
    if positions.ndim == 1:
        return hidden[:, positions]
    if positions.shape[0] != hidden.shape[0]:
        raise ValueError(f"positions has {positions.shape[0]} rows for a batch of {hidden.shape[0]}")
    rows = torch.arange(hidden.shape[0], device=hidden.device)[:, None]
    return hidden[rows, positions]


# --- the hook primitive -------------------------------------------------------------------------------------------

class _StopForward(Exception):
    """Raised by the last point of a stopping ResidualHooks: the forward ends there, and the block's exit ends it."""


class ResidualHooks:
    """Context manager: forward hooks on residual-stream points that keep their output, edit it, or both.

    >>> with ResidualHooks(model, [EMBED_LAYER, 3], edit=lambda layer, h: h + v) as hooks:
    ...     model(input_ids=ids)
    >>> hooks[hook_name(3)]  # block 3's output after the edit, [B, T, d]

    `layers` are EMBED_LAYER (-1, the token embedding's output) or decoder layer indices; ``names`` holds their hook
    names in that order. `edit(layer, hidden)` returns the hidden states the model goes on with (it may not modify
    `hidden` in place); with `retain` each point's (edited) states are kept by hook name, detached, and with
    `positions` [B, P] (or [P]) only those tokens. A module called more than once inside the block (generation)
    is edited every time and keeps its last call; ``calls[layer]`` counts the forwards through each point. With
    `stop` (baukit's TraceDict(stop=True)) the last point ends the forward, so later layers and the LM head never
    run; the block's exit swallows that stop, and the model's output is lost. Every hook is removed on exit, also
    when the block raises.
    """

    def __init__(self, model: nn.Module, layers: Sequence[int], edit: Edit | None = None, retain: bool = True,
                 positions: torch.Tensor | None = None, stop: bool = False):
        blocks = decoder_layers(model)
        self.layers = check_layers(layers, len(blocks), embed=True)
        self.names = [hook_name(layer) for layer in self.layers]
        self.edit, self.retain = edit, retain
        self.stop_at = max(self.layers) if stop and self.layers else None
        if positions is not None:
            positions = torch.as_tensor(positions, dtype=torch.long)
            if positions.ndim not in (1, 2):
                raise ValueError(f"positions must be [B, P] or [P], got shape {tuple(positions.shape)}")
        self.positions = positions
        self.modules = {layer: embedding(model) if layer == EMBED_LAYER else blocks[layer] for layer in self.layers}
        self.activations: dict[str, torch.Tensor] = {}
        self.calls = dict.fromkeys(self.layers, 0)
        self._handles: list = []

    def _hook(self, layer: int):
        name = hook_name(layer)

        def hook(module, args, output):
            self.calls[layer] += 1
            hidden = hidden_of(output)
            if self.edit is not None:
                hidden = self.edit(layer, hidden)
                output = _with_hidden(output, hidden)
            if self.retain:
                kept = hidden.detach()
                self.activations[name] = kept if self.positions is None else gather(kept, self.positions)
            if layer == self.stop_at:
                raise _StopForward
            return output
        return hook

    def __enter__(self) -> "ResidualHooks":
        self.activations = {}
        try:
            for layer, module in self.modules.items():
                self._handles.append(module.register_forward_hook(self._hook(layer)))
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Remove every hook this object registered."""
        while self._handles:
            self._handles.pop().remove()

    def __exit__(self, kind, error, trace) -> bool:
        self.remove()
        return kind is not None and issubclass(kind, _StopForward)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.activations[name]

    def stacked(self) -> torch.Tensor:
        """[n_hooks, B, P or T, d] in hook order (``self.names``)."""
        missing = [n for n in self.names if n not in self.activations]
        if missing:
            raise RuntimeError(f"no forward reached {', '.join(missing)}")
        return torch.stack([self.activations[n] for n in self.names])


class ResidualTrace(ResidualHooks):
    """ResidualHooks that read ``hook_embed`` and the chosen decoder layers (None: all), editing nothing.

    >>> with ResidualTrace(model, layers=[0, 3], positions=pos) as trace:
    ...     model(input_ids=ids, attention_mask=mask)
    >>> trace.stacked().shape  # [3, B, P, d]: hook_embed, blocks.0.hook_resid_post, blocks.3.hook_resid_post

    ``positions`` [B, P] (or [P], the same for every row) indexes the sequence of the forward's input; `stop` ends
    the forward after the last chosen layer (ResidualHooks).
    """

    def __init__(self, model: nn.Module, layers: Sequence[int] | None = None, positions: torch.Tensor | None = None,
                 stop: bool = False):
        n = n_layers_of(model)
        chosen = range(n) if layers is None else check_layers(layers, n)
        super().__init__(model, [EMBED_LAYER, *chosen], positions=positions, stop=stop)


def _accepts(model: nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def resid_post(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               positions: torch.Tensor | None = None, layers: Sequence[int] | None = None,
               **forward_kwargs) -> torch.Tensor:
    """One forward under a ResidualTrace; [n_hooks, B, P or T, d] in ``hook_names`` order.

    ``forward_kwargs`` go to the model unchanged (position_ids, a 4-D additive mask as ``attention_mask``, a KV
    cache as ``cache`` or ``past_key_values``: behavioral.engine.cache_keyword), so the engine's batch layout works;
    ``positions`` then index the tokens of this forward.
    Without a cache the forward stops after the last chosen layer (no later layer, final norm or LM head runs) and
    builds no KV cache; with one, every layer runs, so the cache stays whole, and only the last position's logits
    are computed where the model allows.
    """
    stop = not {"past_key_values", "cache"} & forward_kwargs.keys()
    if stop:
        forward_kwargs.setdefault("use_cache", False)
    elif "logits_to_keep" not in forward_kwargs and _accepts(model, "logits_to_keep"):
        forward_kwargs["logits_to_keep"] = 1
    with torch.inference_mode(), ResidualTrace(model, layers, positions, stop) as trace:
        model(input_ids=input_ids, attention_mask=attention_mask, **forward_kwargs)
    return trace.stacked()
