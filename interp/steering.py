"""Steering the empathy gap: an in-group direction per layer, added or projected out while the suite runs.

The direction of a layer is the mean final-token state (``blocks.{l}.hook_resid_post``) over in-group cells minus the
mean over out-group cells, "a person" excluded, each cell weighted by its prompt count (so it is the difference of
the pooled per-cell sums). :func:`steer` edits the output of decoder layer ``l`` at every position of every forward
that runs inside it (shared prefix, prompt, answer trie and each decode step): ``h + coef * v`` or
``h - (h . u) u`` with ``u = v / |v|``. :func:`steered_run` runs a whole suite slice steered
(``behavioral.run.run`` on the loaded model); :func:`steering_sweep` runs one per (layer, coefficient) and puts δ
beside the refusal and numeric rates, so a "fix" that breaks the task shows.

Rows of a direction array follow the store's hooks (``hook_embed``, then ``blocks.{l}.hook_resid_post``);
:func:`layer_directions` picks decoder layers out of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from torch import nn

from activations.capture import EMBED_HOOK, Edit, ResidualHooks, check_layers, hook_layer, hook_name, n_layers_of
from activations.store import ActivationStore, ActivationStoreError
from behavioral.engine import Engine
from behavioral.outputs import save_figure
from behavioral.run import RunConfig, run
from behavioral.store import MANIFEST
from behavioral.suites.intergroup import results
from behavioral.suites.intergroup.analysis import analyze_setting
from behavioral.suites.intergroup.groups import UNSPECIFIED, get_category
from behavioral.suites.intergroup.rewrite import CACHE as REWRITES
from interp.progress import estimate_run

RESULT_COLUMNS = ("response", "intensity", "refused", "score_intensity", "expected_intensity", "numeric_mass")


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
    name = hook_name(layer)
    if name not in hooks:
        raise ActivationStoreError(f"layer {layer} was not captured; the store has {', '.join(hooks)}")
    return list(hooks).index(name)


def random_direction(direction: np.ndarray, seed: int) -> np.ndarray:
    """A Gaussian direction with the norm of `direction`, from a seeded stream: the control of a steering, which
    shows what moving (or projecting out) any one direction of that size does."""
    direction = _as_array(direction)
    vector = np.random.default_rng(seed).standard_normal(direction.shape)
    return (vector * np.linalg.norm(direction) / np.linalg.norm(vector)).astype(np.float32)


def layer_directions(directions: np.ndarray, hooks: Sequence[str], layers: Sequence[int]) -> dict[int, np.ndarray]:
    """{decoder layer: [d] direction} from a [hooks, d] array in ``hooks`` order."""
    return {int(layer): directions[hook_row(hooks, layer)] for layer in layers}


def captured_layers(hooks: Sequence[str]) -> list[int]:
    """Decoder layers a store holds, in order (``hook_embed`` is not a decoder layer)."""
    return [hook_layer(h) for h in hooks if h != EMBED_HOOK]


# --- the hooks ----------------------------------------------------------------------------------------------------

def _steering_edit(vectors: Mapping[int, torch.Tensor], coef: float | None, project: bool) -> Edit:
    """The edit of each steered layer: ``h - (h . u) u`` if `project`, then ``+ coef * v`` if `coef` is given;
    constants made once per layer, device and dtype."""
    constants: dict[tuple, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def edit(layer: int, h: torch.Tensor) -> torch.Tensor:
        key = (layer, h.device, h.dtype)
        if key not in constants:
            vector = vectors[layer]
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


def _layer_list(layer: int | Sequence[int]) -> list:
    return [layer] if isinstance(layer, (int, np.integer)) else list(layer)


@contextlib.contextmanager
def steer(model: nn.Module, layer: int | Sequence[int], direction, coef: float | None = None, project: bool = False,
          engine: Engine | None = None) -> Iterator[ResidualHooks]:
    """Steer `model` inside the block: ResidualHooks on decoder layer(s) `layer` edit their output at every position.

    `direction` is [d] (the same for every layer) or [len(layers), d]. `coef` adds ``coef * direction``; `project`
    removes the component along the direction first (``h - (h . u) u``, u its unit vector; a zero direction leaves
    h unchanged). Every forward inside the block is steered: an Engine's shared prefix, prompt, answer trie and
    decode steps alike. Pass the `engine` to run through, so prefix KV caches computed outside the block (unsteered)
    are not reused inside it, nor steered ones after it: its prefix cache is emptied on entry and on exit.
    Hooks are removed on exit, also when the block raises. Yields the hooks (``calls[layer]`` counts forwards).
    """
    if coef is None and not project:
        raise ValueError("steer needs a coefficient, project=True, or both")
    if coef is not None and not math.isfinite(coef):
        raise ValueError(f"coefficient must be finite, got {coef!r}")
    layers = check_layers(_layer_list(layer), n_layers_of(model))
    width = model.config.hidden_size if hasattr(model, "config") else _as_array(direction).shape[-1]
    vectors = dict(zip(layers, _as_vectors(direction, len(layers), width)))
    edit = _steering_edit(vectors, None if coef is None else float(coef), project)
    if engine is not None:
        engine.prefixes.entries.clear()
    try:
        with ResidualHooks(model, layers, edit=edit, retain=False) as hooks:
            yield hooks
    finally:
        if engine is not None:
            engine.prefixes.entries.clear()


def steering_fingerprint(layer, direction, coef: float | None, project: bool) -> str:
    """sha256 (16 hex digits) of a steering: layers, direction bytes, coefficient, projection."""
    layers = [int(x) for x in _layer_list(layer)]
    digest = hashlib.sha256(repr((layers, coef, bool(project))).encode())
    digest.update(np.ascontiguousarray(_as_array(direction)).tobytes())
    return digest.hexdigest()[:16]


def steered_info(info: Mapping, layer, direction, coef: float | None = None, project: bool = False) -> dict:
    """A model's manifest info with the steering recorded under ``steering`` and ``+steer:<fingerprint>`` appended
    to ``model_hash``, so a run directory made with another steering (or none) is refused on resume."""
    fingerprint = steering_fingerprint(layer, direction, coef, project)
    return dict(info) | {
        "model_hash": f"{info['model_hash']}+steer:{fingerprint}",
        "steering": {"layers": [int(x) for x in _layer_list(layer)], "coef": coef, "project": project,
                     "fingerprint": fingerprint,
                     "direction_norm": float(np.linalg.norm(_as_array(direction).astype(np.float64)))},
    }


def steered_run(config: RunConfig, out: str | Path, loaded: tuple, layer: int | Sequence[int], direction,
                coef: float | None = None, project: bool = False, progress: bool = True) -> Path:
    """Run (or resume) a suite slice with the loaded (model, tokenizer, info) steered: ``behavioral.run.run`` on the
    steered model, its manifest marked by `steered_info`. The suite prepares its data with the steered model (T2
    rewrites): copy an unsteered run's ``rewrites.jsonl`` into `out` first to avoid that."""
    model, tokenizer, info = loaded
    with steer(model, layer, direction, coef, project):
        return run(config, out, progress=progress,
                   loaded=(model, tokenizer, steered_info(info, layer, direction, coef, project)))


# --- the sweep ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Condition:
    """One steering of the sweep: none (layer None), add coef × direction at a layer, or project it out there;
    `random`: the same along a random direction of the direction's norm (seeded by the layer), the control."""

    layer: int | None
    coef: float | None = None
    project: bool = False
    random: bool = False

    @property
    def label(self) -> str:
        """As tables show it: ``unsteered``, ``L12 +4``, ``L12 project``, ``L12 project random``."""
        if self.layer is None:
            return "unsteered"
        control = " random" if self.random else ""
        if self.project:
            return f"L{self.layer} project" + ("" if self.coef is None else f" {self.coef:+g}") + control
        return f"L{self.layer} {self.coef:+g}{control}"

    @property
    def folder(self) -> str:
        """The name of its run directory in a sweep."""
        return self.label.replace(" ", "_")


def sweep_conditions(layers: Sequence[int], coefs: Sequence[float], project: bool = False,
                     control: bool = False) -> list[Condition]:
    """The unsteered baseline, then each layer × coefficient (and, with `project`, each layer's projection, and with
    `control` too the projection of a random direction there).

    Coefficient 0 runs at the first layer only: it checks that the steering hook leaves the run unchanged, and the
    hook is the same at every layer, so a second zero run would cost a whole grid and tell nothing new.
    """
    out = [Condition(None)]
    for i, layer in enumerate(layers):
        out += [Condition(int(layer), float(c)) for c in coefs if c != 0 or i == 0]
        if project:
            out.append(Condition(int(layer), None, True))
            if control:
                out.append(Condition(int(layer), None, True, random=True))
    return out


def run_conditions(config: RunConfig, out: str | Path, loaded: tuple, directions: Mapping[int, np.ndarray],
                   conditions: Sequence[Condition], rewrites: str | Path | None = None,
                   progress: bool = False) -> pd.DataFrame:
    """Result rows (seed-000 names, as ``behavioral.suites.intergroup.results`` reads them) of the config's slice
    under each condition, with columns condition, layer, coef, project, random added. Each condition runs (or
    resumes) into its own run directory ``out/<condition.folder>``, capture off.

    T2 narratives: `rewrites` (a ``rewrites.jsonl``, e.g. of the capture run; default: the unsteered condition's) is
    copied into each new run directory, so no steered model writes them. With `progress`, one batch is timed first
    and the estimate printed, and each run shows its progress bar.
    """
    out = Path(out)
    config = dataclasses.replace(config, capture=())
    for cond in conditions:
        if cond.layer is not None and cond.layer not in directions:
            raise ValueError(f"no direction for layer {cond.layer}; have {sorted(directions)}")
    rewrites = Path(rewrites) if rewrites is not None else out / Condition(None).folder / REWRITES
    if progress and conditions:
        first = out / conditions[0].folder
        _seed_rewrites(rewrites, first)
        print(f"steering: {estimate_run(config, loaded, first).describe(len(conditions))}", flush=True)
    frames = []
    for i, cond in enumerate(conditions):
        run_dir = out / cond.folder
        _seed_rewrites(rewrites, run_dir)
        if progress:
            print(f"steering {i + 1}/{len(conditions)}: {cond.label}", flush=True)
        if cond.layer is None:
            run(config, run_dir, progress=progress, loaded=loaded)
        else:
            direction = directions[cond.layer]
            if cond.random:
                direction = random_direction(direction, seed=cond.layer)
            steered_run(config, run_dir, loaded, cond.layer, direction, cond.coef, cond.project, progress)
        frames.append(results(run_dir).assign(
            condition=cond.label, layer=-1 if cond.layer is None else cond.layer,
            coef=np.nan if cond.coef is None else cond.coef, project=cond.project, random=cond.random))
    return pd.concat(frames, ignore_index=True)


def _seed_rewrites(rewrites: Path, run_dir: Path) -> None:
    """Copy a rewrite cache into a run directory not started yet (a run directory accepts it before its manifest)."""
    if rewrites.is_file() and not (run_dir / MANIFEST).exists() and not (run_dir / REWRITES).exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(rewrites, run_dir / REWRITES)


def _measures(rows: pd.DataFrame) -> list[str]:
    """``intensity`` always (generated answer, or the greedy score answer in score mode); ``expected_intensity``
    where the run scored."""
    return ["intensity"] + (["expected_intensity"] if rows["expected_intensity"].notna().any() else [])


def summarize(rows: pd.DataFrame, n_permutations: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """δ with its permutation interval and p, and the refusal / numeric rates, per condition × category × setting
    × measure; ``*_change`` columns subtract the unsteered condition's value.

    Measures: ``intensity`` (the generated answer, or the greedy score answer in score mode) and, where the run
    scored, ``expected_intensity``. ``non_numeric_mass`` = 1 − mean probability that the first answer token starts
    a number (score modes); ``refusal_rate`` counts prompts without a value of the measure (those drop whole events);
    ``p_min`` is the smallest p the sampled permutation null allows (see ``PermutationResult``); ``p_exact`` the p
    over every matching of identities where the test enumerates them (religion), NaN otherwise.
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
                "project": bool(first["project"]), "random": bool(first["random"]), "category": category,
                "setting": setting, "measure": measure,
                "delta": perm.delta if perm else math.nan, "ci_low": perm.ci_low if perm else math.nan,
                "ci_high": perm.ci_high if perm else math.nan, "p_value": perm.p_value if perm else math.nan,
                "p_min": perm.p_min if perm else math.nan,
                "p_exact": perm.p_exact if perm and perm.p_exact is not None else math.nan,
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


def steering_sweep(config: RunConfig, out: str | Path, loaded: tuple, directions: Mapping[int, np.ndarray],
                   layers: Sequence[int], coefs: Sequence[float], project: bool = False, control: bool = False,
                   n_permutations: int = 10_000, seed: int = 0, rewrites: str | Path | None = None,
                   progress: bool = False) -> pd.DataFrame:
    """δ and the rates (see :func:`summarize`) of the config's suite slice, unsteered and per layer × coefficient
    (and projection), one run directory each under `out`; `directions` maps each decoder layer to its [d] direction
    (see :func:`layer_directions`)."""
    conditions = sweep_conditions(layers, coefs, project, control)
    rows = run_conditions(config, out, loaded, directions, conditions, rewrites, progress)
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
    """δ vs coefficient per layer (projection at the right), beside the refusal rate and the non-numeric mass; a
    layer without a coefficient-0 run takes the unsteered point there (see :func:`sweep_conditions`), and an
    undefined δ is a triangle at the foot of its panel."""
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
            marked = drawn = False
            if len(base) and np.isfinite(base[column].iloc[0]):
                ax.axhline(base[column].iloc[0], color="black", linestyle="--", linewidth=1, label="unsteered")
            if column == "delta" and len(base) and np.isfinite(base["ci_low"].iloc[0]):
                ax.axhspan(base["ci_low"].iloc[0], base["ci_high"].iloc[0], color="0.85", label="null 95% (unsteered)")
            for layer, sub in rows[rows["layer"] >= 0].groupby("layer"):
                added = sub[~sub["project"]]
                if len(base) and not (added["coef"] == 0).any():
                    added = pd.concat([added, base.assign(coef=0.0)])  # coefficient 0 is the unsteered run
                added = added.sort_values("coef")
                ax.plot(added["coef"], added[column], marker="o", color=colors[layer], label=f"layer {layer}")
                undefined = added.loc[~np.isfinite(added[column]), "coef"]
                if column == "delta" and len(undefined):  # e.g. every cell the same greedy answer
                    ax.scatter(undefined, [0.04] * len(undefined), marker="v", s=40, color=colors[layer],
                               transform=ax.get_xaxis_transform(), clip_on=False,
                               label=None if marked else "δ undefined (all cells equal)")
                    marked = True
                projected = sub[sub["project"] & ~sub["random"]]
                if len(projected):
                    ax.scatter([x_project] * len(projected), projected[column], marker="x", s=60, color=colors[layer])
                control = sub[sub["project"] & sub["random"]]
                if len(control):
                    ax.scatter([x_project] * len(control), control[column], marker="o", s=60, facecolors="none",
                               edgecolors=colors[layer], label=None if drawn else "projection of a random direction")
                    drawn = True
            if (steered["project"]).any():
                ticks = list(coefs) + [x_project]
                ax.set_xticks(ticks, [f"{c:g}" for c in coefs] + ["proj."])
            if column == "delta" and not np.isfinite(rows["delta"]).any():
                note = next((n for n in rows["note"] if n), "undefined")
                ax.text(0.5, 0.5, "δ n/a:\n" + note[:120], ha="center", va="center", wrap=True, fontsize=7,
                        transform=ax.transAxes)
            ax.set_xlabel("coefficient")
            ax.set_title(f"{title}\n{measure}" if j == 0 else title, fontsize=9)
            if j == 0 and (i == 0 or marked or drawn):
                ax.legend(fontsize=7)
    fig.suptitle(f"Steering along the in-group direction: {category} {setting}")
    return fig


def plot_sweep(summary: pd.DataFrame, out_dir: str | Path, name: str = "steering") -> list[Path]:
    """One figure per category × setting of the summary, as PNG and PDF; returns the paths."""
    paths = []
    for (category, setting), _ in summary.groupby(["category", "setting"], sort=False):
        paths += save_figure(sweep_figure(summary, category, setting), out_dir, f"{name}_{category}_{setting}")
    return paths
