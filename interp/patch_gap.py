"""The headline patching experiment: which layers carry the empathy gap δ? Patch every perceiver's persona at one
layer, rebuild the matrix of expected intensities and recompute δ; its table and figure."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from behavioral import chat
from behavioral.outputs import save_figure
from behavioral.suites.intergroup.corpus import Event
from behavioral.suites.intergroup.groups import UNSPECIFIED, Category, get_category
from behavioral.suites.intergroup.stats import empathy_gap, permutation_test, zscore
from interp.patch_spec import SYSTEM_GROUP, PatchError, PatchSpec, build, get_trie
from interp.patch_sweep import evaluate

GAP_MODES = ("person", "swap")  # the persona patched in: "a person", or the in-group <-> out-group swap
GAP_COLUMNS = ("mode", "layer", "positions", "delta_unpatched", "delta_patched", "delta_change", "delta_removed",
               "p_unpatched", "p_patched", "null_ci_low", "null_ci_high", "gap_raw_unpatched", "gap_raw_patched",
               "mean_expected", "mean_delta_expected", "n_prompts")
N_PERMUTATIONS = 2000


def swap_source(category: Category, perceiver: str, experiencer: str) -> str:
    """The persona swapped in for cell (perceiver, experiencer): the experiencer itself (in-group) where the cell is
    out-group; where it is in-group, the first identity after the perceiver (cyclically, in Table 1 order) outside
    the experiencer's group."""
    group = category.group_of
    if group[perceiver] != group[experiencer]:
        return experiencer
    names = category.identities
    start = names.index(perceiver)
    for k in range(1, len(names) + 1):
        other = names[(start + k) % len(names)]
        if group[other] != group[experiencer]:
            return other
    raise PatchError(f"category {category.name!r} has a single group: no out-group persona to swap in")


def patched_gap_prompts(engine, category: str | Category, setting: str, events: Sequence[Event],
                        layers: Iterable[int], positions: str = SYSTEM_GROUP, modes: Sequence[str] = GAP_MODES,
                        chat_format: str | None = None, progress: str | None = None) -> pd.DataFrame:
    """Per-prompt rows of the headline experiment, for every perceiver × experiencer (no "a person") × event:
    mode ``person`` patches the persona with "a person" (same experiencer and event), mode ``swap`` with
    ``swap_source`` (in-group <-> out-group), at each layer alone, position group `positions`.
    Columns: mode, perceiver, experiencer, event_id, source_perceiver and the sweep columns."""
    category = get_category(category) if isinstance(category, str) else category
    for mode in modes:
        if mode not in GAP_MODES:
            raise PatchError(f"unknown mode {mode!r}; expected one of {', '.join(GAP_MODES)}")
    chat_format = chat_format or chat.detect_format(engine.tokenizer)
    layers = list(layers)
    targets, sources, specs, meta = [], [], [], []
    for mode in modes:
        for p in category.identities:
            for x in category.identities:
                a = UNSPECIFIED if mode == "person" else swap_source(category, p, x)
                for e in events:
                    targets.append(build(engine.tokenizer, setting, p, x, e, chat_format))
                    sources.append(build(engine.tokenizer, setting, a, x, e, chat_format))
                    specs.append([PatchSpec.parse(positions, (layer,)) for layer in layers])
                    meta.append({"mode": mode, "perceiver": p, "experiencer": x, "event_id": e.event_id,
                                 "source_perceiver": a})
    return evaluate(engine, targets, sources, specs, get_trie(engine.tokenizer, setting), meta, chat_format, progress)


def _matrix(frame: pd.DataFrame, category: Category, column: str) -> np.ndarray:
    """M0[p, x]: mean of `column` over events, perceivers and experiencers without "a person" (Table 1 order)."""
    names = list(category.identities)
    M0 = frame.pivot_table(index="perceiver", columns="experiencer", values=column, aggfunc="mean")
    return M0.reindex(index=names, columns=names).to_numpy(dtype=float)


def _gap_stats(M0: np.ndarray, same: np.ndarray) -> tuple[float, float, float, float, float]:
    """δ (z-scored), its one-sided permutation p (exact over every matching where the test can enumerate them, as for
    the 5 religions; else sampled) and null 95% interval, and the raw in-group minus out-group difference of M0 in
    intensity points; NaN where undefined (all cells equal, a cell missing)."""
    raw = float(M0[same].mean() - M0[~same].mean()) if np.isfinite(M0).all() else math.nan
    try:
        M = zscore(M0)
    except ValueError:
        return math.nan, math.nan, math.nan, math.nan, raw
    test = permutation_test(M, same, N_PERMUTATIONS, seed=0)
    p = test.p_value if test.p_exact is None else test.p_exact
    return empathy_gap(M, same), p, test.ci_low, test.ci_high, raw


def gap_table(frame: pd.DataFrame, category: str | Category) -> pd.DataFrame:
    """δ per (mode, layer) from patched_gap_prompts rows: M0[p, x] = mean expected intensity over events, z-scored
    without "a person" (behavioral.suites.intergroup.stats), δ_patched from the patched matrix beside δ_unpatched
    from the clean one.

    delta_removed = 1 - δ_patched / δ_unpatched (1: the gap is gone, 2: reversed); p_unpatched / p_patched: one-sided
    permutation p-values of each δ, exact over all n! matchings where every identity is its own group and n! is
    small enough (stats.EXACT_LIMIT), else sampled (rows and columns permuted, N_PERMUTATIONS, seed 0); null_ci_low/high: the 95%
    interval of the unpatched matrix's permutation null (δ values that arise with no in/out-group structure);
    gap_raw_*: mean in-group minus mean out-group cell of M0 in intensity points (not z-scored, so not inflated when
    patching shrinks the matrix's spread)."""
    category = get_category(category) if isinstance(category, str) else category
    same = category.in_group()
    rows = []
    for (mode, layer, positions), part in frame.groupby(["mode", "layer", "positions"], sort=False):
        d0, p0, lo, hi, r0 = _gap_stats(_matrix(part, category, "expected_clean"), same)
        d1, p1, _, _, r1 = _gap_stats(_matrix(part, category, "expected"), same)
        rows.append({"mode": mode, "layer": layer, "positions": positions, "delta_unpatched": d0,
                     "delta_patched": d1, "delta_change": d1 - d0,
                     "delta_removed": 1 - d1 / d0 if d0 else math.nan, "p_unpatched": p0, "p_patched": p1,
                     "null_ci_low": lo, "null_ci_high": hi, "gap_raw_unpatched": r0, "gap_raw_patched": r1,
                     "mean_expected": part["expected"].mean(), "mean_delta_expected": part["delta_expected"].mean(),
                     "n_prompts": len(part)})
    return pd.DataFrame(rows, columns=list(GAP_COLUMNS))


def patched_gap(engine, category: str | Category, setting: str, events: Sequence[Event], layers: Iterable[int],
                positions: str = SYSTEM_GROUP, modes: Sequence[str] = GAP_MODES, chat_format: str | None = None,
                progress: str | None = None) -> pd.DataFrame:
    """The headline: for each layer, patch every perceiver's persona with "a person" (and, separately, swap in-group
    and out-group personas), rebuild M0 and recompute δ. Columns GAP_COLUMNS: one row per (mode, layer)."""
    frame = patched_gap_prompts(engine, category, setting, events, layers, positions, modes, chat_format, progress)
    return gap_table(frame, category)


def plot_gap_by_layer(table: pd.DataFrame, out_dir: str | Path, stem: str = "delta_by_layer",
                      title: str | None = None) -> list[Path]:
    """δ_patched against layer, one line per mode, with δ_unpatched dashed; saved as PNG and PDF."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    labels = {"person": 'persona ← "a person"', "swap": "in-group ↔ out-group persona"}
    for mode, part in table.groupby("mode", sort=False):
        part = part.sort_values("layer")
        ax.plot(part["layer"], part["delta_patched"], marker="o", label=labels.get(mode, mode))
    if len(table):
        first = table.iloc[0]
        ax.axhline(float(first["delta_unpatched"]), color="k", ls="--", lw=1, label="δ unpatched")
        if np.isfinite(first["null_ci_low"]):
            ax.axhspan(float(first["null_ci_low"]), float(first["null_ci_high"]), color="grey", alpha=0.15,
                       label="95% permutation null (unpatched)")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("patched layer (resid_post)")
    ax.set_ylabel("δ (patched matrix)")
    ax.legend(fontsize=8)
    ax.set_title(title or "empathy gap δ after patching the persona at one layer")
    fig.tight_layout()
    return save_figure(fig, out_dir, stem)
