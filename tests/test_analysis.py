"""The analysis of a run directory: statistics, exclusion, outputs, and the errors for unusable runs."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from behavioral.rundir.manifest import MANIFEST, SCHEMA_VERSION, RunDirError
from behavioral.core.files import write_json_atomic
from behavioral.rundir import parts as store
from behavioral.analysis import analyze
from behavioral.analysis.multiplicity import holm
from behavioral.analysis import cell_gap
from behavioral.suites.intergroup import figures
from behavioral.suites.intergroup import setting_analysis as analysis
from behavioral.suites.intergroup.setting_analysis import AnalyzeOptions
from behavioral.suites.intergroup.items import FIELDS, results
from behavioral.suites.intergroup.suite import load_analyses
from behavioral.suites.intergroup.groups import get_category

SETTINGS = ("P0S0T0", "P0S1T0")
N_EVENTS = 6
REFUSED = {("religion", "P0S0T0", "a Muslim", "a Jew", "e01"), ("religion", "P0S0T0", "a person", "a Hindu", "e04")}


def _rows(
    category: str,
    setting: str,
    rng: np.random.Generator,
    mode: str,
    effect: float,
    constant: bool,
    masses: tuple[float, float] = (0.02, 0.03),
) -> list[dict]:
    """One row per prompt: intensity 50, +`effect` for in-group pairs, plus noise; REFUSED prompts refused; score rows
    with `masses` (the whole answers' mass, the first token's numeric mass)."""
    cat = get_category(category)
    rows = []
    for p in cat.with_unspecified:
        for x in cat.with_unspecified:
            same = p in cat.group_of and x in cat.group_of and cat.group_of[p] == cat.group_of[x]
            for e in range(N_EVENTS):
                event = f"e{e:02d}"
                value = 50.0 if constant else round(50 + effect * same + rng.normal(0, 2))
                refused = mode == "generate" and (category, setting, p, x, event) in REFUSED
                scored = mode == "score"
                rows.append(
                    {
                        "unit_id": f"{setting}|{category}|{p}|{x}|0",
                        "item_id": f"{setting}|{category}|{p}|{x}|{event}",
                        "sample": 0,
                        "response": None if scored else ("I cannot" if refused else str(int(value))),
                        "answer": None if refused else str(int(value)),
                        "value": np.nan if refused else value,
                        "refused": refused,
                        "truncated": None if scored else False,
                        "score_answer": str(int(value)) if scored else None,
                        "score_value": value if scored else np.nan,
                        "expected": value if scored else np.nan,
                        "valid_mass": masses[0] if scored else np.nan,
                        "start_mass": masses[1] if scored else np.nan,
                        "setting": setting,
                        "category": category,
                        "perceiver": p,
                        "experiencer": x,
                        "event_id": event,
                        "emotion": "joy",
                    }
                )
    return rows


def _with_probs(rows: list[dict]) -> list[dict]:
    """Score rows given a distribution over 0..100: 0.6 on the row's value, 0.4 on 20, and its mean as expected."""
    for row in rows:
        probs = np.zeros(101)
        probs[int(row["value"])] += 0.6
        probs[20] += 0.4
        row["probs"], row["expected"] = probs.tolist(), float(probs @ np.arange(101))
    return rows


def make_run(
    run_dir: Path,
    categories: tuple[str, ...] = ("nationality", "religion"),
    mode: str = "generate",
    effect: float = 10.0,
    constant: frozenset = frozenset(),
    drop: int = 0,
    settings: tuple[str, ...] = SETTINGS,
    probs: bool = False,
    masses: tuple[float, float] = (0.02, 0.03),
    facts: dict | None = None,
) -> Path:
    """A synthetic run directory; `constant` names (category, setting) pairs with every intensity equal; `probs` gives
    score rows a stored distribution (see _with_probs); `masses`: see _rows; `facts`: the data facts its manifest
    records beside the corpus hash (event_clusters, corpus_emotions)."""
    rng = np.random.default_rng(0)
    config = {
        "suite": "intergroup",
        "schema": SCHEMA_VERSION,
        "model": "synthetic",
        "model_hash": "abc123",
        "dtype": "bfloat16",
        "mode": mode,
        "options": {"categories": list(categories), "settings": list(settings)},
        "corpus_hash": "corpus42",
        "n_events": N_EVENTS,
        **(facts or {}),
    }
    provenance = {"device": "cpu (test)", "package_versions": {"numpy": np.__version__}, "git_commit": "deadbeef"}
    planned = []
    for category in categories:
        for setting in settings:
            rows = _rows(category, setting, rng, mode, effect, (category, setting) in constant, masses)
            rows = _with_probs(rows) if probs else rows
            planned += rows
            store.write_part(run_dir, f"{category}-{setting}", rows[drop:] if category == "religion" else rows,
                             store.result_schema(FIELDS))
    plan = {"units": len({r["unit_id"] for r in planned}), "rows": len(planned)}
    write_json_atomic(run_dir / MANIFEST, {"config": config, "provenance": provenance, "plan": plan, "seals": 1})
    return run_dir


def _load(run_dir: Path, permutations: int = 200, allow_partial: bool = False, **options):
    return load_analyses(run_dir, AnalyzeOptions(permutations=permutations, **options), allow_partial)


def _analyses(run_dir: Path, **kwargs) -> dict[tuple[str, str], analysis.SettingAnalysis]:
    return {(a.category.name, a.setting): a for a in _load(run_dir, **kwargs)}


def test_planted_in_group_effect_gives_positive_significant_delta(tmp_path: Path) -> None:
    results = _analyses(make_run(tmp_path / "run"))
    for a in results.values():
        assert a.permutation is not None
        assert a.permutation.delta > 1
        assert a.permutation.p_value < 0.05
        assert a.permutation.ci_high < a.permutation.delta
        assert a.M is not None and a.M.shape == (len(a.identities),) * 2
        assert np.isclose(a.M.mean(), 0) and np.isclose(a.M.std(), 1)
        assert a.shown is not None and a.shown[0].all() and a.shown[:, 0].all()
        assert a.summary is not None and a.summary["z_min"] < 0 < a.summary["z_max"]
    assert results["religion", "P0S0T0"].identities[0] == "a person"


def test_exclusion_drops_exactly_the_events_refused_anywhere(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run")
    a = _analyses(run_dir)["religion", "P0S0T0"]
    assert a.event_ids == tuple(f"e{e:02d}" for e in range(N_EVENTS))
    assert [e for e, k in zip(a.event_ids, a.keep) if not k] == ["e01", "e04"]
    assert a.excluded_rate == pytest.approx(2 / N_EVENTS)
    assert a.refusal_rate == pytest.approx(2 / (36 * N_EVENTS))
    assert a.parsable_rate == pytest.approx(1 - 2 / (36 * N_EVENTS))
    rows = store.read_results(run_dir)
    cell = (rows.category == "religion") & (rows.setting == "P0S0T0") & (rows.perceiver == "a Muslim")
    cell &= (rows.experiencer == "a Christian") & rows.event_id.isin(["e00", "e02", "e03", "e05"])
    expected = rows[cell].value.mean()
    assert a.M0[2, 1] == pytest.approx(expected)
    assert _analyses(run_dir)["religion", "P0S1T0"].keep.all()


def test_analyze_writes_tables_figures_and_report(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", settings=("P0S0T0",))
    report_path = analyze([run_dir], options=AnalyzeOptions(permutations=200))
    out = run_dir / "analysis"
    assert report_path == out / "report.md"
    for name in ("table2_delta", "table3_mean_std", "table6_refusal", "table7_min_max", "numeric_rate"):
        assert (out / f"{name}.csv").is_file() and (out / f"{name}.md").is_file()
    for stem in ("heatmap_grid", "heatmap_religion_P0S0T0", "heatmap_nationality_P0S0T0", "tsne_nationality_P0S0T0"):
        assert (out / "figures" / f"{stem}.png").stat().st_size > 0
        assert (out / "figures" / f"{stem}.pdf").stat().st_size > 0
    assert (out / "matrices" / "religion_P0S0T0.csv").is_file()
    for a in _load(run_dir, permutations=20):  # M without the t-test mask where it hides cells
        unmasked = out / "figures" / f"heatmap_{a.category.name}_{a.setting}_unmasked.png"
        assert unmasked.is_file() == (not a.shown.all())
    assert any((out / "figures").glob("*_unmasked.png")), "the test needs a heatmap with hidden cells"
    table2 = pd.read_csv(out / "table2_delta.csv")
    assert list(table2.category) == ["nationality", "religion"] and list(table2.setting) == ["P0S0T0"] * 2
    religion = table2.set_index("category").loc["religion"]  # a planted gap over 5 identities: p at its floor
    assert religion.p_at_floor and religion.p_value == religion.p_min and 0.004 < religion.p_min < 0.03
    printed = dict(zip(*[line.split(" | ") for line in (out / "table2_delta.md").read_text().splitlines()
                         if line.startswith("| ") and "religion" in line or line.startswith("| run |")]))
    assert printed["p at floor"] == "yes"
    assert religion.p_exact == 1 / 120 and religion.n_outcomes == 120  # exact: 1/120, every matching enumerated
    nationality = table2.set_index("category").loc["nationality"]  # n! matchings, too many: sampled only
    assert np.isnan(nationality.p_exact) and float(nationality.n_outcomes) > math.factorial(20)
    assert printed["p exact (these events)"] == "0.00833"
    report = report_path.read_text()
    for delta in table2.delta:
        assert f"{delta:.2f}" in report
    assert "synthetic" in report and "corpus42" in report and "cpu (test)" in report
    assert "table2_delta.csv" in report and "figures/heatmap_grid.png" in report
    assert sorted(p.name for p in run_dir.iterdir()) == ["analysis", "manifest.json", "results"]


def test_score_mode_report_explains_scoring_with_the_measured_rate(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", categories=("religion",), mode="score")
    options = AnalyzeOptions(permutations=50, measure="expected_intensity")
    report = analyze([run_dir], tmp_path / "out", options).read_text()
    assert "0..100 or 0..10" in report
    assert "averages 3.0%" in report and "exceeds 0.5 for 0.0% of prompts" in report
    assert pd.read_csv(tmp_path / "out" / "numeric_rate.csv").numeric_mass_mean_pct.tolist() == pytest.approx([3.0, 3.0])


def test_a_whole_answer_mass_near_zero_is_warned_on_the_row_though_the_first_token_starts_a_number(
        tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", categories=("religion",), mode="score", masses=(1e-6, 0.98))
    analyze([run_dir], tmp_path / "out", AnalyzeOptions(permutations=50, measure="expected_intensity"))
    numeric = pd.read_csv(tmp_path / "out" / "numeric_rate.csv")
    assert numeric.answer_mass_mean_pct.tolist() == pytest.approx([1e-4, 1e-4])
    assert numeric.numeric_mass_mean_pct.tolist() == pytest.approx([98.0, 98.0])
    warnings = pd.read_csv(tmp_path / "out" / "headline.csv").warning
    assert warnings.str.contains("low answer mass: ").all()
    assert warnings.str.contains("of the probability of a whole answer on ratings in range").all()
    assert not warnings.str.contains("first answer token").any()  # 98% of first tokens start a number


def test_events_of_one_cluster_count_once_and_a_sample_lacking_emotions_says_so_on_its_row(tmp_path: Path) -> None:
    clusters = {"e00": "t1", "e01": "t1", "e02": "t2", "e03": "t2"}  # e04, e05: a cluster each
    run_dir = make_run(tmp_path / "run", categories=("religion",), facts={"event_clusters": clusters})
    analyze([run_dir], tmp_path / "out", AnalyzeOptions(permutations=50))
    table2 = pd.read_csv(tmp_path / "out" / "table2_delta.csv")
    (_, a) = _load(run_dir)  # P0S1T0, which keeps every event for δ (P0S0T0 drops e01)
    rows = results(run_dir)
    same = a.category.in_group()
    I = analysis.intensity_tensor(rows[rows.setting == a.setting], a.category, a.event_ids)[0]
    labels = np.array(["t1", "t1", "t2", "t2", "e04", "e05"])
    expected = cell_gap.gap_interval(I[1:, 1:], same, clusters=labels)
    assert a.n_clusters == 4 and a.gap_interval == pytest.approx(expected)
    assert a.gap_interval != pytest.approx(cell_gap.gap_interval(I[1:, 1:], same))
    assert table2.n_clusters.tolist() == [4, 4]
    assert table2.emotions.tolist() == ["joy 5; 1 of the corpus's 12", "joy 6; 1 of the corpus's 12"]
    assert not table2.covers_corpus.any()
    headline = pd.read_csv(tmp_path / "out" / "headline.csv")
    assert headline.interval.iloc[0] == ("95% t-interval over 4 clusters of 5 events of these emotions "
                                         "(joy 5; 1 of the corpus's 12)")
    assert "p gap " in headline.note.iloc[0] and "on synthetic null runs of 4 clusters" in headline.note.iloc[0]
    assert "| clusters |" in (tmp_path / "out" / "table2_delta.md").read_text()


def test_a_corpus_of_one_emotion_is_covered_by_its_events_and_no_cluster_column_is_printed(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", categories=("religion",), facts={"corpus_emotions": ["joy"]})
    analyze([run_dir], tmp_path / "out", AnalyzeOptions(permutations=50))
    table2 = pd.read_csv(tmp_path / "out" / "table2_delta.csv")
    assert table2.emotions.tolist() == ["all 1 of the corpus's"] * 2 and table2.covers_corpus.all()
    assert table2.n_clusters.isna().all() and "| clusters |" not in (tmp_path / "out" / "table2_delta.md").read_text()
    assert pd.read_csv(tmp_path / "out" / "headline.csv").interval.iloc[0] == "95% t-interval over 5 events"


@pytest.mark.parametrize("facts, field", [({"event_clusters": {"e00": 3}}, "config.event_clusters"),
                                          ({"event_clusters": ["t1"]}, "config.event_clusters"),
                                          ({"corpus_emotions": ["joy", "<b>"]}, "config.corpus_emotions")])
def test_a_manifests_clusters_or_emotions_of_the_wrong_kind_are_refused_naming_the_field(tmp_path, facts, field):
    run_dir = make_run(tmp_path / "run", categories=("religion",), facts=facts)
    with pytest.raises(RunDirError, match=re.escape(field)):
        analyze([run_dir], tmp_path / "out", AnalyzeOptions(permutations=50))
    assert not (tmp_path / "out").exists()


def test_incomplete_results_raise_a_clear_error(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", drop=5)
    with pytest.raises(RunDirError, match=r"run is partial: .* \(6230 of 6240 rows\) finished; finish it"):
        analyze([run_dir], options=AnalyzeOptions(permutations=50))
    assert not (run_dir / "analysis").exists()
    rows = results(run_dir)
    religion = rows[(rows.category == "religion") & (rows.setting == "P0S0T0")]
    message = r"'religion', setting 'P0S0T0': 5 of 216 prompts missing"
    with pytest.raises(analysis.IncompleteResultsError, match=message):  # a direct caller of one setting's analysis
        analysis.analyze_setting(religion, get_category("religion"), "P0S0T0", tuple(sorted(rows.event_id.unique())))
    a = _analyses(run_dir, allow_partial=True)["religion", "P0S0T0"]
    assert a.n_missing == 5 and a.n_prompts == 36 * N_EVENTS - 5
    assert a.keep.tolist() == [False] * 5 + [True]  # events e00-e04 of the ("a person", "a person") cell were dropped

    run_dir = make_run(tmp_path / "run2", categories=("religion",))
    (run_dir / "results" / "religion-P0S1T0.parquet").unlink()
    with pytest.raises(RunDirError, match=r"is partial: 36 of 72 work units \(216 of 432 rows\)"):
        _load(run_dir)
    a = _analyses(run_dir, allow_partial=True)["religion", "P0S1T0"]
    assert a.n_prompts == 0 and a.M is None and a.permutation is None and "no event kept" in a.delta_reason


def test_constant_matrix_gives_na_with_reason(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", categories=("religion",), constant=frozenset({("religion", "P0S1T0")}))
    report = analyze([run_dir], options=AnalyzeOptions(permutations=50)).read_text()
    table2 = pd.read_csv(run_dir / "analysis" / "table2_delta.csv").set_index("setting")
    assert np.isnan(table2.loc["P0S1T0", "delta"]) and "all cells equal" in table2.loc["P0S1T0", "note"]
    assert not np.isnan(table2.loc["P0S0T0", "delta"])
    assert "δ n/a: all cells equal" in report
    table3 = pd.read_csv(run_dir / "analysis" / "table3_mean_std.csv").set_index("setting")
    assert table3.loc["P0S1T0", "mean"] == 50 and table3.loc["P0S1T0", "std"] == 0

    analyze([run_dir], options=AnalyzeOptions(permutations=50))  # a second analysis replaces the first, leaving no temporaries
    assert sorted(p.name for p in run_dir.iterdir()) == ["analysis", "manifest.json", "results"]


def test_run_without_manifest_raises(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match="manifest.json"):
        analyze([tmp_path / "empty"])


def test_unknown_measure_raises() -> None:
    with pytest.raises(ValueError, match="unknown measure 'score_answer'; expected one of intensity, expected_"):
        AnalyzeOptions(measure="score_answer")


def test_a_random_answerer_shows_no_gap():
    """The null model: intensities drawn independently of perceiver and experiencer give δ inside its permutation
    null about as often as chance allows."""
    cat = get_category("religion")
    events = tuple(f"e{e:02d}" for e in range(N_EVENTS))
    p_values, deltas = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        rows = pd.DataFrame([{"perceiver": p, "experiencer": x, "event_id": e, "intensity": float(rng.integers(0, 101)),
                              "refused": False, "response": "", "truncated": False, "numeric_mass": np.nan}
                             for p in cat.with_unspecified for x in cat.with_unspecified for e in events])
        a = analysis.analyze_setting(rows, cat, "P0S0T0", events, n_permutations=500, seed=seed)
        p_values.append(a.permutation.p_value)
        deltas.append(a.permutation.delta)
    assert sum(p < 0.05 for p in p_values) <= 3  # 1 expected by chance out of 20
    assert abs(np.mean(deltas)) < 0.25 and 0.2 < np.median(p_values) < 0.8


def test_every_figure_names_its_measure(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", categories=("religion",), mode="score", settings=("P0S0T0",))
    expected = _load(run_dir, permutations=20, measure="expected_intensity")[0]
    title, events = figures.heatmap(expected).axes[0].get_title(), f"\nn={N_EVENTS} events"
    assert title == f"Religion, (P0, S0, T0), expected intensity{events}"
    assert figures.heatmap_grid([expected])._suptitle.get_text() == "M of expected intensity"
    greedy = _load(make_run(tmp_path / "gen", categories=("religion",), settings=("P0S0T0",)), permutations=20)[0]
    kept = f"\nn={int(greedy.keep.sum())} events"  # the generated run's refusals drop events: n is those M averages
    assert int(greedy.keep.sum()) < N_EVENTS
    assert figures.heatmap(greedy).axes[0].get_title() == f"Religion, (P0, S0, T0), generated intensity{kept}"
    default = _load(run_dir, permutations=20)[0]  # a score run is read by its expected intensity unless asked
    assert figures.heatmap(default).axes[0].get_title() == title
    scored = _load(run_dir, permutations=20, measure="intensity")[0]  # score mode generates no reply
    assert figures.heatmap(scored).axes[0].get_title() == f"Religion, (P0, S0, T0), greedy score answer{events}"


def test_two_runs_give_table2_by_run_with_each_runs_own_statistics(tmp_path: Path) -> None:
    strong = make_run(tmp_path / "strong", categories=("religion",), effect=10.0)
    none = make_run(tmp_path / "none", categories=("religion",), effect=0.0)
    options = AnalyzeOptions(permutations=200)
    analyze([strong, none], tmp_path / "out", options, names=["strong", "none"])
    table2 = pd.read_csv(tmp_path / "out" / "table2_delta.csv")
    assert list(zip(table2.run, table2.setting)) == [("strong", "P0S0T0"), ("strong", "P0S1T0"),
                                                     ("none", "P0S0T0"), ("none", "P0S1T0")]
    for name, run_dir in (("strong", strong), ("none", none)):
        for a in _load(run_dir):  # each run's δ is its own analysis's, at full precision
            got = table2[(table2.run == name) & (table2.setting == a.setting)].iloc[0]
            assert got.delta == a.permutation.delta and got.p_value == a.permutation.p_value
    by_run = table2.groupby("run").delta.mean()
    assert by_run["strong"] > 1 and abs(by_run["none"]) < 0.5
    points = table2.groupby("run").gap_points.mean()  # the planted 10 rating points, before z-scoring
    assert abs(points["strong"] - 10) < 1.5 and abs(points["none"]) < 1.5
    assert set(table2.measure) == {"generated intensity"}
    assert (table2.gap_points_low < table2.gap_points).all() and (table2.gap_points < table2.gap_points_high).all()
    strong = table2[table2.run == "strong"]
    assert (strong.gap_points_low > 5).all()  # over events too, a clear gap
    # religion P0S0T0 drops e01 (refused in a Muslim -> a Jew); e04's refusal is in the "a person" row δ ignores
    assert table2.set_index(["run", "setting"]).n_events.to_dict() == {
        ("strong", "P0S0T0"): 5, ("strong", "P0S1T0"): 6, ("none", "P0S0T0"): 5, ("none", "P0S1T0"): 6}
    printed = (tmp_path / "out" / "table2_delta.md").read_text()  # a row per run, category and setting
    assert "| run | category | setting | measure | events | δ | null low | null high | p (these events) |" in printed
    assert "| strong | religion | P0S1T0 | generated intensity | 6 |" in printed
    for _, run in table2.groupby("run"):  # Holm over each run's own tests (its 2 settings)
        assert (run.holm_family == 2).all()
        assert run.p_holm.tolist() == holm(run.p_exact).tolist()
        assert run.p_gap_holm.tolist() == holm(run.p_gap).tolist()
    # every draw of the within-events null falls below the planted gap, and the t-test over events rejects it
    assert (strong.p_gap_these_events == strong.p_gap_these_events_min).all() and (strong.p_gap < 0.025).all()
    assert (table2.p_gap_these_events >= table2.p_gap_these_events_min).all()
    assert table2.noise_share.between(0, 1).all()
    matrix = pd.read_csv(tmp_path / "out" / "matrices" / "religion_P0S0T0.csv")
    assert matrix.groupby("run").size().to_dict() == {"none": 36, "strong": 36}
    assert (tmp_path / "out" / "figures" / "delta_by_setting.png").stat().st_size > 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "**strong**" in report and "**none**" in report and "corpus42" in report


def test_runs_of_two_suites_or_names_that_clash_are_refused(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", categories=("religion",))
    with pytest.raises(ValueError, match="expected one name per run"):
        analyze([run_dir, make_run(tmp_path / "b", categories=("religion",))], tmp_path / "out", names=["a", "a"])
    other = tmp_path / "other"
    other.mkdir()
    write_json_atomic(other / MANIFEST, {"config": {"suite": "scm", "schema": SCHEMA_VERSION, "model": "m", "mode": "score"}})
    with pytest.raises(RunDirError, match=r"different suites \(intergroup, scm\); expected runs of one suite"):
        analyze([run_dir, other], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_report_shows_the_distributions_behind_the_expected_intensity(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", categories=("religion",), mode="score", settings=("P0S0T0",), probs=True)
    analyze([run_dir], tmp_path / "out", AnalyzeOptions(permutations=50, measure="expected_intensity"))
    pooled = pd.read_csv(tmp_path / "out" / "answer_distributions.csv").set_index("cells")
    # every cell puts 0.4 on 20 and 0.6 on its own rating (about 60 in-group, 50 out-group: the planted 10 points),
    # spread by noise over several ratings: the pooled mode is 20, far below the means
    assert (pooled["mode"] == 20).all() and pooled.p_mode.tolist() == pytest.approx([0.4, 0.4])
    assert pooled.loc["in-group", "mean"] == pytest.approx(0.6 * 60 + 8, abs=1)
    gap = pooled.loc["in-group", "mean"] - pooled.loc["out-group", "mean"]
    table2 = pd.read_csv(tmp_path / "out" / "table2_delta.csv").iloc[0]
    assert gap == pytest.approx(table2.gap_points, abs=0.01)  # the distributions' means are δ's expected measure
    assert (pooled.n_items == [5 * N_EVENTS, 20 * N_EVENTS]).all()
    cells = pd.read_csv(tmp_path / "out" / "distributions" / "cells.csv")
    assert len(cells) == 36 * 101 and cells.groupby(["perceiver", "experiencer"]).probability.sum().round(9).eq(1).all()
    assert cells[cells.perceiver == "a person"].in_group.isna().all()
    assert (tmp_path / "out" / "figures" / "distributions_religion_P0S0T0.png").stat().st_size > 0
    assert "## Answer distributions" in (tmp_path / "out" / "report.md").read_text()


def test_a_run_without_stored_distributions_has_no_distribution_section(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", categories=("religion",), mode="score", settings=("P0S0T0",))
    analyze([run_dir], tmp_path / "out", AnalyzeOptions(permutations=50))
    assert not (tmp_path / "out" / "answer_distributions.csv").exists()
    assert "Answer distributions" not in (tmp_path / "out" / "report.md").read_text()


def test_tidy_csvs_hold_every_number_at_full_precision(tmp_path: Path) -> None:
    """A CSV is for computing (issue 32): Table 2's δ, its interval, p and gap in points, Table 3's μ and σ and
    Table 6's shares are the analysis's own floats, read back exactly; only the Markdown rounds."""
    run_dir = make_run(tmp_path / "run", categories=("religion",))
    options = AnalyzeOptions(permutations=200)
    analyze([run_dir], tmp_path / "out", options)
    found = {(a.category.name, a.setting): a for a in load_analyses(run_dir, options)}
    table2 = pd.read_csv(tmp_path / "out" / "table2_delta.csv").set_index(["category", "setting"])
    table3 = pd.read_csv(tmp_path / "out" / "table3_mean_std.csv").set_index(["category", "setting"])
    table6 = pd.read_csv(tmp_path / "out" / "table6_refusal.csv").set_index(["category", "setting"])
    for key, a in found.items():
        perm = a.permutation
        assert table2.loc[key, ["delta", "ci_low", "ci_high", "p_value", "p_min", "p_exact", "gap_points"]].tolist() \
            == [perm.delta, perm.ci_low, perm.ci_high, perm.p_value, perm.p_min, perm.p_exact, a.gap_points]
        assert table2.loc[key, "p_exact"] * perm.n_outcomes == pytest.approx(round(perm.p_exact * perm.n_outcomes),
                                                                              abs=1e-9)
        assert table2.loc[key, ["gap_points_low", "gap_points_high"]].tolist() == list(a.gap_interval)
        assert table2.loc[key, ["p_gap", "p_gap_these_events", "p_gap_these_events_min", "noise_share"]].tolist() == [
            a.gap_p, a.gap_test.p_value, a.gap_test.p_min, a.noise_share]
        assert table3.loc[key, ["mean", "std"]].tolist() == [a.summary["mean"], a.summary["std"]]
        assert table6.loc[key, "excluded_events_pct"] == 100 * a.excluded_rate
    printed = (tmp_path / "out" / "table2_delta.md").read_text()  # the Markdown still prints rounded
    delta = table2["delta"].iloc[0]
    assert f"| {delta:.3f} |" in printed and repr(delta) not in printed
