"""The identity atlas: known answers on synthetic sources (planted concepts ranked first, random ones at chance),
the shipped mapping against each suite's data, and the study end to end on a tiny capture run, bad input refused."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.distance import pdist, squareform

from behavioral.cli import commands as cli
from behavioral.analysis.studies import get_study
from behavioral.analysis.study import run_study
from interp.atlas.study import MAP_FILE, Options, read_map
from interp.atlas import Source, atlas, plot_heatmap, shared_concepts
from interp.rsa import rsa

HOOKS = ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def _planted(rng, k: int = 6, extra: int = 4, d: int = 32, noise: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """Two sources' vectors [hooks, k + extra, d] whose first k identities share a direction per concept (drawn in a
    3-dimensional subspace, so that their distances differ widely)."""
    base = rng.normal(size=(len(HOOKS), k, 3)) @ rng.normal(size=(3, d))
    return tuple(np.concatenate([base + noise * rng.normal(size=base.shape),
                                 rng.normal(size=(len(HOOKS), extra, d))], axis=1) for _ in range(2))


def _source(prefix: str, vectors: np.ndarray, hooks=HOOKS) -> Source:
    return Source(vectors, [f"{prefix}{i}" for i in range(vectors.shape[1])], hooks)


def _map(prefix: str, k: int) -> dict[str, str]:
    return {f"{prefix}{i}": f"c{i}" for i in range(k)}


def test_a_planted_concept_is_ranked_first_and_the_geometries_agree():
    rng = np.random.default_rng(0)
    a, b = _planted(rng)
    result = atlas({"A": _source("a", a), "B": _source("b", b)}, {"A": _map("a", 6), "B": _map("b", 6)},
                   n_permutations=199, seed=0)
    assert (result.concepts["rank"] == 1).all() and len(result.concepts) == 2 * 6 * len(HOOKS)
    assert (result.concepts["p_rank"] == 1 / 10).all()  # rank 1 of 10 candidates
    rank = result.closeness[result.closeness["statistic"] == "mean_rank"]
    assert (rank["value"] == 1).all() and (rank["chance"] == 5.5).all()
    assert (rank["p_fwe"] == 1 / 200).all()  # only the identity among 6! shuffles keeps rank 1; seed 0 never draws it
    cosine = result.closeness[result.closeness["statistic"] == "mean_cosine"]
    assert len(cosine) == len(HOOKS) and (cosine["value"] > 0.8).all() and (cosine["p_fwe"] == 1 / 200).all()
    geometry = result.geometry
    assert len(geometry) == len(HOOKS) and (geometry["value"] > 0.9).all() and (geometry["p_fwe"] < 0.05).all()
    assert (geometry["p_fwe"] >= geometry["p"]).all() and (geometry["p_floor"] == 1 / 200).all()
    assert result.untestable.empty
    titles = {plot_heatmap(geometry, ["A", "B"], layer).axes[0].get_title() for layer in
              (-1, 1, "last", "blocks.1.hook_resid_post")}  # -1: the last block the table holds
    assert titles == {"RSA between sources at blocks.1.hook_resid_post (* p_fwe < 0.05; grey: not testable)\n"
                      "n=6 concepts per pair"}
    with pytest.raises(ValueError, match=r"^hook: block 2 was not tested; tested: \[0, 1\]$"):
        plot_heatmap(geometry, ["A", "B"], 2)


def test_random_sources_rank_at_chance_with_uniform_p():
    rng = np.random.default_rng(1)
    ranks, p = [], []
    for _ in range(150):
        a, b = rng.normal(size=(2, 1, 10, 8))
        result = atlas({"A": _source("a", a, HOOKS[:1]), "B": _source("b", b, HOOKS[:1])},
                       {"A": _map("a", 6), "B": _map("b", 6)}, n_permutations=99, seed=int(rng.integers(1000)))
        ranks += result.concepts.loc[result.concepts["source_a"] == "A", "rank"].tolist()
        p.append(result.closeness.set_index("statistic").loc["mean_cosine", "p"])
    assert abs(np.mean(ranks) - 5.5) < 0.4  # (10 + 1) / 2; the standard error of 900 ranks is 0.1
    assert abs(np.mean(p) - 0.5) < 0.07 and np.mean(np.array(p) < 0.1) < 0.2


def test_cosine_and_rank_are_read_after_centring_on_the_source_mean():
    # centred already (mean zero), so the numbers are hand-computable
    a = np.array([[[1.0, 0], [-1, 0], [0, 1], [0, -1]]])
    b = np.array([[[2.0, 0], [-2, 0], [0, 3], [0, -3]]])
    result = atlas({"A": Source(a + 5, list("pqrs"), HOOKS[:1]), "B": Source(b - 7, list("wxyz"), HOOKS[:1])},
                   {"A": {"p": "x", "r": "y"}, "B": {"y": "x", "w": "y"}}, n_permutations=10)
    rows = result.concepts[result.concepts["source_a"] == "A"].set_index("concept")
    # p = [1, 0] vs y = [0, 3]: cosine 0; candidates w 1, x -1, y 0, z 0: y ranks 2 (z ties, not ahead)
    assert rows.loc["x", ["cosine", "rank", "n_candidates", "p_rank"]].tolist() == [0.0, 2, 4, 0.5]
    # r = [0, 1] vs w = [2, 0]: cosine 0; y (cosine 1) is ahead
    assert rows.loc["y", ["identity_a", "identity_b", "rank"]].tolist() == ["r", "w", 2]
    assert result.geometry.empty
    assert result.untestable[["analysis", "n_concepts", "reason"]].values.tolist() == [
        ["geometry", 2, "2 shared concepts; RSA needs 3"]]


def test_behaviour_rsa_is_spearman_of_centred_cosine_and_zscored_euclidean_per_feature_block():
    rng = np.random.default_rng(2)
    a, b = _planted(rng, k=7, extra=1)
    features = pd.DataFrame({"warmth": rng.normal(size=8) * 10, "competence": rng.normal(size=8), "constant": 3.0,
                             "other grid": [1.0, 2.0] + [np.nan] * 6}, index=[f"b{i}" for i in range(8)])
    result = atlas({"A": _source("a", a), "B": _source("b", b)}, {"A": _map("a", 7), "B": _map("b", 7)},
                   {"B": features}, n_permutations=99)
    rows = result.behaviour[result.behaviour["source_a"] == "A"]
    # c0 and c1 define the other grid too: a block of their own, too small; c2..c6 compare on warmth and competence
    assert rows[["n_concepts", "n_features", "concepts"]].drop_duplicates().values.tolist() == [
        [5, 2, "c2, c3, c4, c5, c6"]]
    assert ["behaviour", "A", "B", 2, "c0, c1: 2 concepts with these features; RSA needs 3"] in \
        result.untestable.values.tolist()
    kept = features.iloc[2:7, :2]
    z = (kept - kept.mean()) / kept.std(ddof=0)
    for h in range(len(HOOKS)):
        centred = a[h] - a[h].mean(0)  # centred on all 8 identities of A, then the block's rows
        expected = rsa(squareform(pdist(centred[2:7], "cosine")), squareform(pdist(z.to_numpy())))
        assert rows["value"].iloc[h] == pytest.approx(expected)
    assert set(result.behaviour["source_a"]) == {"A", "B"}  # B's own geometry against its own behaviour too


def test_too_few_concepts_are_reported_not_raised():
    rng = np.random.default_rng(3)
    a, b = _planted(rng, k=1, extra=3)
    c = rng.normal(size=(len(HOOKS), 3, 32))
    result = atlas({"A": _source("a", a), "B": _source("b", b), "C": _source("c", c)},
                   {"A": _map("a", 1), "B": _map("b", 1)}, {"A": pd.DataFrame({"f": [1.0, 2.0]}, index=["a0", "a1"])})
    reasons = {(r.analysis, r.source_a, r.source_b): r.reason for r in result.untestable.itertuples()}
    assert reasons[("closeness p", "A", "B")] == "1 shared concept; shuffling the matches needs 2"
    assert reasons[("geometry", "A", "C")] == "no shared concept"
    assert reasons[("behaviour", "A", "A")] == "c0: 1 concept with these features; RSA needs 3"
    one = result.closeness[result.closeness["source_a"] == "A"]
    assert one["p"].isna().all() and (one["n_concepts"] == 1).all()
    pairs = shared_concepts({"A": _source("a", a), "B": _source("b", b)}, {"A": _map("a", 1), "B": _map("b", 1)})
    assert pairs.values.tolist() == [["A", "B", 1, "c0"]]


@pytest.mark.parametrize("sources, mapping, message", [
    ({"A": Source(np.zeros((1, 2, 4)), ["x", "y"], ["h"]), "B": Source(np.zeros((1, 2, 5)), ["x", "y"], ["h"])},
     {}, "sources differ in d_model (A: 4, B: 5)"),
    ({"A": Source(np.zeros((1, 2, 4)), ["x", "y"], ["h"])}, {}, "the atlas compares sources; got 1"),
    ({"A": Source(np.zeros((1, 2, 4)), ["x", "y"], ["h"]), "B": Source(np.zeros((1, 2, 4)), ["x", "y"], ["g"])},
     {}, "the sources share no hook"),
    ({"A": Source(np.zeros((1, 2, 4)), ["x", "y"], ["h"]), "B": Source(np.zeros((1, 2, 4)), ["x", "y"], ["h"])},
     {"A": {"x": "c", "y": "c"}}, "identities 'x' and 'y' both map to concept 'c'"),
    ({"A": Source(np.zeros((1, 1, 4)), ["x"], ["h"]), "B": Source(np.zeros((1, 2, 4)), ["x", "y"], ["h"])},
     {}, "source 'A': 1 identity; expected at least 2"),
])
def test_bad_sources_are_refused(sources, mapping, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        atlas(sources, mapping)


# --- the shipped mapping ----------------------------------------------------------------------------------------


def _producible() -> dict[str, set[str]]:
    """Every identity each suite's data can put in an identity slot."""
    from behavioral.suites.giebench.items import DEFAULT_ITEMS, default_items
    from behavioral.suites.intergroup.groups import CATEGORIES
    from behavioral.suites.isear.prompts import GENDERS
    from behavioral.suites.jaem.dimensions import PROJECT_DIMENSIONS
    from behavioral.suites.scm.groups import GROUPS

    swaps = pd.read_csv(DEFAULT_ITEMS.with_name("paper_swaps.csv"))  # the authors' release's identities
    return {"intergroup": {i for c in CATEGORIES.values() for i in c.identities},
            "giebench": {i.identity for i in default_items()} | set(swaps["s_i"]) | set(swaps["s_j"]),
            "scm": {g.name for groups in GROUPS.values() for g in groups},
            "isear": set(GENDERS),
            "jaem": {v for values in PROJECT_DIMENSIONS.values() for v in values}}


def test_every_shipped_row_names_an_identity_its_suite_produces():
    from behavioral.suite.registry import get_suite

    rows, producible = read_map(MAP_FILE), _producible()
    missing = [(r.line, r.suite, r.identity) for r in rows if r.identity not in producible[r.suite]]
    assert missing == []
    for r in rows:
        spec = get_suite(r.suite).capture
        assert spec is None or r.kind in (*spec.spans, "*"), (r.line, r.kind)
    suites_of = {c: {r.suite for r in rows if r.concept == c} for c in {r.concept for r in rows}}
    assert all(len(s) >= 2 for s in suites_of.values())  # each concept is shared
    assert suites_of["Muslim"] == suites_of["Christian"] == {"intergroup", "giebench", "scm", "jaem"}
    assert {"isear", "jaem"} <= suites_of["woman"] and suites_of["non-binary"] == {"isear", "jaem"}


@pytest.mark.parametrize("text, message", [
    ("concept,suite,kind,identity\nMuslim,nosuite,*,a Muslim\n", ":2: field 'suite' is 'nosuite'; expected one of"),
    ("# a comment\nconcept,suite,identity\n", ":2: header is 'concept,suite,identity'; expected"),
    ("concept,suite,kind,identity\nMuslim,intergroup,*\n", ":2: row 'Muslim,intergroup,*' has 3 fields"),
    ("concept,suite,kind,identity\nMuslim,intergroup,*,a Muslim\nIslam,intergroup,persona,a Muslim\n",
     ":3: intergroup 'a Muslim' -> 'Islam' clashes with line 2"),
    ("concept,suite,kind,identity\nMuslim,intergroup,*,a Muslim\nMuslim,intergroup,*,a Muslim\n",
     ":3: repeats line 2"),
    ("concept,suite,kind,identity\nMuslim,intergroup,judge,a Muslim\n", ":2: field 'kind' is 'judge'"),
])
def test_a_bad_map_row_is_named(tmp_path, text, message):
    path = tmp_path / "map.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^{re.escape(f'{path}{message}')}"):
        read_map(path)


# --- the study end to end ---------------------------------------------------------------------------------------
# on conftest's captured_intergroup: a tiny religion run whose persona and experiencer captures are two sources sharing
# the five religions


def _copy(run_dir, to, manifest=None, meta=None):
    shutil.copytree(run_dir, to)
    for name, change in (("manifest.json", manifest), ("activations/meta.json", meta)):
        if change:
            data = json.loads((to / name).read_text())
            change(data)
            (to / name).write_text(json.dumps(data))
    return to


def test_the_study_writes_its_report_and_tables(captured_intergroup, tmp_path):
    twin = _copy(captured_intergroup, tmp_path / "twin")
    report = run_study(get_study("atlas"), [captured_intergroup, twin], Options(permutations=20), tmp_path / "out",
                       names=["one", "two"], progress=False).report
    out = report.parent
    text = report.read_text()
    for heading in ("Shared-identity closeness", "RSA between sources", "RSA with behaviour", "Not testable",
                    "What this can and cannot show"):
        assert f"## {heading}" in text
    sources = pd.read_csv(out / "sources.csv")
    assert sources["source"].tolist() == ["one: persona", "one: experiencer", "two: persona", "two: experiencer"]
    assert (sources["n_mapped"] == 5).all()  # the five religions
    closeness = pd.read_csv(out / "closeness.csv")
    same = closeness[(closeness["source_a"] == "one: persona") & (closeness["source_b"] == "two: persona")]
    # a run's copy holds the same states: every religion's match is itself
    assert same.set_index("statistic").loc["mean_rank", "value"].tolist() == [1.0] * 3
    assert same.set_index("statistic").loc["mean_cosine", "value"].tolist() == pytest.approx([1.0] * 3)
    best = pd.read_csv(out / "closeness_best.csv")  # each test's best hook, its value at hook_embed beside it
    at_embed = closeness[closeness["hook"] == "hook_embed"].set_index(["source_a", "source_b", "statistic"])
    for row in best.itertuples():
        embed = at_embed.loc[(row.source_a, row.source_b, row.statistic)]
        assert row.embed_value == pytest.approx(embed["value"]) and row.embed_p_fwe == pytest.approx(embed["p_fwe"])
    assert "against 20 shuffles of the concept matching (seed 0; p floor" in text
    assert "every best row has the same test at hook_embed beside it" in text
    geometry = pd.read_csv(out / "geometry_rsa.csv")
    twins = (geometry["source_a"] == "one: persona") & (geometry["source_b"] == "two: persona")
    assert geometry.loc[twins, "value"].tolist() == pytest.approx([1.0] * 3)
    assert set(geometry["n_concepts"]) == {5}
    for name in ("closeness_mean_cosine", "closeness_mean_rank", "geometry_rsa", "geometry_heatmap"):
        assert (out / f"{name}.png").is_file()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["identity_map"]["path"] == str(MAP_FILE) and manifest["hooks"] == HOOKS


@pytest.mark.parametrize("change, message", [
    ({"manifest": lambda m: m["config"].update(model="another/model", model_hash="0" * 64)},
     "the runs hold different models"),
    ({"manifest": lambda m: m["config"].update(model_hash="1" * 64)}, "the runs hold different models"),
    ({"meta": lambda m: m.update(d_model=128)}, "the runs' activations differ in d_model"),
])
def test_runs_of_two_models_exit_2_with_one_line_and_write_nothing(captured_intergroup, tmp_path, capsys, change,
                                                                   message):
    other = _copy(captured_intergroup, tmp_path / "other", **change)
    out = tmp_path / "out"
    assert cli.main(["interp", "atlas", str(captured_intergroup), str(other), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not out.exists()


def test_a_bad_map_exits_2_and_writes_nothing(captured_intergroup, tmp_path, capsys):
    bad = tmp_path / "map.csv"
    bad.write_text("concept,suite,kind,identity\nMuslim,intergroup,*\n")
    out = tmp_path / "out"
    assert cli.main(["interp", "atlas", str(captured_intergroup), "--map", str(bad), "--out", str(out),
                     "--no-progress"]) == 2
    assert f"{bad}:2: row" in capsys.readouterr().err and not out.exists()
