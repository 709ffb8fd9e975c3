"""Steering a model along a direction: added or projected out at decoder layers while a suite runs.

A direction of a layer is the difference of two pooled means of final-token states (``blocks.{l}.hook_resid_post``):
:func:`mean_difference` weights each cell by its prompt count (so it is the difference of the pooled per-cell sums);
which cells lie on which side is the caller's (a suite's label, e.g. intergroup's in-group cells). :func:`steer`
edits the output of decoder layer ``l`` at every position of every forward that runs inside it (shared prefix,
prompt, answer trie and each decode step): ``h + coef * v`` or ``h - (h . u) u`` with ``u = v / |v|``.
:func:`steered_run` runs a whole suite slice steered (``behavioral.runner.run.run`` on the loaded model);
:func:`run_conditions` runs one per steering of a sweep (:func:`sweep_conditions`), and
:func:`zero_coefficient_check` shows whether coefficient 0 reproduced the unsteered rows exactly.

Rows of a direction array follow the store's hooks (``hook_embed``, then ``blocks.{l}.hook_resid_post``);
:func:`hook_row` and :func:`layer_directions` pick layers out of it by hook name or block (-1 the last captured), as
activations.capture.select_layers reads them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from activations.capture import Edit, Layers, ResidualHooks, hook_layer, layer_entries, model_hooks, n_layers_of, \
    one_layer, resolve_layers, table_layer
from activations.store import ActivationStoreError
from behavioral.inference.engine import Engine
from behavioral.runner.estimate import estimate_run
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.manifest import MANIFEST


# --- the direction ------------------------------------------------------------------------------------------------

def mean_difference(means: np.ndarray, counts: np.ndarray, inside: np.ndarray, outside: np.ndarray) -> np.ndarray:
    """[hooks, d] float64: the count-weighted mean of the `inside` cells of ``means`` [hooks, cells, d] minus that of
    the `outside` cells (bool masks over cells; cells in neither are left out)."""
    inside, outside = np.asarray(inside, dtype=bool), np.asarray(outside, dtype=bool)
    if not inside.any() or not outside.any():
        raise ValueError(f"a mean difference needs cells on both sides, got {int(inside.sum())} inside and "
                         f"{int(outside.sum())} outside")
    counts = np.asarray(counts, dtype=np.float64)
    means = means.astype(np.float64)

    def pooled(mask: np.ndarray) -> np.ndarray:
        w = counts[mask]
        return np.einsum("c,lcd->ld", w / w.sum(), means[:, mask])

    return pooled(inside) - pooled(outside)


def unit_rows(directions: np.ndarray) -> np.ndarray:
    """Every row of a [hooks, d] array scaled to norm 1 (a zero row stays zero), in float64."""
    directions = directions.astype(np.float64)
    norms = np.linalg.norm(directions, axis=1, keepdims=True)
    return np.divide(directions, norms, out=np.zeros_like(directions), where=norms > 0)


def direction_table(directions: np.ndarray, means: np.ndarray, hooks: Sequence[str]) -> pd.DataFrame:
    """Per hook: the direction's norm, the norm of the mean state over the cells of ``means`` [hooks, cells, d],
    their ratio, and the cosine with the previous hook's direction."""
    resid = np.linalg.norm(means.astype(np.float64).mean(axis=1), axis=1)
    norm = np.linalg.norm(directions.astype(np.float64), axis=1)
    unit = directions / np.where(norm > 0, norm, 1)[:, None]
    cos_prev = np.r_[np.nan, (unit[1:] * unit[:-1]).sum(1)]
    return pd.DataFrame({"hook": list(hooks), "layer": [table_layer(h) for h in hooks], "direction_norm": norm,
                         "mean_state_norm": resid, "relative_norm": norm / np.where(resid > 0, resid, np.nan),
                         "cos_previous_layer": cos_prev})


def hook_row(hooks: Sequence[str], layer: int | str) -> int:
    """Row of one layer (a hook name, or a block: -1 the last captured; activations.capture.one_layer) in a store's
    hook order."""
    try:
        return list(hooks).index(one_layer(layer, hooks))
    except ValueError as err:
        raise ActivationStoreError(str(err)) from None


def span_direction(states: np.ndarray, norm: float, seed: int) -> np.ndarray:
    """A random direction within the span of captured states ([n, d], e.g. one layer's cell means), centred on their
    mean, scaled to `norm`: Gaussian weights over the centred states, from a seeded stream. The control of a
    steering: a direction the model's states actually vary along, unlike an isotropic one, of which a projection
    removes about 1/d of the variance and so cannot fail."""
    states = np.asarray(states, dtype=np.float64)
    centred = states - states.mean(axis=0)
    if len(states) < 2 or not np.any(centred):
        raise ValueError(f"a direction within the span of the states needs at least 2 distinct states, got {len(states)}")
    vector = np.random.default_rng(seed).standard_normal(len(states)) @ centred
    return (vector * norm / np.linalg.norm(vector)).astype(np.float32)


def layer_directions(directions: np.ndarray, hooks: Sequence[str], layers: Sequence[int | str]) -> dict:
    """{layer as given: [d] direction} from a [hooks, d] array in ``hooks`` order (`hook_row`)."""
    return {layer: directions[hook_row(hooks, layer)] for layer in layers}


# --- the hooks ----------------------------------------------------------------------------------------------------

def _steering_edit(vectors: Mapping[str, torch.Tensor], coef: float | None, project: bool) -> Edit:
    """The edit of each steered hook: ``h - (h . u) u`` if `project`, then ``+ coef * v`` if `coef` is given;
    constants made once per hook, device and dtype."""
    constants: dict[tuple, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def edit(name: str, h: torch.Tensor) -> torch.Tensor:
        key = (name, h.device, h.dtype)
        if key not in constants:
            vector = vectors[name]
            norm = vector.norm()
            unit = (vector / norm if norm > 0 else torch.zeros_like(vector)).to(h.device)
            constants[key] = unit, None if coef is None else (coef * vector).to(h.device, h.dtype)
        unit, add = constants[key]
        if project:
            hf = h.float()
            h = (hf - (hf @ unit)[..., None] * unit).to(h.dtype)
        return h if add is None else h + add

    return edit


def _as_array(direction) -> np.ndarray:
    if isinstance(direction, torch.Tensor):
        return direction.detach().to("cpu", torch.float32).numpy()
    return np.asarray(direction, dtype=np.float32)


def _as_vectors(direction, n_layers: int, width: int) -> list[torch.Tensor]:
    vectors = torch.from_numpy(_as_array(direction).copy())
    if vectors.ndim == 1:
        vectors = vectors[None].expand(n_layers, -1)
    if vectors.ndim != 2 or vectors.shape[0] != n_layers or vectors.shape[1] != width:
        raise ValueError(f"direction must be [d] or [{n_layers}, d] with d = {width}, got {tuple(vectors.shape)}")
    if not torch.isfinite(vectors).all():
        raise ValueError("direction contains NaN or infinite values")
    return [v.clone() for v in vectors]


@contextlib.contextmanager
def steer(model: nn.Module, layer: Layers, direction, coef: float | None = None, project: bool = False,
          engine: Engine | None = None) -> Iterator[ResidualHooks]:
    """Steer `model` inside the block: ResidualHooks on the decoder block(s) `layer` edit their output at every
    position. `layer` is read by activations.capture.resolve_layers (-1 the last block; hook names; a ``--layers``
    spec), the token embedding never steered.

    `direction` is [d] (the same for every layer) or [n, d], one row per block in the order named. `coef` adds
    ``coef * direction``; `project` removes the component along the direction first (``h - (h . u) u``, u its unit
    vector; a zero direction leaves h unchanged). Every forward inside the block is steered: an Engine's shared
    prefix, prompt, answer trie and decode steps alike. Pass the `engine` to run through, so prefix KV caches
    computed outside the block (unsteered) are not reused inside it, nor steered ones after it: its prefix cache is
    emptied on entry and on exit.
    Hooks are removed on exit, also when the block raises. Yields the hooks (``calls[name]`` counts forwards).
    """
    if coef is None and not project:
        raise ValueError("steer needs a coefficient, project=True, or both")
    if coef is not None and not math.isfinite(coef):
        raise ValueError(f"coefficient must be finite, got {coef!r}")
    names = resolve_layers(layer, n_layers_of(model))
    width = model.config.hidden_size if hasattr(model, "config") else _as_array(direction).shape[-1]
    vectors = dict(zip(names, _as_vectors(direction, len(names), width)))
    edit = _steering_edit(vectors, None if coef is None else float(coef), project)
    if engine is not None:
        engine.prefixes.entries.clear()
    try:
        with ResidualHooks(model, names, edit=edit, retain=False) as hooks:
            yield hooks
    finally:
        if engine is not None:
            engine.prefixes.entries.clear()


def _blocks(layer: Layers, n_layers: int) -> list[int]:
    """The decoder blocks `steer` edits for `layer` on a model of `n_layers` blocks, in the order named."""
    return [hook_layer(name) for name in resolve_layers(layer, n_layers)]


def _one_block(layer: int | str, n_layers: int) -> int:
    """The one decoder block a sweep condition's `layer` names."""
    return hook_layer(one_layer(layer, model_hooks(n_layers, embed=False), "layers", "available"))


def steering_fingerprint(layer: Layers, direction, coef: float | None, project: bool, n_layers: int) -> str:
    """sha256 (16 hex digits) of a steering on a model of `n_layers` blocks: its blocks (`steer`'s), the
    direction's bytes, coefficient, projection."""
    digest = hashlib.sha256(repr((_blocks(layer, n_layers), coef, bool(project))).encode())
    digest.update(np.ascontiguousarray(_as_array(direction)).tobytes())
    return digest.hexdigest()[:16]


def steered_info(info: Mapping, layer: Layers, direction, coef: float | None, project: bool, n_layers: int) -> dict:
    """A model's manifest info with the steering (on a model of `n_layers` blocks) recorded under ``steering`` and
    ``+steer:<fingerprint>`` appended to ``model_hash``, so a run directory made with another steering (or none) is
    refused on resume."""
    fingerprint = steering_fingerprint(layer, direction, coef, project, n_layers)
    return dict(info) | {
        "model_hash": f"{info['model_hash']}+steer:{fingerprint}",
        "steering": {"layers": _blocks(layer, n_layers), "coef": coef, "project": project,
                     "fingerprint": fingerprint,
                     "direction_norm": float(np.linalg.norm(_as_array(direction).astype(np.float64)))},
    }


def steered_run(config: RunConfig, out: str | Path, loaded: tuple, layer: Layers, direction,
                coef: float | None = None, project: bool = False, progress: bool = True) -> Path:
    """Run (or resume) a suite slice with the loaded (model, tokenizer, info) steered: ``behavioral.runner.run.run`` on the
    steered model, its manifest marked by `steered_info`. The suite prepares its data with the steered model (e.g.
    intergroup's T2 rewrites): copy an unsteered run's caches into `out` first to avoid that."""
    model, tokenizer, info = loaded
    with steer(model, layer, direction, coef, project):
        return run(config, out, progress=progress,
                   loaded=(model, tokenizer,
                           steered_info(info, layer, direction, coef, project, n_layers_of(model))))


# --- the sweep ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Condition:
    """One steering of the sweep: none (layer None), add coef × direction at a layer (a block, -1 the last, or a
    hook name, as `steer` takes it), or project it out there. A
    control steers another direction of the same layer: `random` k ≥ 1 the k-th random direction within the span of
    the captured states, `matching` m the direction of the m-th wrong matching of identities (interp.matchings),
    `held_out` j the direction fit without identity j's cells."""

    layer: int | str | None
    coef: float | None = None
    project: bool = False
    random: int = 0
    matching: int | None = None
    held_out: int | None = None

    @property
    def control(self) -> bool:
        """Whether it steers a control direction (random, a wrong matching's, one fit without an identity), not the
        real one."""
        return bool(self.random) or self.matching is not None or self.held_out is not None

    @property
    def label(self) -> str:
        """As tables show it: ``unsteered``, ``L12 +4``, ``L12 project``, ``L12 project random``, ``L12 project
        random 2``, ``L12 project matching 3``, ``L12 project held out 1``."""
        if self.layer is None:
            return "unsteered"
        control = ""
        if self.random:
            control = " random" + ("" if self.random == 1 else f" {self.random}")
        elif self.matching is not None:
            control = f" matching {self.matching}"
        elif self.held_out is not None:
            control = f" held out {self.held_out}"
        if self.project:
            return f"L{self.layer} project" + ("" if self.coef is None else f" {self.coef:+g}") + control
        return f"L{self.layer} {self.coef:+g}{control}"

    @property
    def folder(self) -> str:
        """The name of its run directory in a sweep."""
        return self.label.replace(" ", "_")


def sweep_conditions(layers: Layers, coefs: Sequence[float], project: bool = False, n_random: int = 0,
                     n_matchings: int = 0, n_held_out: int = 0) -> list[Condition]:
    """The unsteered baseline, then each layer × coefficient (and, with `project`, each layer's projection, the
    projections of `n_random` random directions, of the directions of `n_matchings` wrong matchings and of the
    directions fit without each of the first `n_held_out` identities there).

    Coefficient 0 runs at the first layer only: it checks that the steering hook leaves the run unchanged, and the
    hook is the same at every layer, so a second zero run would cost a whole grid and tell nothing new.
    """
    out = [Condition(None)]
    for i, layer in enumerate(layer_entries(layers)):
        out += [Condition(layer, float(c)) for c in coefs if c != 0 or i == 0]
        if project:
            out.append(Condition(layer, None, True))
            out += [Condition(layer, None, True, random=k) for k in range(1, n_random + 1)]
            out += [Condition(layer, None, True, matching=m) for m in range(n_matchings)]
            out += [Condition(layer, None, True, held_out=j) for j in range(n_held_out)]
    return out


def run_conditions(config: RunConfig, out: str | Path, loaded: tuple, directions: Mapping[int | str, np.ndarray],
                   conditions: Sequence[Condition], read_rows: Callable[[Path], pd.DataFrame],
                   caches: Sequence[str] = (), seed_dir: str | Path | None = None,
                   progress: bool = False, controls: Mapping[Condition, np.ndarray] | None = None) -> pd.DataFrame:
    """The rows `read_rows` reads of each condition's run of the config's slice (e.g. a suite's result view), with
    columns condition, layer (the steered block; -1 unsteered), coef, project, random, matching, held_out added. Each
    condition runs (or resumes) into its own run directory ``out/<condition.folder>``, capture off. A condition
    steers the direction of its block in `directions` (keys and condition layers as `steer` takes them: -1 the last
    block), a control condition its own vector in `controls`.

    Caches: the files named by `caches` (a suite's, e.g. intergroup's ``rewrites.jsonl``) in `seed_dir` (default:
    the unsteered condition's run directory) are copied into each run directory not started yet, so no steered
    model writes them. With `progress`, one batch is timed first and the estimate printed, and each run shows its
    progress bar.
    """
    out = Path(out)
    config = dataclasses.replace(config, capture=())
    controls = controls or {}
    n_layers = n_layers_of(loaded[0])
    block = {cond: _one_block(cond.layer, n_layers) for cond in conditions if cond.layer is not None}
    by_block = {_one_block(layer, n_layers): vector for layer, vector in directions.items()}
    for cond in conditions:
        if cond.control and cond not in controls:
            raise ValueError(f"no direction for the control {cond.label}")
        if cond.layer is not None and not cond.control and block[cond] not in by_block:
            raise ValueError(f"no direction for layer {cond.layer}; have {list(directions)}")
    seed_dir = Path(seed_dir) if seed_dir is not None else out / Condition(None).folder
    if progress and conditions:
        first = out / conditions[0].folder
        _seed_caches(seed_dir, caches, first)
        print(f"steering: {estimate_run(config, loaded, first).describe(len(conditions))}", flush=True)
    frames = []
    for i, cond in enumerate(conditions):
        run_dir = out / cond.folder
        _seed_caches(seed_dir, caches, run_dir)
        if progress:
            print(f"steering {i + 1}/{len(conditions)}: {cond.label}", flush=True)
        if cond.layer is None:
            run(config, run_dir, progress=progress, loaded=loaded)
        else:
            direction = controls[cond] if cond.control else by_block[block[cond]]
            steered_run(config, run_dir, loaded, cond.layer, direction, cond.coef, cond.project, progress)
        frames.append(read_rows(run_dir).assign(
            condition=cond.label, layer=-1 if cond.layer is None else block[cond],
            coef=np.nan if cond.coef is None else cond.coef, project=cond.project, random=cond.random,
            matching=-1 if cond.matching is None else cond.matching,
            held_out=-1 if cond.held_out is None else cond.held_out))
    return pd.concat(frames, ignore_index=True)


def one_sided(rows: pd.DataFrame, inside: pd.Series, key: Sequence[str],
              sides: tuple[str, str] = ("inside", "outside")) -> pd.DataFrame:
    """One-sided steerings assembled from the sweep's rows, with no forward of their own: for each condition that
    adds a positive coefficient, its rows of prompts outside the label (`inside` False: intergroup's out-group cells)
    and the unsteered rows elsewhere (``... outside only``); for each negative coefficient, its rows of prompts inside
    (``... inside only``); `sides` names the two sides in the labels (intergroup: in-group, out-group). Each prompt's result depends on its own forward only, so a prompt steered alone and one
    steered with the whole grid agree. `inside` is a nullable bool per row of `rows` (NA: neither side, never
    steered); `key` identifies a prompt within a condition."""
    key = list(key)
    base = rows[rows["condition"] == "unsteered"].set_index(key)
    added = rows[rows["layer"].ge(0) & ~rows["project"].astype(bool) & rows["coef"].ne(0) & rows["random"].eq(0)
                 & rows["matching"].lt(0)]
    frames = []
    for condition, sub in added.groupby("condition", sort=False):
        positive = float(sub["coef"].iloc[0]) > 0
        side = inside.loc[sub.index].eq(not positive).fillna(False).to_numpy()
        steered = sub.set_index(key)
        merged = base.copy()
        chosen = steered.index[side]
        merged.loc[chosen, :] = steered.loc[chosen, merged.columns]
        label = f"{condition} {sides[1] if positive else sides[0]} only"
        frames.append(merged.reset_index().assign(condition=label, layer=sub["layer"].iloc[0],
                                                  coef=sub["coef"].iloc[0], one_sided=True))
    return pd.concat(frames, ignore_index=True) if frames else rows.iloc[:0].assign(one_sided=True)


def _seed_caches(seed_dir: Path, caches: Sequence[str], run_dir: Path) -> None:
    """Copy the cache files of `seed_dir` into a run directory not started yet (a run directory accepts its suite's
    caches before its manifest)."""
    if (run_dir / MANIFEST).exists():
        return
    for name in caches:
        if (seed_dir / name).is_file() and not (run_dir / name).exists():
            run_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(seed_dir / name, run_dir / name)


def zero_coefficient_check(rows: pd.DataFrame, key: Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """Per condition with coefficient 0 (no projection): whether every result column in `columns` equals the
    unsteered run's exactly (NaN equal to NaN), rows matched by `key`, and how many rows differ."""
    key = list(key)
    base = rows[rows["condition"] == "unsteered"].set_index(key).sort_index()
    out = []
    zero = rows[(rows["coef"] == 0) & ~rows["project"].astype(bool)]
    for condition, sub in zero.groupby("condition", sort=False):
        sub = sub.set_index(key).sort_index()
        same = sub.index.equals(base.index)
        differing = 0
        if same:
            for column in columns:
                a, b = sub[column], base[column]
                equal = (a == b) | (a.isna() & b.isna())
                differing = max(differing, int((~equal).sum()))
        out.append({"condition": condition, "layer": int(sub["layer"].iloc[0]), "n_rows": len(sub),
                    "differing_rows": differing if same else len(sub), "identical": same and differing == 0})
    return pd.DataFrame(out, columns=["condition", "layer", "n_rows", "differing_rows", "identical"])
