"""Synthetic per-prompt patching rows whose answer is known, for the tests and the calibration harness: a clean
matrix with a planted in-group gap and event noise, and per layer a patch that removes a known share of that gap."""

from __future__ import annotations

import numpy as np
import pandas as pd

from behavioral.suites.intergroup.groups import Category, get_category
from behavioral.suites.intergroup.stats import empathy_gap, zscore

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


def true_closed(share: float, category: Category | None = None) -> float:
    """The gap closed without noise: 1 - δ(patched) / δ(clean) of the noise-free matrices."""
    category = category or get_category("religion")
    base, same = base_matrix(len(category.identities)), category.in_group()
    return 1 - (empathy_gap(zscore(base + (1 - share) * GAP * same), same)
                / empathy_gap(zscore(base + GAP * same), same))
