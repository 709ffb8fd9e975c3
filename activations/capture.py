"""Reading and editing the residual stream with plain torch forward hooks: the fast path, and the one the engine uses.

One primitive, ``ResidualHooks``, in the style of baukit's ``TraceDict(retain_output=..., edit_output=...)``: forward
hooks on residual-stream points that keep their output, replace it, or both. Capture (``ResidualTrace``,
``resid_post``), steering and patching are all built on it. Points are named as TransformerLens names them:

- ``hook_embed``: the token embedding's output (before any scaling or position embedding the model adds after it),
- ``blocks.{l}.hook_resid_post``: the output hidden states of decoder layer (block) ``l``.

Every function that takes layers takes the same things, resolved in one place (``resolve_layers`` over a model's
blocks, ``select_layers`` over the hooks a store or cache holds): an integer is a decoder block, a negative one
counting back from the last block (-1 is the last, as in Python indexing and ``--layers``); a string is an entry of
the ``--layers`` grammar (LAYER_GRAMMAR, parsed by ``select_hooks``), so a hook name names itself; the token
embedding is addressed by its name only (``hook_embed``, ``embed``), never by an integer. Internals carry hook names.

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
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from activations.layer_spec import EMBED_HOOK, LAYER_GRAMMAR, RANGE, RESID_POST

Layers = int | str | Iterable[int | str]  # what every layer argument takes (resolve_layers, select_layers)
Edit = Callable[[str, torch.Tensor], torch.Tensor]  # (hook name, hidden [B, T, d]) -> the hidden states to pass on

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

def _integer(value) -> int | None:
    """`value` as an int where it is an integer (numpy and 0-d torch integers too, bools not); else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def hook_name(layer: int | str, n_layers: int | None = None) -> str:
    """The hook name of one layer, resolved as `resolve_layers` resolves it over a model of `n_layers` blocks;
    without `n_layers`, only a block >= 0 or a hook name (a negative block counts back from the model's last)."""
    if n_layers is not None:
        return one_layer(layer, model_hooks(n_layers), "layers", "available")
    if isinstance(layer, str) and layer == EMBED_HOOK:
        return EMBED_HOOK
    match = RESID_POST.fullmatch(layer) if isinstance(layer, str) else None
    number = int(match.group(1)) if match else _integer(layer)
    if number is None or number < 0:
        raise ValueError(f"no hook for layer {layer!r} without the model's block count: expected a block >= 0 or a "
                         f"hook name ({EMBED_HOOK}, blocks.3.hook_resid_post); pass n_layers to resolve a negative "
                         "block or a --layers entry")
    return f"blocks.{number}.hook_resid_post"


def hook_layer(name: str) -> int:
    """The decoder block of ``blocks.{l}.hook_resid_post``; ValueError for ``hook_embed`` (no block) and other names."""
    match = RESID_POST.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        what = "is the token embedding, no decoder block" if name == EMBED_HOOK else "is no block's hook name"
        raise ValueError(f"{name!r} {what}: expected blocks.<layer>.hook_resid_post")
    return int(match.group(1))


def table_layer(name: str) -> int:
    """A hook's value in the ``layer`` column of result tables and on figures' layer axes: l for
    ``blocks.{l}.hook_resid_post``, -1 for ``hook_embed`` (drawn left of block 0). A coordinate to sort and plot by,
    not a layer to pass back: functions take the hook name (the tables' ``hook`` column)."""
    return -1 if name == EMBED_HOOK else hook_layer(name)


def model_hooks(n_layers: int, embed: bool = True) -> list[str]:
    """The hook names of a model of `n_layers` blocks: ``hook_embed`` (where `embed`), then every block's."""
    return [EMBED_HOOK] * embed + [f"blocks.{layer}.hook_resid_post" for layer in range(n_layers)]


def hook_names(n_layers: int, layers: Layers | None = None) -> list[str]:
    """``hook_embed`` then the hooks of the chosen blocks (`resolve_layers`; None: all ``n_layers``), in the order
    named."""
    blocks = model_hooks(n_layers, False) if layers is None else resolve_layers(layers, n_layers, embed=True)
    return [EMBED_HOOK, *(h for h in blocks if h != EMBED_HOOK)]


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


def select_layers(layers: Layers, hooks: Sequence[str], flag: str = "layers", held: str = "captured") -> list[str]:
    """The hooks of `hooks` that `layers` names, in the order named, each once: an integer is a block (a negative
    one counts back from the last block of `hooks`), a string a layer spec (`select_hooks`: a hook name names
    itself, a list or range its hooks in `hooks` order), or an iterable of these. ValueError naming `flag`, the
    value, and the blocks `held`."""
    blocks = sorted(hook_layer(h) for h in hooks if h != EMBED_HOOK)
    chosen: dict[str, None] = {}
    for item in layer_entries(layers, flag):
        if isinstance(item, str):
            chosen.update(dict.fromkeys(select_hooks(item, hooks, flag, held)))
        else:
            chosen[hook_name(_block(str(item), blocks, flag, held))] = None
    return list(chosen)


def one_layer(layer: int | str, hooks: Sequence[str], flag: str = "layer", held: str = "captured") -> str:
    """The one hook of `hooks` that `layer` names (`select_layers`); a layer that names several (a range, ``all``) is
    a ValueError."""
    names = select_layers(layer, hooks, flag, held)
    if len(names) != 1:
        raise ValueError(f"layer {layer!r} names {len(names)} hooks; expected one")
    return names[0]


def layer_entries(layers: Layers, flag: str = "layers") -> tuple[int | str, ...]:
    """`layers` (one entry or an iterable of them) as a tuple of entries: integers as ints, strings as given;
    ValueError naming `flag` and what is neither."""
    items = [layers] if isinstance(layers, str) or _integer(layers) is not None else layers
    try:
        items = list(items)
    except TypeError:
        raise ValueError(f"{flag}: {layers!r} is not a layer; expected {LAYER_GRAMMAR}") from None
    for item in items:
        if not isinstance(item, str) and _integer(item) is None:
            raise ValueError(f"{flag}: {item!r} is not a layer; expected {LAYER_GRAMMAR}")
    return tuple(item if isinstance(item, str) else _integer(item) for item in items)


def resolve_layers(layers: Layers, n_layers: int, embed: bool = False, flag: str = "layers") -> list[str]:
    """The hook names `layers` names on a model of `n_layers` blocks, in the order named, each once (`select_layers`:
    -1 is the last block; ``hook_embed``/``embed`` only where `embed`): the one place layer arguments are read."""
    return select_layers(layers, model_hooks(n_layers, embed), flag, "available")


def parse_layers(spec: str, n_layers: int, flag: str = "--layers") -> list[int]:
    """The decoder layers (sorted, each once) a layer spec names over a model of `n_layers` blocks, by
    `select_hooks`; ``embed`` adds none, capture always keeps hook_embed."""
    named = select_hooks(spec, model_hooks(n_layers), flag, "available")
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
    name = RESID_POST.fullmatch(part)
    if name is not None:
        return [hook_name(_block(name.group(1), blocks, flag, held))]
    span = RANGE.fullmatch(part)
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

    >>> with ResidualHooks(model, ["hook_embed", 3, -1], edit=lambda name, h: h + v) as hooks:
    ...     model(input_ids=ids)
    >>> hooks["blocks.3.hook_resid_post"]  # block 3's output after the edit, [B, T, d]

    `layers` are read by `resolve_layers` (blocks, -1 the last; ``hook_embed`` the token embedding's output);
    ``names`` holds their hook names in the order named. `edit(name, hidden)` gets the point's hook name and returns
    the hidden states the model goes on with (it may not modify `hidden` in place); with `retain` each point's
    (edited) states are kept by hook name, detached, and with `positions` [B, P] (or [P]) only those tokens. A
    module called more than once inside the block (generation) is edited every time and keeps its last call;
    ``calls[name]`` counts the forwards through each point. With
    `stop` (baukit's TraceDict(stop=True)) the last point ends the forward, so later layers and the LM head never
    run; the block's exit swallows that stop, and the model's output is lost. Every hook is removed on exit, also
    when the block raises.
    """

    def __init__(self, model: nn.Module, layers: Layers, edit: Edit | None = None, retain: bool = True,
                 positions: torch.Tensor | None = None, stop: bool = False):
        blocks = decoder_layers(model)
        self.names = resolve_layers(layers, len(blocks), embed=True)
        self.edit, self.retain = edit, retain
        self.stop_at = max(self.names, key=table_layer) if stop and self.names else None
        if positions is not None:
            positions = torch.as_tensor(positions, dtype=torch.long)
            if positions.ndim not in (1, 2):
                raise ValueError(f"positions must be [B, P] or [P], got shape {tuple(positions.shape)}")
        self.positions = positions
        self.modules = {name: embedding(model) if name == EMBED_HOOK else blocks[hook_layer(name)]
                        for name in self.names}
        self.activations: dict[str, torch.Tensor] = {}
        self.calls = dict.fromkeys(self.names, 0)
        self._handles: list = []

    def _hook(self, name: str):
        def hook(module, args, output):
            self.calls[name] += 1
            hidden = hidden_of(output)
            if self.edit is not None:
                hidden = self.edit(name, hidden)
                output = _with_hidden(output, hidden)
            if self.retain:
                kept = hidden.detach()
                self.activations[name] = kept if self.positions is None else gather(kept, self.positions)
            if name == self.stop_at:
                raise _StopForward
            return output
        return hook

    def __enter__(self) -> "ResidualHooks":
        self.activations = {}
        try:
            for name, module in self.modules.items():
                self._handles.append(module.register_forward_hook(self._hook(name)))
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
        """[n_hooks, B, P or T, d] in hook order (``self.names``), on the first hook's device (a model split over
        devices runs its layers on several)."""
        missing = [n for n in self.names if n not in self.activations]
        if missing:
            raise RuntimeError(f"no forward reached {', '.join(missing)}")
        device = self.activations[self.names[0]].device
        return torch.stack([self.activations[n].to(device) for n in self.names])


class ResidualTrace(ResidualHooks):
    """ResidualHooks that read ``hook_embed`` and the chosen decoder layers (`hook_names`; None: all), editing
    nothing.

    >>> with ResidualTrace(model, layers=[0, 3], positions=pos) as trace:
    ...     model(input_ids=ids, attention_mask=mask)
    >>> trace.stacked().shape  # [3, B, P, d]: hook_embed, blocks.0.hook_resid_post, blocks.3.hook_resid_post

    ``positions`` [B, P] (or [P], the same for every row) indexes the sequence of the forward's input; `stop` ends
    the forward after the last chosen layer (ResidualHooks).
    """

    def __init__(self, model: nn.Module, layers: Layers | None = None, positions: torch.Tensor | None = None,
                 stop: bool = False):
        super().__init__(model, hook_names(n_layers_of(model), layers), positions=positions, stop=stop)


def _accepts(model: nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def resid_post(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               positions: torch.Tensor | None = None, layers: Layers | None = None,
               **forward_kwargs) -> torch.Tensor:
    """One forward under a ResidualTrace; [n_hooks, B, P or T, d] in ``hook_names`` order.

    ``forward_kwargs`` go to the model unchanged (position_ids, a 4-D additive mask as ``attention_mask``, a KV
    cache as ``cache`` or ``past_key_values``: behavioral.inference.engine.cache_keyword), so the engine's batch layout works;
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
