"""Seed 000's statistics against the authors' analysis notebook and tsne.py, reproduced rule for rule as the oracle.

The oracle below follows the notebook's own steps on plain Python lists (one intensity list per perceiver and
experiencer, -1 where the model refused): the full excluded-id set over every cell with "a person" (M⁰, M, Tables 3,
6, 7, the t-test mask), the no-default set over the cells without "a person" (δ and the t-SNE input), each cell the
sum over kept ids divided by their count and rounded with round(x, 2), np.mean / np.std of the matrix, and
scipy.stats.ttest_rel against the in-group cells with Bonferroni at 0.05 / n². `rounding=False` drops the round().
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from behavioral.suites.intergroup import figures, tables
from behavioral.suites.intergroup import setting_analysis as analysis
from behavioral.suites.intergroup.groups import UNSPECIFIED, get_category

N_EVENTS = 40


# --- the oracle ---------------------------------------------------------------------------------------------------

def oracle_excluded(lists: dict, names: list[str]) -> set[int]:
    """Ids of events refused (-1) in any cell among `names` x `names`."""
    excluded = []
    for persona in names:
        for experiencer in names:
            excluded += [idx for idx, v in enumerate(lists[persona, experiencer]) if v == -1]
    return set(excluded)


def oracle_matrix(lists: dict, names: list[str], excluded: set[int], rounding: bool) -> np.ndarray:
    matrix = np.zeros((len(names), len(names)))
    for i, persona in enumerate(names):
        for j, experiencer in enumerate(names):
            selected = [v for idx, v in enumerate(lists[persona, experiencer]) if idx not in excluded]
            mean = sum(selected) / len(selected)
            matrix[i][j] = round(mean, 2) if rounding else mean
    return matrix


def oracle_mask(lists: dict, names: list[str], excluded: set[int]) -> np.ndarray:
    """The notebook's heatmap mask: True where a cell is hidden."""
    by_persona = np.zeros((len(names), len(names)))
    by_experiencer = np.zeros((len(names), len(names)))
    for i, persona in enumerate(names):
        for j, experiencer in enumerate(names):
            if persona == experiencer or UNSPECIFIED in (persona, experiencer):
                continue
            selected = [v for idx, v in enumerate(lists[persona, experiencer]) if idx not in excluded]
            own = [v for idx, v in enumerate(lists[persona, persona]) if idx not in excluded]
            by_persona[i][j] = sps.ttest_rel(own, selected).pvalue
            other = [v for idx, v in enumerate(lists[experiencer, experiencer]) if idx not in excluded]
            by_experiencer[i][j] = sps.ttest_rel(other, selected).pvalue
    threshold = 0.05 / len(names) ** 2
    return np.invert((by_persona < threshold) & (by_experiencer < threshold))


def oracle_delta(matrix: np.ndarray, same) -> float:
    inside, outside = [], []
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[0]):
            (inside if same(i, j) else outside).append(matrix[i, j])
    return sum(inside) / len(inside) - sum(outside) / len(outside)


def notebook(lists: dict, category: str, rounding: bool = True) -> dict:
    """Every number the notebook prints for one category and setting, and tsne.py's input."""
    groups = list(get_category(category).identities)
    full = [UNSPECIFIED] + groups
    excluded = oracle_excluded(lists, groups + [UNSPECIFIED])
    M0 = oracle_matrix(lists, full, excluded, rounding)
    mean, std = np.mean(M0), np.std(M0)
    M = (M0 - mean) / std
    excluded_delta = oracle_excluded(lists, groups)
    filtered = oracle_matrix(lists, groups, excluded_delta, rounding)
    filtered = (filtered - np.mean(filtered)) / np.std(filtered)
    group_of = get_category(category).group_of
    return {
        "excluded_share": len(excluded) / len(lists[full[0], full[0]]),
        "mask": oracle_mask(lists, full, excluded),
        "mean": mean, "std": std, "M": M, "min": np.amin(M), "max": np.amax(M),
        "delta": oracle_delta(filtered, lambda i, j: group_of[groups[i]] == group_of[groups[j]]),
        "tsne_input": filtered,
    }


# --- synthetic results ----------------------------------------------------------------------------------------------

def synthetic(category: str, refusals: str, seed: int = 0) -> tuple[dict, pd.DataFrame]:
    """Integer intensities with an in-group effect, and refusals placed only in "a person" cells ("default"), only
    among the identities ("grid"), or both; as the notebook's lists and as result rows."""
    cat = get_category(category)
    rng = np.random.default_rng(seed)
    base = rng.integers(20, 80, N_EVENTS)
    lists, rows = {}, []
    for p in cat.with_unspecified:
        for x in cat.with_unspecified:
            same = p != UNSPECIFIED and x != UNSPECIFIED and cat.group_of[p] == cat.group_of[x]
            values = np.clip(base + 8 * same + rng.integers(-6, 7, N_EVENTS), 0, 100)
            refuse = np.zeros(N_EVENTS, dtype=bool)
            n = len(cat.identities)  # about a quarter of the events refused somewhere in each kind of cell
            if UNSPECIFIED in (p, x) and refusals in ("default", "both"):
                refuse |= rng.random(N_EVENTS) < 0.3 / (2 * n + 1)
            if UNSPECIFIED not in (p, x) and refusals in ("grid", "both"):
                refuse |= rng.random(N_EVENTS) < 0.3 / n**2
            lists[p, x] = [-1 if r else int(v) for v, r in zip(values, refuse)]
            rows += [{"perceiver": p, "experiencer": x, "event_id": f"e{e:03d}", "intensity": np.nan if r else float(v),
                      "refused": bool(r), "response": "I cannot" if r else str(v), "truncated": False,
                      "numeric_mass": np.nan} for e, (v, r) in enumerate(zip(values, refuse))]
    return lists, pd.DataFrame(rows)


CASES = [(c, r) for c in ("religion", "nationality", "race") for r in ("default", "grid", "both")]


@pytest.mark.parametrize("rounding", [True, False])
@pytest.mark.parametrize("category, refusals", CASES)
def test_statistics_equal_the_notebook(category, refusals, rounding):
    lists, rows = synthetic(category, refusals)
    want = notebook(lists, category, rounding)
    event_ids = tuple(sorted(rows["event_id"].unique()))
    got = analysis.analyze_setting(rows, get_category(category), "P0S0T0", event_ids, n_permutations=200,
                                   round_cells=2 if rounding else None)
    assert got.excluded_rate == pytest.approx(want["excluded_share"], abs=1e-15)
    np.testing.assert_array_equal(~got.shown, want["mask"])
    assert got.summary["mean"] == pytest.approx(want["mean"], abs=1e-12)
    assert got.summary["std"] == pytest.approx(want["std"], abs=1e-12)
    np.testing.assert_allclose(got.M, want["M"], atol=1e-12)
    assert (got.summary["z_min"], got.summary["z_max"]) == pytest.approx((want["min"], want["max"]), abs=1e-12)
    assert got.permutation.delta == pytest.approx(want["delta"], abs=1e-12)
    np.testing.assert_allclose(got.M_delta, want["tsne_input"], atol=1e-12)
    for name, column, key in (("table3_mean_std", "mean", "mean"), ("table3_mean_std", "std", "std"),
                              ("table7_min_max", "z_min", "min"), ("table7_min_max", "z_max", "max")):
        value = tables.tidy_table(name, [got])[column][0]  # full precision; rounded, the digits the notebook prints
        assert value == pytest.approx(want[key], abs=1e-12) and round(value, 2) == round(want[key], 2)
    table6 = tables.tidy_table("table6_refusal", [got])
    assert table6["excluded_events_pct"][0] == pytest.approx(100 * want["excluded_share"], abs=1e-12)


def test_refusals_in_a_person_cells_leave_delta_defined_and_unchanged():
    """The fix the issue names: refusals only where "a person" is drop events from M⁰ but not from δ."""
    lists, rows = synthetic("religion", "default")
    clean = rows.assign(intensity=rows["intensity"].fillna(50.0), refused=False)
    event_ids = tuple(sorted(rows["event_id"].unique()))
    cat = get_category("religion")
    with_refusals = analysis.analyze_setting(rows, cat, "P0S0T0", event_ids, n_permutations=50)
    without = analysis.analyze_setting(clean, cat, "P0S0T0", event_ids, n_permutations=50)
    assert with_refusals.keep.sum() < N_EVENTS and with_refusals.keep_delta.all()
    assert with_refusals.permutation.delta == without.permutation.delta


def test_every_event_refused_in_a_person_cells_still_gives_delta():
    _, rows = synthetic("religion", "none")
    person = rows["perceiver"] == UNSPECIFIED
    rows.loc[person, "intensity"] = np.nan
    rows.loc[person, "refused"] = True
    event_ids = tuple(sorted(rows["event_id"].unique()))
    a = analysis.analyze_setting(rows, get_category("religion"), "P0S0T0", event_ids, n_permutations=50)
    assert a.M is None and "no event kept" in a.matrix_reason and a.excluded_rate == 1.0
    assert a.permutation is not None and a.permutation.delta > 0 and a.delta_reason is None


def test_figure4_embeds_deltas_matrix_with_the_authors_tsne(monkeypatch):
    lists, rows = synthetic("nationality", "both")
    event_ids = tuple(sorted(rows["event_id"].unique()))
    a = analysis.analyze_setting(rows, get_category("nationality"), "P0S0T0", event_ids, n_permutations=50)
    seen = {}
    real = figures.TSNE

    def spy(**params):
        seen["params"] = params
        tsne = real(**params)
        fit = tsne.fit_transform
        tsne.fit_transform = lambda X: (seen.setdefault("X", X), fit(X))[1]
        return tsne

    monkeypatch.setattr(figures, "TSNE", spy)
    figures.tsne_nationality(a)
    assert seen["params"] == {"n_components": 2, "perplexity": 5, "random_state": 42}
    np.testing.assert_array_equal(seen["X"], a.M_delta)
    np.testing.assert_allclose(seen["X"], notebook(lists, "nationality", rounding=False)["tsne_input"], atol=1e-12)
    settings = figures.tsne_settings()
    assert settings["params"]["random_state"] == 42 and settings["params"]["perplexity"] == 5
    assert settings["params"]["init"] and settings["sklearn"]  # sklearn's defaults, recorded for the manifest
