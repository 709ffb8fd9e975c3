"""Steering the empathy gap: an in-group direction per layer, added or projected out while the suite runs.

The direction of a layer is the mean final-token state (``blocks.{l}.hook_resid_post``) over in-group cells minus the
mean over out-group cells, "a person" excluded, each cell weighted by its prompt count (so it is the difference of
the pooled per-cell sums). :func:`steer` edits the output of decoder layer ``l`` at every position of every forward
that runs inside it (shared prefix, prompt, answer trie and each decode step): ``h + coef * v`` or
``h - (h . u) u`` with ``u = v / |v|``. :func:`steering_sweep` runs a suite slice per (layer, coefficient) and
puts δ beside the refusal and numeric rates, so a "fix" that breaks the task shows.

Rows of a direction array follow the store's hooks (``hook_embed``, then ``blocks.{l}.hook_resid_post``);
:func:`layer_directions` picks decoder layers out of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from torch import nn

from activations.capture import EMBED, _check_layers, _hidden, decoder_layers
from activations.store import ActivationStore, ActivationStoreError
from behavioral.suites.intergroup.analysis import analyze_setting
from behavioral.engine import Engine, PrefixCache
from behavioral.suites.intergroup.groups import UNSPECIFIED, get_category
from behavioral.run import unit_batches
from behavioral.suites.intergroup.settings import get_setting
from behavioral.work import work_units

FORMATS = ("png", "pdf")
RESULT_COLUMNS = ("response", "intensity", "refused", "score_answer", "expected_intensity", "numeric_mass")


# --- the direction ------------------------------------------------------------------------------------------------

def ingroup_cells(category: str, cells: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """bool masks (in-group, out-group) over the rows of a (perceiver, experiencer) frame; "a person" in neither."""
    cat = get_category(category)
    specified = ((cells["perceiver"] != UNSPECIFIED) & (cells["experiencer"] != UNSPECIFIED)).to_numpy()
    p = cells["perceiver"].map(cat.group_of)
    x = cells["experiencer"].map(cat.group_of)
    same = (p == x).to_numpy() & specified
    return same, specified & ~same


def ingroup_direction(store: ActivationStore, category: str, setting: str, unit: bool = False) -> np.ndarray:
    """[hooks, d] float32: count-weighted mean final-token state of in-group cells minus that of out-group cells.

    Rows follow ``store.hooks``. With ``unit`` every row is scaled to norm 1 (a zero row stays zero).
    """
    means, cells = store.final(category, setting)
    inside, outside = ingroup_cells(category, cells)
    if not inside.any() or not outside.any():
        raise ActivationStoreError(f"{category}/{setting}: the store needs both in-group and out-group cells, "
                                   f"got {int(inside.sum())} and {int(outside.sum())}")
    counts = cells["count"].to_numpy(dtype=np.float64)
    means = means.astype(np.float64)

    def pooled(mask: np.ndarray) -> np.ndarray:
        w = counts[mask]
        return np.einsum("c,lcd->ld", w / w.sum(), means[:, mask])

    direction = pooled(inside) - pooled(outside)
    if unit:
        norms = np.linalg.norm(direction, axis=1, keepdims=True)
        direction = np.divide(direction, norms, out=np.zeros_like(direction), where=norms > 0)
    return direction.astype(np.float32)


def hook_row(hooks: Sequence[str], layer: int) -> int:
    """Row of decoder layer `layer` (its ``blocks.{layer}.hook_resid_post``) in a store's hook order."""
    name = f"blocks.{layer}.hook_resid_post"
    if name not in hooks:
        raise ActivationStoreError(f"layer {layer} was not captured; the store has {', '.join(hooks)}")
    return list(hooks).index(name)


def layer_directions(directions: np.ndarray, hooks: Sequence[str], layers: Sequence[int]) -> dict[int, np.ndarray]:
    """{decoder layer: [d] direction} from a [hooks, d] array in ``hooks`` order."""
    return {int(layer): directions[hook_row(hooks, layer)] for layer in layers}


def captured_layers(hooks: Sequence[str]) -> list[int]:
    """Decoder layers a store holds, in order (``hook_embed`` is not a decoder layer)."""
    return [int(h.split(".")[1]) for h in hooks if h != EMBED]


# --- the hooks ----------------------------------------------------------------------------------------------------

def _replace_hidden(output, hidden: torch.Tensor):
    """`output` of a decoder layer with its hidden states replaced (a tensor, or the first item of a tuple)."""
    if isinstance(output, torch.Tensor):
        return hidden
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    if isinstance(output, list):
        return [hidden, *output[1:]]
    raise TypeError(f"cannot steer a decoder layer whose output is a {type(output).__name__}")


class _Edit:
    """Forward hook: `h - (h . u) u` if project, then `+ coef * v` if coef is not None; per device/dtype constants."""

    def __init__(self, vector: torch.Tensor, coef: float | None, project: bool):
        self.vector, self.coef, self.project = vector, coef, project
        norm = vector.norm()
        self.unit = vector / norm if norm > 0 else torch.zeros_like(vector)
        self._cache: dict[tuple, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.calls = 0

    def _constants(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = (h.device, h.dtype)
        if key not in self._cache:
            unit = self.unit.to(h.device)
            add = None if self.coef is None else (self.coef * self.vector).to(h.device, h.dtype)
            self._cache[key] = (unit, add)
        return self._cache[key]

    def __call__(self, module, args, output):
        self.calls += 1
        h = _hidden(output)
        unit, add = self._constants(h)
        new = h
        if self.project:
            hf = h.float()
            new = (hf - (hf @ unit)[..., None] * unit).to(h.dtype)
        if add is not None:
            new = new + add
        return _replace_hidden(output, new)


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
def steer(model: nn.Module, layer: int | Sequence[int], direction, coef: float | None = None, project: bool = False,
          engine: Engine | None = None) -> Iterator[list[_Edit]]:
    """Steer `model` inside the block: forward hooks on decoder layer(s) `layer` edit their output at every position.

    `direction` is [d] (the same for every layer) or [len(layers), d]. `coef` adds ``coef * direction``; `project`
    removes the component along the direction first (``h - (h . u) u``, u its unit vector; a zero direction leaves
    h unchanged). Every forward inside the block is steered: an Engine's shared prefix, prompt, answer trie and
    decode steps alike. Pass the `engine` to run through, so prefix KV caches computed outside the block (unsteered)
    are not reused inside it, nor steered ones after it: its prefix cache is emptied on entry and on exit.
    Hooks are removed on exit, also when the block raises. Yields the hooks (their ``calls`` count forwards).
    """
    if coef is None and not project:
        raise ValueError("steer needs a coefficient, project=True, or both")
    if coef is not None and not math.isfinite(coef):
        raise ValueError(f"coefficient must be finite, got {coef!r}")
    blocks = decoder_layers(model)
    layers = _check_layers([layer] if isinstance(layer, (int, np.integer)) else list(layer), len(blocks))
    width = model.config.hidden_size if hasattr(model, "config") else None
    vectors = _as_vectors(direction, len(layers), width if width is not None else _as_array(direction).shape[-1])
    edits = [_Edit(v, None if coef is None else float(coef), project) for v in vectors]
    handles = []
    if engine is not None:
        engine.prefixes.entries.clear()
    try:
        for index, edit in zip(layers, edits):
            handles.append(blocks[index].register_forward_hook(edit))
        yield edits
    finally:
        for handle in handles:
            handle.remove()
        if engine is not None:
            engine.prefixes.entries.clear()


def steering_fingerprint(layer, direction, coef: float | None, project: bool) -> str:
    """sha256 (16 hex digits) of a steering: layers, direction bytes, coefficient, projection."""
    layers = [int(layer)] if isinstance(layer, (int, np.integer)) else [int(x) for x in layer]
    digest = hashlib.sha256(repr((layers, coef, bool(project))).encode())
    digest.update(np.ascontiguousarray(_as_array(direction)).tobytes())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def steer_runs(layer: int | Sequence[int], direction, coef: float | None = None,
               project: bool = False) -> Iterator[None]:
    """Steer every model that ``behavioral.models.load`` returns inside the block, so that ``behavioral.run.run``
    (which loads its own model) runs a whole suite slice steered.

    The run directory's manifest records the steering under ``model.steering``, and ``model_hash`` gains a
    ``+steer:<fingerprint>`` suffix, so a run directory made with another steering (or none) is refused on resume.
    T2 rewrites made inside the block (``rewrites.jsonl``) come from the steered model; copy an unsteered run's cache
    into the run directory first to avoid that. Hooks of every loaded model are removed on exit.
    """
    from behavioral import models

    real = models.load
    fingerprint = steering_fingerprint(layer, direction, coef, project)
    layers = [int(layer)] if isinstance(layer, (int, np.integer)) else [int(x) for x in layer]

    with contextlib.ExitStack() as stack:
        def load(*args, **kwargs):
            model, tokenizer, info = real(*args, **kwargs)
            stack.enter_context(steer(model, layer, direction, coef, project))
            info = dict(info, model_hash=f"{info['model_hash']}+steer:{fingerprint}",
                        steering={"layers": layers, "coef": coef, "project": project, "fingerprint": fingerprint,
                                  "direction_norm": float(np.linalg.norm(_as_array(direction).astype(np.float64)))})
            return model, tokenizer, info

        models.load = load
        try:
            yield
        finally:
            models.load = real


# --- the sweep ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Condition:
    """One steering of the sweep: none (layer None), add coef × direction at a layer, or project it out there."""

    layer: int | None
    coef: float | None = None
    project: bool = False

    @property
    def label(self) -> str:
        if self.layer is None:
            return "unsteered"
        if self.project:
            return f"L{self.layer} project" + ("" if self.coef is None else f" {self.coef:+g}")
        return f"L{self.layer} {self.coef:+g}"


def sweep_conditions(layers: Sequence[int], coefs: Sequence[float], project: bool = False) -> list[Condition]:
    """The unsteered baseline, then each layer × coefficient (and, with `project`, each layer's projection)."""
    out = [Condition(None)]
    for layer in layers:
        out += [Condition(int(layer), float(c)) for c in coefs]
        if project:
            out.append(Condition(int(layer), None, True))
    return out


def run_conditions(model, tokenizer, config, directions: Mapping[int, np.ndarray], conditions: Sequence[Condition],
                   events=None, rewrites_dir: str | Path | None = None, progress: bool = False) -> pd.DataFrame:
    """Result rows (as ``behavioral.run`` writes them) of the config's slice under each condition, with columns
    condition, layer, coef, project added. One Suite; its prefix cache is emptied before every condition.

    `events` default to the config's (``behavioral.run.load_corpus``); for T2 settings without third-person text,
    `rewrites_dir` is where the rewrite cache is read (and written, by the unsteered model).
    """
    from behavioral.run import Suite, load_corpus
    from behavioral.suites.intergroup.rewrite import ensure_third_person

    config = dataclasses.replace(config, capture=())
    config.validate()
    if events is None:
        events, _ = load_corpus(config)
    if any(get_setting(s).narrative_form == "third_person" for s in config.settings) and \
            any(e.third_person is None for e in events):
        if rewrites_dir is None:
            raise ValueError("a T2 setting needs third-person narratives: pass events with them or rewrites_dir")
        events = ensure_third_person(events, config, Path(rewrites_dir), model, tokenizer)
    suite = Suite(model, tokenizer, config)
    suite.check_lengths(events)
    units = list(work_units(config.settings, config.categories, events, config.unit_size))
    frames = []
    for i, cond in enumerate(conditions):
        if cond.layer is not None and cond.layer not in directions:
            raise ValueError(f"no direction for layer {cond.layer}; have {sorted(directions)}")
        suite.engine.prefixes = PrefixCache(model)
        context = contextlib.nullcontext() if cond.layer is None else steer(
            model, cond.layer, directions[cond.layer], cond.coef, cond.project, engine=suite.engine)
        with context:
            rows = [r for batch in unit_batches(units, config.batch_size) for r in suite.rows(batch)]
        if progress:
            print(f"  steering {i + 1}/{len(conditions)}: {cond.label} ({len(rows)} prompts)", flush=True)
        frames.append(pd.DataFrame(rows).assign(
            condition=cond.label, layer=-1 if cond.layer is None else cond.layer,
            coef=np.nan if cond.coef is None else cond.coef, project=cond.project))
    return pd.concat(frames, ignore_index=True)


def _measures(rows: pd.DataFrame) -> list[str]:
    """``intensity`` always (generated answer, or the greedy score answer in score mode); ``expected_intensity``
    where the run scored."""
    return ["intensity"] + (["expected_intensity"] if rows["expected_intensity"].notna().any() else [])


def summarize(rows: pd.DataFrame, n_permutations: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """δ with its permutation interval and p, and the refusal / numeric rates, per condition × category × setting
    × measure; ``*_change`` columns subtract the unsteered condition's value.

    Measures: ``intensity`` (the generated answer, or the greedy score answer in score mode) and, where the run
    scored, ``expected_intensity``. ``non_numeric_mass`` = 1 − mean probability that the first answer token starts
    a number (score modes); ``refusal_rate`` counts prompts without a value of the measure (those drop whole events).
    """
    out = []
    event_ids = tuple(sorted(rows["event_id"].unique()))
    order = list(dict.fromkeys(rows["condition"]))
    for (condition, category, setting), sub in rows.groupby(["condition", "category", "setting"], sort=False):
        first = sub.iloc[0]
        for measure in _measures(sub):
            a = analyze_setting(sub, get_category(category), setting, event_ids, measure, n_permutations, seed,
                                allow_partial=True)
            perm = a.permutation
            out.append({
                "condition": condition, "layer": int(first["layer"]), "coef": float(first["coef"]),
                "project": bool(first["project"]), "category": category, "setting": setting, "measure": measure,
                "delta": perm.delta if perm else math.nan, "ci_low": perm.ci_low if perm else math.nan,
                "ci_high": perm.ci_high if perm else math.nan, "p_value": perm.p_value if perm else math.nan,
                "mean_rating": a.summary["mean"] if a.summary else math.nan,
                "refusal_rate": a.refusal_rate, "excluded_rate": a.excluded_rate,
                "parsable_rate": math.nan if a.parsable_rate is None else a.parsable_rate,
                "numeric_mass_mean": math.nan if a.numeric_mass_mean is None else a.numeric_mass_mean,
                "numeric_mass_share": math.nan if a.numeric_mass_share is None else a.numeric_mass_share,
                "non_numeric_mass": math.nan if a.numeric_mass_mean is None else 1 - a.numeric_mass_mean,
                "n_prompts": a.n_prompts, "note": "; ".join(a.notes),
            })
    table = pd.DataFrame(out)
    table["_order"] = table["condition"].map({c: i for i, c in enumerate(order)})
    table["_measure"] = table["measure"].map({"intensity": 0, "expected_intensity": 1})
    table = table.sort_values(["category", "setting", "_measure", "_order"], kind="stable")
    table = table.drop(columns=["_order", "_measure"])
    keys = ["category", "setting", "measure"]
    changed = ("delta", "mean_rating", "refusal_rate", "parsable_rate", "non_numeric_mass")
    base = table.loc[table["condition"] == "unsteered", keys + list(changed)]
    reference = table[keys].merge(base, on=keys, how="left")
    for column in changed:
        table[f"{column}_change"] = table[column].to_numpy() - reference[column].to_numpy(dtype=float)
    return table.reset_index(drop=True)


def steering_sweep(model, tokenizer, config, directions: Mapping[int, np.ndarray], layers: Sequence[int],
                   coefs: Sequence[float], project: bool = False, n_permutations: int = 10_000, seed: int = 0,
                   events=None, rewrites_dir=None, progress: bool = False) -> pd.DataFrame:
    """δ and the rates (see :func:`summarize`) of the config's suite slice, unsteered and per layer × coefficient
    (and projection); `directions` maps each decoder layer to its [d] direction (see :func:`layer_directions`)."""
    rows = run_conditions(model, tokenizer, config, directions, sweep_conditions(layers, coefs, project), events,
                          rewrites_dir, progress)
    return summarize(rows, n_permutations, seed)


def zero_coefficient_check(rows: pd.DataFrame) -> pd.DataFrame:
    """Per condition with coefficient 0 (no projection): whether every result column equals the unsteered run's
    exactly (NaN equal to NaN), and how many rows differ."""
    key = ["unit_id", "event_id"]
    base = rows[rows["condition"] == "unsteered"].set_index(key).sort_index()
    out = []
    zero = rows[(rows["coef"] == 0) & ~rows["project"].astype(bool)]
    for condition, sub in zero.groupby("condition", sort=False):
        sub = sub.set_index(key).sort_index()
        same = sub.index.equals(base.index)
        differing = 0
        if same:
            for column in RESULT_COLUMNS:
                a, b = sub[column], base[column]
                equal = (a == b) | (a.isna() & b.isna())
                differing = max(differing, int((~equal).sum()))
        out.append({"condition": condition, "layer": int(sub["layer"].iloc[0]), "n_rows": len(sub),
                    "differing_rows": differing if same else len(sub), "identical": same and differing == 0})
    return pd.DataFrame(out, columns=["condition", "layer", "n_rows", "differing_rows", "identical"])


# --- the figure ---------------------------------------------------------------------------------------------------

def sweep_figure(summary: pd.DataFrame, category: str, setting: str) -> Figure:
    """δ vs coefficient per layer (projection at the right), beside the refusal rate and the non-numeric mass."""
    part = summary[(summary["category"] == category) & (summary["setting"] == setting)]
    measures = list(dict.fromkeys(part["measure"]))
    panels = [("delta", "δ (in-group − out-group, z)"), ("refusal_rate", "refusal rate"),
              ("non_numeric_mass", "non-numeric mass (1 − P(number))"), ("mean_rating", "mean rating M⁰")]
    fig = Figure(figsize=(4.2 * len(panels), 3.2 * len(measures)), layout="constrained")
    axes = fig.subplots(len(measures), len(panels), squeeze=False)
    steered = part[part["layer"] >= 0]
    coefs = sorted(steered.loc[~steered["project"], "coef"].dropna().unique())
    span = (max(coefs) - min(coefs)) if len(coefs) > 1 else 1.0
    x_project = (max(coefs) if coefs else 0.0) + 0.35 * span
    colors = {layer: f"C{i}" for i, layer in enumerate(sorted(steered["layer"].unique()))}
    for i, measure in enumerate(measures):
        rows = part[part["measure"] == measure]
        base = rows[rows["layer"] < 0]
        for j, (column, title) in enumerate(panels):
            ax = axes[i, j]
            if len(base) and np.isfinite(base[column].iloc[0]):
                ax.axhline(base[column].iloc[0], color="black", linestyle="--", linewidth=1, label="unsteered")
            if column == "delta" and len(base) and np.isfinite(base["ci_low"].iloc[0]):
                ax.axhspan(base["ci_low"].iloc[0], base["ci_high"].iloc[0], color="0.85", label="null 95% (unsteered)")
            for layer, sub in rows[rows["layer"] >= 0].groupby("layer"):
                added = sub[~sub["project"]].sort_values("coef")
                ax.plot(added["coef"], added[column], marker="o", color=colors[layer], label=f"layer {layer}")
                projected = sub[sub["project"]]
                if len(projected):
                    ax.scatter([x_project] * len(projected), projected[column], marker="x", s=60, color=colors[layer])
            if (steered["project"]).any():
                ticks = list(coefs) + [x_project]
                ax.set_xticks(ticks, [f"{c:g}" for c in coefs] + ["proj."])
            if column == "delta" and not np.isfinite(rows["delta"]).any():
                note = next((n for n in rows["note"] if n), "undefined")
                ax.text(0.5, 0.5, "δ n/a:\n" + note[:120], ha="center", va="center", wrap=True, fontsize=7,
                        transform=ax.transAxes)
            ax.set_xlabel("coefficient")
            ax.set_title(f"{title}\n{measure}" if j == 0 else title, fontsize=9)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle(f"Steering along the in-group direction: {category} {setting}")
    return fig


def plot_sweep(summary: pd.DataFrame, out_dir: str | Path, name: str = "steering") -> list[Path]:
    """One figure per category × setting of the summary, as PNG and PDF; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for (category, setting), _ in summary.groupby(["category", "setting"], sort=False):
        fig = sweep_figure(summary, category, setting)
        for fmt in FORMATS:
            path = out_dir / f"{name}_{category}_{setting}.{fmt}"
            fig.savefig(path, dpi=150)
            paths.append(path)
    return paths
