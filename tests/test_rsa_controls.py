"""The RSA study's controls (issue 24): the behaviour's split-half noise ceiling recovers a planted reliability and
finds none in noise; Spearman-Brown and the ceiling's summary are the literal formulas; the lexical labels group the
names a toy tokenizer splits alike, and the continents cover intergroup's nationalities; p_fwe is the literal
max-statistic loop over the layers for the plain and the label-partial tests; the study reports all of it, and says
why a run of 3 events has no ceiling."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from behavioral.rundir.manifest import Manifest
from behavioral.analysis import Run
from behavioral.cli.commands import main
from interp.rsa import lexical, reliability
from interp.rsa.study import p_floor
from behavioral.suites.intergroup import SUITE
from behavioral.suites.intergroup.groups import get_category
from interp import rsa

N, F = 20, 8  # identities, behaviour features of the planted data


def planted(sigma: float, events: int, seed: int, structure: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A true behaviour profile per identity [N, F] (times `structure`) and `events` noisy observations of it
    [events, N, F] with noise `sigma`."""
    rng = np.random.default_rng(seed)
    truth = structure * rng.normal(size=(N, F))
    return truth, truth[None] + sigma * rng.normal(size=(events, N, F))


def ceiling_of(data: np.ndarray, n_splits: int = 50, seed: int = 0) -> rsa.Ceiling:
    """The split-half ceiling of the event means' euclidean distances."""
    masks = rsa.split_halves(len(data), n_splits, seed)
    return rsa.noise_ceiling((rsa.distance_matrix(data[m].mean(0), "euclidean"),
                              rsa.distance_matrix(data[~m].mean(0), "euclidean")) for m in masks)


def replicated(truth: np.ndarray, sigma: float, events: int, draws: int = 200, seed: int = 99) -> float:
    """The reliability the ceiling estimates, by brute force: the mean Spearman r between the distance matrices of
    two independent samples of `events` events each."""
    rng = np.random.default_rng(seed)

    def sample() -> np.ndarray:
        return rsa.distance_matrix((truth[None] + sigma * rng.normal(size=(events, *truth.shape))).mean(0),
                                   "euclidean")

    return float(np.mean([rsa.rsa(sample(), sample()) for _ in range(draws)]))


# --- the noise ceiling ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sigma, tolerance", [(1.0, 0.05), (2.0, 0.15)])
def test_the_ceiling_recovers_a_planted_reliability(sigma, tolerance):
    truth, data = planted(sigma, events=16, seed=1)
    expected = replicated(truth, sigma, events=16)
    ceiling = ceiling_of(data)
    assert 0.4 < expected < 0.95  # the planted reliability is neither trivial nor perfect
    assert ceiling.mean == pytest.approx(expected, abs=tolerance)
    low, high = ceiling.interval
    assert low <= ceiling.mean <= high and ceiling.n_defined == 50


def test_pure_noise_has_a_ceiling_near_zero_and_no_significant_rsa():
    _, data = planted(1.0, events=16, seed=2, structure=0.0)  # no identity differs from another but by noise
    ceiling = ceiling_of(data)
    assert abs(ceiling.mean) < 0.2
    geometry = np.random.default_rng(3).normal(size=(3, N, 16))  # three layers of unrelated identity vectors
    table = rsa.layer_rsa(geometry, data.mean(0), n_permutations=500, seed=0)
    assert (table.p_fwe > 0.05).all()  # no layer is significant once the layers looked at are paid for
    assert table.p.min() < 0.05  # though one layer's own p is: what p_fwe is for
    hits = []
    for seed in range(40):  # the family-wise error rate over noise behaviours stays near 5%
        _, noise = planted(1.0, events=4, seed=100 + seed, structure=0.0)
        layers = np.random.default_rng(200 + seed).normal(size=(3, N, 16))
        hits.append(rsa.layer_rsa(layers, noise.mean(0), n_permutations=200, seed=seed).p_fwe.min() < 0.05)
    assert np.mean(hits) <= 0.125
    assert math.isnan(rsa.against_ceiling(0.3, -0.1)) and math.isnan(rsa.against_ceiling(0.3, float("nan")))


def test_spearman_brown_and_the_ceiling_are_the_literal_formulas():
    for r in (-0.5, 0.0, 0.3, 0.8, 1.0):
        assert rsa.spearman_brown(r) == pytest.approx(2 * r / (1 + r))
    assert rsa.spearman_brown(0.5, parts=3) == pytest.approx(3 * 0.5 / (1 + 2 * 0.5))
    _, data = planted(2.0, events=8, seed=4)
    masks = rsa.split_halves(8, 20, seed=5)
    iu = np.triu_indices(N, k=1)
    literal = []
    for m in masks:
        a = rsa.distance_matrix(data[m].mean(0), "euclidean")[iu]
        b = rsa.distance_matrix(data[~m].mean(0), "euclidean")[iu]
        r = spearmanr(a, b).statistic
        literal.append(2 * r / (1 + r))
    ceiling = ceiling_of(data, 20, seed=5)
    np.testing.assert_allclose(ceiling.reliability, literal, atol=1e-12)
    assert ceiling.mean == pytest.approx(np.mean(literal))
    assert ceiling.interval == pytest.approx(tuple(np.percentile(literal, [2.5, 97.5])))
    assert rsa.against_ceiling(0.3, ceiling.mean) == pytest.approx(0.3 / math.sqrt(np.mean(literal)))


def test_split_halves_are_distinct_balanced_and_all_of_them_where_few():
    every = rsa.split_halves(6, 100, seed=0)
    assert len(every) == math.comb(6, 3) // 2 and every.sum(1).tolist() == [3] * 10
    as_sets = {frozenset(np.flatnonzero(m)) for m in every} | {frozenset(np.flatnonzero(~m)) for m in every}
    assert len(as_sets) == 20  # no split twice, not even as its complement
    assert len(rsa.split_halves(5, 100, seed=0)) == math.comb(5, 2)  # odd: halves of 2 and 3
    drawn = rsa.split_halves(16, 30, seed=1)
    assert len(drawn) == 30 and len({frozenset(np.flatnonzero(m)) for m in drawn}) == 30
    np.testing.assert_array_equal(drawn, rsa.split_halves(16, 30, seed=1))  # seeded
    with pytest.raises(ValueError, match="at least 2 items"):
        rsa.split_halves(1, 10)


# --- the ceiling of a run, through the suite's behaviour hook ------------------------------------------------------

def _run(events: int, noise: float, seed: int = 0) -> Run:
    """Religion P0S0T0 rows: intensity = 10·perceiver + experiencer + noise per event."""
    names = get_category("religion").with_unspecified
    rng = np.random.default_rng(seed)
    rows = [{"setting": "P0S0T0", "category": "religion", "perceiver": p, "experiencer": x, "event_id": f"e{e}",
             "emotion": "joy", "intensity": v, "expected_intensity": v}
            for e in range(events) for i, p in enumerate(names) for j, x in enumerate(names)
            for v in [10.0 * i + j + noise * rng.normal()]]
    return Run("hand", Path("hand"), Manifest({"suite": "intergroup", "mode": "score"}, {}, {}), pd.DataFrame(rows), None)


def test_a_runs_halves_are_the_hooks_own_event_selection():
    run, names = _run(6, noise=5.0), list(get_category("religion").identities)
    frame = SUITE.behaviour(run, event_id=["e0", "e2", "e5"])
    by_hook = frame[frame.kind == "persona"].set_index("identity").loc[names].drop(columns="kind").dropna(axis=1)
    half = reliability._half(run, "persona", names, {}, "event_id", ["e0", "e2", "e5"])
    np.testing.assert_allclose(half.to_numpy(), by_hook.to_numpy())


@pytest.mark.parametrize("noise, low, high", [(0.5, 0.9, 1.0), (1e4, -0.6, 0.6)])
def test_a_runs_ceiling_follows_its_noise(noise, low, high):
    run, names = _run(8, noise), list(get_category("religion").identities)
    features = [f"rates {x} (religion, P0S0T0)" for x in get_category("religion").with_unspecified]
    split = reliability.behaviour_ceiling(run, "persona", names, features, {}, "event_id", "euclidean", 20, 0)
    assert split.n_events == 8 and split.note is None and len(split.splits) == 20
    assert low <= split.ceiling.mean <= high


def test_a_run_of_three_events_has_no_ceiling_and_says_why():
    run, names = _run(3, noise=1.0), list(get_category("religion").identities)
    split = reliability.behaviour_ceiling(run, "persona", names, ["x"], {}, "event_id", "euclidean", 20, 0)
    assert split.ceiling is None
    assert split.note == "3 values of event_id: a split-half ceiling needs at least 4, 2 per half"
    assert "--split-by" in reliability.behaviour_ceiling(run, "persona", names, ["x"], {}, None, "euclidean", 20,
                                                         0).note
    with pytest.raises(ValueError, match="--split-by 'colour': hand's rows have no such field"):
        reliability.split_field(run, "colour")


def test_one_event_is_named_in_the_singular_with_the_count_a_ceiling_needs():
    few = reliability.too_few(1, "event_id")
    assert few == "1 value of event_id: a split-half ceiling needs at least 4, 2 per half"
    assert reliability.too_few(4, "event_id") is None


def test_the_plan_of_one_event_says_it_gives_no_ceiling(pinned_run, tmp_path, capsys):
    assert main(["interp", "rsa", str(pinned_run), "--out", str(tmp_path / "out"), "--where", "category=race",
                 "--split-by", "category", "--permutations", "10", "--no-lexical", "--control", "none",
                 "--layers", "last", "--no-progress"]) == 0
    plan = capsys.readouterr().out
    assert "; no split-half ceiling (1 value of category: a split-half ceiling needs at least 4, 2 per half)" in plan
    assert "split in halves" not in plan


# --- lexical labels ------------------------------------------------------------------------------------------------

class ToyTokenizer:
    """A fast-tokenizer stand-in: every word (with the space before it) is split into its first three letters and
    the rest, so words sharing three letters share a first token."""

    is_fast = True

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=True):
        spans = []
        for word in re.finditer(r"\S+", text):
            start, cut, end = word.start(), min(word.start() + 3, word.end()), word.end()
            spans += [(start - 1 if start else start, cut)] + ([(cut, end)] if cut < end else [])
        ids = [self.vocab.setdefault(text[a:b], len(self.vocab)) for a, b in spans]
        return {"input_ids": ids, "offset_mapping": spans}

    def convert_ids_to_tokens(self, i):
        return {v: k for k, v in self.vocab.items()}[i]


def test_first_tokens_group_the_names_a_toy_tokenizer_splits_alike():
    names = ["a person from the United States", "a person from the United Kingdom", "a person from Germany",
             "a person from Georgia"]
    assert lexical.head_offsets(names) == [18, 18, 14, 14]  # "a person from" shared, "the" skipped
    tokens = lexical.first_tokens(ToyTokenizer(), names)
    assert tokens == [" Uni", " Uni", " Ger", " Geo"]
    np.testing.assert_array_equal(rsa.label_matrix(tokens), [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 1],
                                                              [1, 1, 1, 0]])
    race = ["a Latino", "a Latino American", "a Latina", "an Asian", "an Asian person", "a White person"]
    assert lexical.first_tokens(ToyTokenizer(), race) == [" Lat", " Lat", " Lat", " Asi", " Asi", " Whi"]
    assert lexical.head_offsets(["Islam", "Buddhism"]) == [0, 0]  # nothing shared, no article


def test_the_continents_cover_intergroups_nationalities():
    nationality = list(get_category("nationality").identities)
    labels = lexical.continents(nationality)
    assert len(labels) == 21 and set(labels) == {"Americas", "Europe", "Asia", "Africa"}
    continent_of = dict(zip(nationality, labels))
    for country, continent in (("Egypt", "Africa"), ("Russia", "Europe"), ("Mexico", "Americas"),
                               ("the Philippines", "Asia"), ("Israel", "Asia"), ("the United Kingdom", "Europe")):
        assert continent_of[f"a person from {country}"] == continent
    assert lexical.continents(["a Jew", *nationality]) is None


# --- family-wise p -------------------------------------------------------------------------------------------------

def test_p_fwe_is_the_literal_max_over_layers_beside_each_p():
    rng = np.random.default_rng(7)
    behaviour = rng.normal(size=(10, 5))
    layers = np.stack([rng.normal(size=(10, 6)), np.hstack([behaviour, rng.normal(size=(10, 1))]),
                       rng.normal(size=(10, 6))])
    labels = list("aabbccddee")
    Z = rsa.label_matrix(labels)
    table = rsa.layer_rsa(layers, behaviour, metric="euclidean", n_permutations=300, seed=2,
                          controls={"first_token": Z})
    columns = list(table.columns)
    for prefix in ("", "first_token_partial_"):
        at = columns.index(f"{prefix}p")
        assert columns[at + 1:at + 3] == [f"{prefix}p_fwe", f"{prefix}p_holm"]
    D_b = rsa.distance_matrix(behaviour, "euclidean")
    for prefix, test in (("", lambda D: rsa.mantel(D, D_b, 300, 2, return_null=True)),
                         ("first_token_partial_", lambda D: rsa.partial_mantel(D, D_b, Z, 300, 2, return_null=True))):
        results = [test(rsa.distance_matrix(X, "euclidean", center=True)) for X in layers]
        observed, nulls = [r for r, _, _ in results], [null for _, _, null in results]
        for k, r in enumerate(observed):
            exceed = 0
            for b in range(len(nulls[0])):
                largest = max(null[b] for null in nulls)
                exceed += largest >= r - 1e-12
            assert table[f"{prefix}p_fwe"][k] == pytest.approx((1 + exceed) / (len(nulls[0]) + 1))
        assert (table[f"{prefix}p_fwe"] >= table[f"{prefix}p"]).all()
    assert table.p_fwe[1] < 0.01  # the planted layer survives the correction


def test_p_floor():
    assert p_floor(5, 1000) == (119, 1 / 120, True)
    assert p_floor(18, 1000) == (1000, 1 / 1001, False)


# --- the study -----------------------------------------------------------------------------------------------------

def test_the_study_reports_its_controls_and_why_three_events_have_no_ceiling(pinned_run, tmp_path):
    out = tmp_path / "out"
    assert main(["interp", "rsa", str(pinned_run), "--out", str(out), "--where", "category=race", "--where",
                 "setting=P0S0T0", "--permutations", "30", "--no-progress"]) == 0
    table = pd.read_csv(out / "rsa.csv")
    columns = list(table.columns)
    for p in [c for c in columns if c == "p" or c.endswith("_p")]:
        assert columns[columns.index(p) + 1] == f"{p}_fwe"
    ceiling = pd.read_csv(out / "noise_ceiling.csv").iloc[0]
    assert ceiling.n_events == 3 and math.isnan(ceiling.ceiling) and "at least 4, 2 per half" in ceiling.note
    summary = pd.read_csv(out / "rsa_summary.csv").iloc[0]
    embed = table[table.hook == "hook_embed"].iloc[0]
    assert summary.embed_rsa == pytest.approx(embed.rsa) and summary.embed_p_fwe == pytest.approx(embed.p_fwe)
    labels = pd.read_csv(out / "lexical_controls.csv")
    assert labels.label.tolist() == ["first_token"] and labels.n_groups[0] < 18
    text = (out / "report.md").read_text()
    assert "## What this can and cannot show" in text and "What these numbers cannot show" not in text
    assert "p floor 0.0323" in text and "no split-half ceiling (3 values of event_id" in text
    assert main(["interp", "rsa", str(pinned_run), "--out", str(tmp_path / "bare"), "--where", "category=race",
                 "--permutations", "30", "--no-lexical", "--splits", "0", "--layers", "last", "--no-progress"]) == 0
    text = (tmp_path / "bare" / "report.md").read_text()
    assert "--no-lexical" in text and "(not computed (--splits 0))" in text and "hook_embed is not among" in text
    assert not (tmp_path / "bare" / "lexical_controls.csv").exists()


@pytest.mark.slow
def test_the_study_reports_the_ceiling_of_a_tiny_run_of_six_events(tiny_model_dir, tmp_path):
    from behavioral.runner import run as run_mod
    from behavioral.analysis.study import read_study_runs
    from behavioral.suites.intergroup import Options as IntergroupOptions

    run_dir = tmp_path / "run"
    config = run_mod.RunConfig(suite="intergroup", model=str(tiny_model_dir), mode="score", device="cpu",
                               dtype="fp32", batch_size=16, capture=("persona",), max_new_tokens=4,
                               options=IntergroupOptions(categories=("religion",), settings=("P0S0T0",),
                                                         limit_events=6))
    run_mod.run(config, run_dir, progress=False)
    out = tmp_path / "out"
    assert main(["interp", "rsa", str(run_dir), "--out", str(out), "--permutations", "50", "--no-progress"]) == 0
    ceiling = pd.read_csv(out / "noise_ceiling.csv").iloc[0]
    (run,) = read_study_runs([run_dir])
    names = list(get_category("religion").identities)
    features = [f"rates {x} (religion, P0S0T0)" for x in get_category("religion").with_unspecified]
    direct = reliability.behaviour_ceiling(run, "persona", names, features, {}, "event_id", "euclidean", 100, 0)
    assert ceiling.n_events == 6 and ceiling.n_splits == 10  # every distinct split of 6 events in halves
    assert ceiling.ceiling == pytest.approx(direct.ceiling.mean)
    assert ceiling.rsa_over_ceiling == pytest.approx(ceiling.rsa / math.sqrt(ceiling.ceiling))
    assert len(pd.read_csv(out / "noise_ceiling_splits.csv")) == 10
    assert "split-half ceiling" in (out / "report.md").read_text()
