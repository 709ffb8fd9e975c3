"""The clusters, RSA and probe studies end to end on the pinned tiny intergroup capture run (religion and race), through
run_study and the CLI, their tables equal to the interp functions called directly on the same vectors and labels
read another way (intergroup's Table 1 views, the analysis's M, the old script's token counts); the intergroup hooks
against hand computations; bad input exits 2 with one line and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from activations import store as activation_store
from activations.spans import prompt_spans
from behavioral.rundir.manifest import Manifest
from behavioral.inference import models
from behavioral.analysis import Run
from behavioral.cli.commands import main
from behavioral.analysis.studies import get_study
from behavioral.analysis.study import run_study
from interp.identities import parse_where
from behavioral.suites.intergroup import SUITE, prompts
from behavioral.suites.intergroup import activations as views
from behavioral.suites.intergroup.suite import load_analyses
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.setting_analysis import AnalyzeOptions
from interp import clusters, probes, rsa
from tests.conftest import PINNED
from tests.test_analysis import make_run

SETTING = "P0S0T0"
RACE = ("--where", "category=race", "--where", f"setting={SETTING}")
N = 40  # permutations


@pytest.fixture(scope="module")
def run_dir(pinned_run) -> Path:
    return pinned_run


def race_personas(run_dir: Path) -> tuple[np.ndarray, list[str], list[str], list[str]]:
    """Race persona vectors in Table 1 order without "a person" (intergroup's own view), names, groups, hooks."""
    store = activation_store.load(run_dir)
    vectors, names = views.persona(store, "race", SETTING)
    group_of = get_category("race").group_of
    return vectors[:, 1:], names[1:], [group_of[n] for n in names[1:]], store.hooks


def race_M_rows(run_dir: Path) -> np.ndarray:
    """The persona rows of race's M without "a person", as the old nationality_clusters script read them."""
    options = AnalyzeOptions(measure="expected_intensity", permutations=10)
    (a,) = [a for a in load_analyses(run_dir, options) if a.category.name == "race"]
    return a.M[1:]


def numbers(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.select_dtypes("number").reset_index(drop=True)


# --- the intergroup hooks ------------------------------------------------------------------------------------------

def test_identity_set_orders_by_table_1_and_groups_within_one_category():
    race = get_category("race")
    order, labels = SUITE.identity_set("persona", ["a Latina", "a person", "a white person", "an Asian"])
    assert order == ["a white person", "an Asian", "a Latina"] and labels is None  # three groups of one: none shared
    order, labels = SUITE.identity_set("persona", list(race.with_unspecified)[::-1])
    assert order == list(race.identities) and labels[:6] == ["White"] * 5 + ["Black"]
    nationality = get_category("nationality").identities
    assert SUITE.identity_set("experiencer", nationality)[1][:5] == ["English-speaking"] * 3 + [
        "Protestant Europe", "Catholic Europe"]
    assert SUITE.identity_set("persona", ["a Jew", "a Muslim", "a Hindu"]) == (["a Muslim", "a Jew", "a Hindu"], None)
    assert SUITE.identity_set("persona", ["a Jew", "a Latina", "a Latino"]) == (["a Latino", "a Latina", "a Jew"],
                                                                               None)  # across categories: no groups
    with pytest.raises(ValueError, match="'a Martian' belongs to no intergroup category"):
        SUITE.identity_set("persona", ["a Jew", "a Martian"])


def test_cell_labels_by_hand():
    cells = pd.DataFrame({"perceiver": ["a Latino", "a Latino", "a person", "a Jew", "a Jew", "a Caucasian"],
                          "experiencer": ["a Latina", "an Asian", "a Jew", "a Jew", "a person", "a White American"]},
                         index=[5, 6, 7, 8, 9, 10])
    labels = SUITE.cell_labels(cells)
    assert list(labels.index) == [5, 6, 7, 8, 9, 10]
    assert labels["ingroup"].tolist() == [True, False, pd.NA, True, pd.NA, True]
    assert labels["perceiver_group"].tolist() == ["Hispanic", "Hispanic", pd.NA, "a Jew", pd.NA, "White"]


def _hand_run(mode: str = "score") -> Run:
    """Religion P0S0T0 rows with intensity = 10·perceiver + experiencer + event (identities in Table 1 order)."""
    names = get_category("religion").with_unspecified
    rows = [{"setting": SETTING, "category": "religion", "perceiver": p, "experiencer": x, "event_id": f"e{e}",
             "emotion": "joy" if e else "anger", "intensity": 10.0 * i + j + e, "expected_intensity": 10.0 * i + j + e}
            for i, p in enumerate(names) for j, x in enumerate(names) for e in range(2)]
    return Run("hand", Path("hand"), Manifest({"suite": "intergroup", "mode": mode}, {}, {}), pd.DataFrame(rows), None)


def test_behaviour_is_rows_and_columns_of_M_by_hand():
    names = get_category("religion").with_unspecified
    M0 = 10.0 * np.arange(6)[:, None] + np.arange(6)[None, :] + 0.5  # mean over events 0 and 1
    M = (M0 - M0.mean()) / M0.std()
    frame = SUITE.behaviour(_hand_run())
    persona = frame[frame.kind == "persona"].set_index("identity").drop(columns="kind").dropna(axis=1)
    assert list(persona.index) == list(names)
    assert list(persona.columns) == [f"rates {x} (religion, {SETTING})" for x in names]
    np.testing.assert_allclose(persona.to_numpy(), M)
    experiencer = frame[frame.kind == "experiencer"].set_index("identity").drop(columns="kind").dropna(axis=1)
    np.testing.assert_allclose(experiencer.loc["a Jew", f"rated by a Muslim (religion, {SETTING})"], M[2, 3])
    np.testing.assert_allclose(experiencer.to_numpy(), M.T)

    chosen = SUITE.behaviour(_hand_run(), perceiver=["a Jew", "a Hindu"], experiencer="a person", emotion="joy")
    M0 = 10.0 * np.arange(6)[:, None] + np.arange(6)[None, :] + 1  # event 1 alone
    M = (M0 - M0.mean()) / M0.std()  # z-scored over the whole grid, then cells selected
    rows = chosen[chosen.kind == "persona"].set_index("identity").drop(columns="kind").dropna(axis=1)
    assert list(rows.index) == ["a Jew", "a Hindu"] and list(rows.columns) == [f"rates a person (religion, {SETTING})"]
    np.testing.assert_allclose(rows.iloc[:, 0], M[[3, 5], 0])
    assert SUITE.behaviour(_hand_run(), setting="P0S1T0").empty
    with pytest.raises(ValueError, match="unknown field 'colour'"):
        SUITE.behaviour(_hand_run(), colour="red")


def test_parse_where():
    assert parse_where(["category=race", "setting=P0S0T0", "perceiver=a person", "perceiver=a Jew"]) == {
        "category": "race", "setting": "P0S0T0", "perceiver": ["a person", "a Jew"]}
    with pytest.raises(ValueError, match="--where 'category': expected FIELD=VALUE"):
        parse_where(["category"])


# --- the studies end to end ----------------------------------------------------------------------------------------

def test_clusters_study_equals_interp_on_the_intergroup_views(run_dir, tmp_path, capsys):
    options = get_study("clusters").Options(where=("category=race", f"setting={SETTING}"), permutations=N,
                                            project="last")
    report = run_study(get_study("clusters"), [run_dir, run_dir], options, tmp_path / "out", names=["a", "b"],
                       progress=False).report
    printed = capsys.readouterr().out
    assert "clusters: a: 18 persona identities (4 groups) of category=race, setting=P0S0T0" in printed
    out = report.parent
    vectors, names, labels, hooks = race_personas(run_dir)
    direct = clusters.layer_stats(vectors, labels, hooks, n_permutations=N, seed=0)
    stats = pd.read_csv(out / "cluster_stats.csv")
    assert list(stats.run) == ["a"] * 3 + ["b"] * 3 and list(stats.hook) == hooks * 2
    for run in ("a", "b"):
        pd.testing.assert_frame_equal(numbers(stats[stats.run == run]), numbers(direct), check_dtype=False)
    assert (direct.silhouette_p_fwe >= direct.silhouette_p).all() and (direct.knn_p_fwe >= direct.knn_p).all()

    M_rows = race_M_rows(run_dir)
    behaviour = pd.read_csv(out / "cluster_stats_behaviour.csv").iloc[0]
    expected = clusters.cluster_stats(M_rows, labels, N, 0, 3, metric="euclidean")
    assert behaviour.n_features == 19
    for key in ("silhouette", "silhouette_p", "knn_accuracy", "knn_p", "knn_null_mean"):
        assert behaviour[key] == pytest.approx(expected[key])

    projections = pd.read_csv(out / "projections.csv")
    layer = projections[(projections.run == "a") & (projections.hook == hooks[-1])]
    assert list(layer.identity) == names and list(layer.label) == labels
    np.testing.assert_allclose(layer[["x", "y"]], clusters.project(vectors[-1], "tsne", 0, "cosine", center=True))
    seen = projections[(projections.run == "a") & (projections.source == "behaviour")]
    np.testing.assert_allclose(seen[["x", "y"]], clusters.project(M_rows, "tsne", 0, "euclidean"))
    identities = pd.read_csv(out / "identities.csv")
    assert identities[identities.run == "a"].identity.tolist() == names
    for name in ("a_cluster_stats", "b_projections"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 0
    text = report.read_text()
    assert "p_fwe" in text and "## What this can and cannot show" in text
    assert ("a: whether the 18 persona identities of category=race, setting=P0S0T0 lie closer to their own group (4 "
            "groups of the suite's grouping) than to the others at each of 3 layers" in text)
    embed = direct[direct.hook == "hook_embed"].iloc[0]
    assert f"hook_embed silhouette {embed.silhouette:.2f} (p_fwe {embed.silhouette_p_fwe:.3g})" in text
    assert f"p floor {1 / (N + 1):.3g}" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["study"] == "clusters" and manifest["runs_read"]["a"]["projected_hooks"] == [hooks[-1]]


def test_clusters_study_projects_an_ungrouped_kind_and_says_why_no_statistics(run_dir, tmp_path):
    out = tmp_path / "out"
    assert main(["interp", "clusters", str(run_dir), "--out", str(out), "--kind", "experiencer", "--where",
                 "category=religion,perceiver=a person", "--permutations", "10", "--no-progress"]) == 0
    assert not (out / "cluster_stats.csv").exists()
    assert "the suite groups none of these experiencer identities" in (out / "report.md").read_text()
    projections = pd.read_csv(out / "projections.csv")
    assert projections.identity.tolist()[:5] == list(get_category("religion").identities)


def test_rsa_study_through_the_cli_equals_layer_rsa_with_the_scripts_token_counts(run_dir, tmp_path):
    out = tmp_path / "out"
    assert main(["interp", "rsa", str(run_dir), "--out", str(out), *RACE, "--permutations", str(N),
                 "--no-progress"]) == 0
    vectors, names, _, hooks = race_personas(run_dir)
    tokenizer = models.load_tokenizer(str(PINNED / "model"))
    tokens = [len(prompt_spans(tokenizer, prompts.build(SETTING, n, "a person", "anger", "Something happened."),
                               "system")[1]["perceiver"]) for n in names]
    # the first token of each name after its article, read by hand (the tiny tokenizer may give a space alone)
    first = [[t for t in tokenizer.tokenize(" " + n.split(maxsplit=1)[1]) if t != "Ġ"][0] for n in names]
    assert first[names.index("a Latino")] == first[names.index("a Latino American")]
    direct = rsa.layer_rsa(vectors, race_M_rows(run_dir), hooks, n_permutations=N, seed=0,
                           control=rsa.difference_matrix(tokens), controls={"first_token": rsa.label_matrix(first)})
    table = pd.read_csv(out / "rsa.csv")
    pd.testing.assert_frame_equal(numbers(table).drop(columns="n_features"), numbers(direct), check_dtype=False)
    assert pd.read_csv(out / "lexical_labels.csv").first_token.tolist() == first
    counts = pd.read_csv(out / "token_counts.csv")
    assert counts.identity.tolist() == names and counts.tokens.tolist() == tokens
    summary = pd.read_csv(out / "rsa_summary.csv").iloc[0]
    best = direct.loc[direct.rsa.idxmax()]
    assert summary.hook == best.hook and summary.p_fwe == pytest.approx(best.p_fwe)
    M_distances = rsa.distance_matrix(race_M_rows(run_dir), "euclidean")
    assert summary.token_confound == pytest.approx(rsa.rsa(rsa.difference_matrix(tokens), M_distances))


def test_probe_study_through_the_cli_equals_layer_probes_on_hand_labels(run_dir, tmp_path):
    out = tmp_path / "out"
    assert main(["interp", "probe", str(run_dir), "--out", str(out), "--where", "category=race", "--target",
                 "ingroup", "--split", "cell,event_id", "--layers", "embed,last", "--cv", "2", "--n-shuffles", "1",
                 "--matchings", "0", "--no-progress"]) == 0
    table = pd.read_csv(out / "probes.csv")
    store = activation_store.load(run_dir)
    samples, index = store.final_samples(category="race")
    group_of = get_category("race").group_of
    keep = ((index.perceiver != "a person") & (index.experiencer != "a person")).to_numpy()
    y = (index.perceiver.map(group_of) == index.experiencer.map(group_of)).to_numpy()[keep]
    hooks = [store.hooks[0], store.hooks[-1]]
    for split, groups in (("cell", (index.perceiver + "|" + index.experiencer).to_numpy()),
                          ("event_id", index.event_id.to_numpy())):
        direct = probes.layer_probes(samples[[0, -1]][:, keep], y, hooks, groups[keep], cv=2, seed=0, n_shuffles=1)
        got = table[table.split == split]
        assert got.target.unique().tolist() == ["ingroup"] and got.hook.tolist() == hooks
        pd.testing.assert_frame_equal(numbers(got), numbers(direct), check_dtype=False)
    assert (out / "figures" / "probes.png").stat().st_size > 0
    assert pd.read_csv(out / "probe_summary.csv").split.tolist() == ["cell", "event_id"]


@pytest.mark.parametrize("study, flags, message", [
    ("clusters", ["--kind", "speaker"], "--kind 'speaker' is not a span kind of suite intergroup; expected one of "
                                        "persona, experiencer"),
    ("rsa", ["--where", "colour=red"], "persona activations have no field 'colour'"),
    ("clusters", ["--where", "category"], "--where 'category': expected FIELD=VALUE"),
    ("probe", ["--target", "mood"], "--target 'mood': expected a field of the final-token index"),
    ("clusters", ["--layers", "7"], "--layers: block 7 was not captured"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(run_dir, tmp_path, capsys, study, flags, message):
    out = tmp_path / "new" / "out"
    assert main(["interp", study, str(run_dir), "--out", str(out), "--permutations" if study != "probe" else "--cv",
                 "5", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("study", ["clusters", "rsa", "probe"])
def test_a_run_without_capture_exits_2_naming_it(tmp_path, capsys, study):
    run = make_run(tmp_path / "run", categories=("religion",), settings=(SETTING,))
    assert main(["interp", study, str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "holds no activation store; rerun `empathy-gap run intergroup` with --capture" in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()
