"""Wilson's score interval of a proportion of independent items (accuracy over questions or samples): unlike a
bootstrap it stays informative at 0 or all correct and on a handful of items."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import norm

from behavioral.analysis.bootstrap import LEVEL


def wilson(successes, n, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(low, high): Wilson's score interval at `level` of `successes` out of `n` (arrays or numbers, elementwise;
    NaN where n is 0)."""
    k, n = np.asarray(successes, dtype=float), np.asarray(n, dtype=float)
    z = norm.ppf(1 - (1 - level) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low, high = np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)
    return np.where(n > 0, low, np.nan), np.where(n > 0, high, np.nan)


def item_share(correct: pd.Series, items: pd.Series, level: float = LEVEL) -> tuple[float, float, float]:
    """(share, low, high): the share of `correct` (bool or 0/1, NaN rows left out) and its Wilson interval, each row
    one independent item named by `items`; the interval is NaN where an item has several rows (answers sampled for
    one item are not independent items), everything NaN without rows."""
    kept = correct.notna()
    correct, items = correct[kept].astype(float), items[kept]
    if correct.empty:
        return float("nan"), float("nan"), float("nan")
    share = float(correct.mean())
    if items.duplicated().any():
        return share, float("nan"), float("nan")
    low, high = wilson(correct.sum(), len(correct), level)
    return share, float(low), float(high)
