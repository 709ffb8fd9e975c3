"""The values a patch writes: residual-stream states of source prompts, one forward per distinct source prefix.

Causal attention makes a prefix exact: the states of the first ``u`` tokens depend on those tokens alone, so a source
is cut after the last position any patch reads. Every source with the same persona and setting then shares one
prefix, and patching from "a person" costs one source forward in all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from activations.capture import EMBED_HOOK, Layers, hook_name, hook_names, n_layers_of, resid_post, table_layer
from behavioral.inference.engine import halving_on_oom
from behavioral.inference.models import input_device
from interp.patching.spec import PatchError

Ids = tuple[int, ...]


@dataclass(frozen=True)
class SourceStates:
    """Residual-stream values of source prompts on a model of `n_layers` blocks: ``states[i]`` is [len(names), T_i, d]
    in ``names`` order (``hook_embed`` first, then the blocks shallowest first), T_i the prompt's length or the prefix
    kept."""

    names: tuple[str, ...]
    states: tuple[torch.Tensor, ...]
    n_layers: int

    def __len__(self) -> int:
        return len(self.states)

    def get(self, i: int, layer: int | str) -> torch.Tensor:
        """[T_i, d] of prompt `i` at `layer` (activations.capture.hook_name over the model's blocks: -1 the last)."""
        try:
            name = hook_name(layer, self.n_layers)
        except ValueError as err:
            raise PatchError(str(err)) from None
        if name not in self.names:
            raise PatchError(f"layer {layer!r} ({name}) was not captured; captured: {', '.join(self.names)}")
        return self.states[i][self.names.index(name)]


def prefixes(prompts: Sequence[Sequence[int]], upto: Sequence[int | None] | None = None) -> list[Ids]:
    """Each prompt cut to its first ``upto[i]`` tokens (None: whole)."""
    return [tuple(p[:u] if u else p) for p, u in zip(prompts, upto or [None] * len(prompts))]


def prefix_batches(cut: Sequence[Ids], batch_size: int) -> list[list[Ids]]:
    """The forwards `source_states` runs: distinct prefixes, same-length ones batched, at most `batch_size` a batch."""
    by_length: dict[int, list[Ids]] = {}
    for ids in dict.fromkeys(cut):
        by_length.setdefault(len(ids), []).append(ids)
    return [group[k:k + batch_size] for group in by_length.values() for k in range(0, len(group), batch_size)]


def source_states(model, prompts: Sequence[Sequence[int]], layers: Layers,
                  upto: Sequence[int | None] | None = None, batch_size: int = 16,
                  on_forward: Callable[[], None] | None = None) -> SourceStates:
    """hook_embed and the hooks of `layers` (activations.capture.resolve_layers; -1 the last block) of every prompt,
    keeping the first ``upto[i]`` positions of prompt i (None: all): one forward per batch of `prefix_batches` (all
    layers at once, stopping after the deepest), a batch halved on CUDA out-of-memory as the engine's are;
    `on_forward` is called after each forward."""
    n_layers = n_layers_of(model)
    try:
        names = tuple(sorted(hook_names(n_layers, layers), key=table_layer))
    except ValueError as err:
        raise PatchError(str(err)) from None
    blocks = [name for name in names if name != EMBED_HOOK]
    cut = prefixes(prompts, upto)
    device = input_device(model)

    def forward(chunk: list[Ids]) -> tuple[torch.Tensor, ...]:
        stacked = resid_post(model, torch.tensor(chunk, device=device), layers=blocks)  # [H, b, T, d]
        if on_forward is not None:
            on_forward()
        return stacked.unbind(1)

    batches = prefix_batches(cut, batch_size)
    done = dict(zip([ids for chunk in batches for ids in chunk], halving_on_oom(forward, batches)))
    return SourceStates(names, tuple(done[ids] for ids in cut), n_layers)
