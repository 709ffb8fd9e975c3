"""Synthetic per-prompt patching rows whose answer is known, for the tests and the calibration harness: a clean
matrix with a planted in-group gap and event noise, and per layer a patch that removes a known share of that gap."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from behavioral.suites.intergroup.groups import Category, get_category

GAP = 1.5  # rating points added to the in-group cells of the clean matrix


def base_matrix(n: int) -> np.ndarray:
    """Perceiver and experiencer effects without a gap: row effects 0..1, column effects 3..6 rating points."""
    return np.add.outer(np.linspace(0, 1, n), np.linspace(3, 6, n))


def patched_rows(closed: dict[int, float], n_events: int, noise: float = 0.3, seed: int = 0,
                 category: Category | None = None, patch_noise: float = 0.0) -> pd.DataFrame:
    """Per-prompt rows of one mode (person, system positions): clean = base + GAP on in-group cells + event noise
    N(0, noise²); at each layer the patch removes the share closed[layer] of the gap and adds its own noise
    N(0, patch_noise²) per prompt (0: a layer closing 0 changes nothing)."""
    category = category or get_category("religion")
    n = len(category.identities)
    same = category.in_group()
    rng = np.random.default_rng(seed)
    clean = base_matrix(n)[:, :, None] + GAP * same[:, :, None] + rng.normal(0, noise, (n, n, n_events))
    p, x, e = (a.ravel() for a in np.indices(clean.shape))
    names = np.array(category.identities)
    frames = []
    for layer, share in closed.items():
        patched = clean - share * GAP * same[:, :, None] + rng.normal(0, patch_noise, clean.shape)
        frames.append(pd.DataFrame({
            "mode": "person", "layer": layer, "positions": "system", "perceiver": names[p], "experiencer": names[x],
            "event_id": [f"e{k}" for k in e], "expected_clean": clean.ravel(), "expected": patched.ravel(),
            "delta_expected": (patched - clean).ravel()}))
    return pd.concat(frames, ignore_index=True)


# --- a steering world: linear final-token states and a linear readout of the rating ---------------------------

def cells_of(category: Category) -> pd.DataFrame:
    """Every (perceiver, experiencer) cell, "a person" included, Table 1 order."""
    names = category.with_unspecified
    return pd.DataFrame({"perceiver": np.repeat(names, len(names)), "experiencer": np.tile(names, len(names))})


def steering_states(plant: float, n_events: int = 30, d: int = 16, seed: int = 0, shared: bool = True,
                    category: Category | None = None, spread: float = 1.0,
                    noise: float = 0.5) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """[cells, events, d] states (persona + experiencer vectors, N(0, spread²) per coordinate, + N(0, noise²) per
    prompt), plus `plant` × u on every in-group cell (`shared`: one in-group feature) or `plant` × its own unit
    vector g_p on identity p's in-group cell (no shared feature); the readout direction of the gap (u, or the sum of
    the g_p over √n); and the cells. One identity per group (religion, nationality): an in-group cell is a named
    identity rating itself. The same seed draws the same vectors at any `spread` and `noise`."""
    category = category or get_category("religion")
    rng = np.random.default_rng(seed)
    cells = cells_of(category)
    names = category.with_unspecified
    persona, target = spread * rng.standard_normal((len(names), d)), spread * rng.standard_normal((len(names), d))
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    own = rng.standard_normal((len(names), d))
    own /= np.linalg.norm(own, axis=1, keepdims=True)
    p = cells["perceiver"].map(names.index).to_numpy()
    x = cells["experiencer"].map(names.index).to_numpy()
    ingroup = ((p == x) & (p > 0))[:, None, None]
    states = persona[p][:, None] + target[x][:, None] + noise * rng.standard_normal((len(cells), n_events, d))
    if shared:
        return states + plant * ingroup * u, u, cells
    return states + plant * ingroup * own[p][:, None], own[1:].sum(axis=0) / np.sqrt(len(names) - 1), cells


def projection_rows(states: np.ndarray, cells: pd.DataFrame, readout: np.ndarray, directions: dict[str, np.ndarray],
                    events: list[str], setting: str = "P0S0T0", category: str = "religion",
                    rating: Callable[[np.ndarray], np.ndarray] | None = None) -> pd.DataFrame:
    """Result rows of a 'model' (`rating` of the states [cells, events, d], by default the linear 50 + readout ·
    state) unsteered and with each direction projected
    out at layer 1 (conditions named as the steer study names them: ``L1 project``, ``... matching m``, ``... held
    out j``, ``... random k``), as intergroup's steering rows of a score-mode rerun (every answer numeric)."""
    frames = []
    for condition, vector in [("unsteered", None), *directions.items()]:
        h = states
        if vector is not None:
            unit = vector / np.linalg.norm(vector)
            h = states - (states @ unit)[..., None] * unit
        ratings = 50 + h @ readout if rating is None else rating(h)  # [cells, events]
        index = lambda kind: int(condition.rsplit(" ", 1)[1]) if kind in condition else -1  # noqa: E731
        frames.append(pd.DataFrame({
            "perceiver": np.repeat(cells["perceiver"].to_numpy(), len(events)),
            "experiencer": np.repeat(cells["experiencer"].to_numpy(), len(events)),
            "event_id": np.tile(events, len(cells)), "intensity": ratings.ravel(),
            "expected_intensity": ratings.ravel(), "score_intensity": ratings.ravel(), "response": None,
            "refused": False, "truncated": np.nan, "numeric_mass": 1.0, "condition": condition, "category": category,
            "setting": setting, "layer": -1 if vector is None else 1, "project": vector is not None,
            "random": max(0, index("random")), "coef": np.nan, "one_sided": False,
            "matching": index("matching"), "held_out": index("held out")}))
    return pd.concat(frames, ignore_index=True)
