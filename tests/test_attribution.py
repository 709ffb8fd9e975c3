"""Attribution patching (interp.attribution): exact where the metric is linear in the patched state, close to
activation patching on the tiny model's persona positions, its exact map equal to interp.patching's patched forward,
no gradient left in the model, one ValueError for prompts that differ outside the slot; the map's summary and the
agreement measures on planted arrays."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from behavioral.analysis.bootstrap import percentile_interval, resamples
from behavioral.analysis.paired import fieller, t_interval
from behavioral.inference.engine import Engine
from behavioral.suites.intergroup import patching as IP
from behavioral.suites.intergroup.corpus import embedded_events, sample_events
from behavioral.suites.intergroup.groups import get_category
from interp import attribution as A
from activations.capture import parse_layers
from activations.spans import TokenSpan
from interp.patching.spec import PatchPrompt, PatchSpec
from interp.patching.sweep import evaluate
from tests.conftest import PINNED

SETTING = "P0S0T0"
PINNED_MODEL = PINNED / "model"


@pytest.fixture(scope="module")
def event():
    return sample_events(embedded_events(), 2, 0)


def _pair(tokenizer, event, clean="a Muslim", corrupted="a person", experiencer="a Muslim", metric=None):
    trie = IP.setting_trie(tokenizer, SETTING)
    prompts = [IP.build(tokenizer, SETTING, p, experiencer, event) for p in (clean, corrupted)]
    return A.Pair(*prompts, trie, metric or A.expected_metric(trie))


class _Mix(nn.Module):
    """A linear block: each position adds a linear map of the mean of the states it may attend to."""

    def __init__(self, d: int):
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, hidden, allowed):
        mean = allowed @ hidden / allowed.sum(-1, keepdim=True)
        return hidden + self.proj(mean)


class _LinearLM(nn.Module):
    """A causal LM whose logits are linear in every residual-stream state (no norm, no softmax), laid out as the
    hooks and the engine expect (model.embed_tokens, model.layers, lm_head)."""

    def __init__(self, vocab: int, d: int = 16, n_layers: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, d)
        self.model.layers = nn.ModuleList(_Mix(d) for _ in range(n_layers))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.double()

    def forward(self, input_ids, attention_mask=None, logits_to_keep=0, **_):
        n = input_ids.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()[None].expand(len(input_ids), n, n)
        allowed = (causal if attention_mask is None else attention_mask[:, 0] == 0).to(self.lm_head.weight.dtype)
        hidden = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            hidden = layer(hidden, allowed)
        return SimpleNamespace(logits=self.lm_head(hidden)[:, -logits_to_keep:])


def test_atp_equals_activation_patching_where_the_metric_is_linear_in_the_state(tiny_tokenizer, event):
    engine = Engine(_LinearLM(len(tiny_tokenizer)), tiny_tokenizer, 64)
    linear = lambda logits: 3 * logits[:, 0, 5] - logits[:, 2, 9]  # noqa: E731
    pair = _pair(tiny_tokenizer, event[0], corrupted="a Jew", metric=linear)
    atp, exact = A.attribute(engine, [pair], scope="slot"), A.exact_map(engine, [pair], scope="slot")
    assert len(atp.nodes) == 4 * 5  # hook_embed and 3 blocks × the 5 last tokens of "a Muslim" and "a Jew"
    assert np.abs(exact.nodes["exact"]).max() > 1e-3  # the patches do move the metric
    np.testing.assert_allclose(atp.nodes["atp"], exact.nodes["exact"], rtol=1e-9, atol=1e-12)
    assert (atp.forwards, atp.backwards) == (2, 1)  # one corrupted and one clean forward, one backward


def test_the_grid_takes_layers_as_the_layers_parser_names_them(tiny_tokenizer, event):
    """-1 is the last block and hook_embed the embedding, however written; the node table carries the hook name and
    the layer column's number (-1 for hook_embed); a bad layer is one ValueError line naming it."""
    engine = Engine(_LinearLM(len(tiny_tokenizer)), tiny_tokenizer, 64)
    pair = _pair(tiny_tokenizer, event[0], corrupted="a Jew")
    whole = A.attribute(engine, [pair], scope="slot").nodes
    assert list(dict.fromkeys(zip(whole["hook"], whole["layer"]))) == [
        ("hook_embed", -1), ("blocks.0.hook_resid_post", 0), ("blocks.1.hook_resid_post", 1),
        ("blocks.2.hook_resid_post", 2)]
    wanted = whole[whole["hook"].isin(["hook_embed", "blocks.2.hook_resid_post"])].reset_index(drop=True)
    for layers in ([-1, "hook_embed"], "embed,last", ["hook_embed", "blocks.2.hook_resid_post"],
                   ["hook_embed", *parse_layers("-1", 3)]):
        got = A.attribute(engine, [pair], layers, scope="slot").nodes
        pd.testing.assert_frame_equal(got, wanted, check_exact=False, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match=r"^layers: block 3 was not available; available: 0..2$"):
        A.attribute(engine, [pair], [3], scope="slot")


@pytest.mark.slow
def test_atp_ranks_the_persona_patches_as_activation_patching_on_the_tiny_model(tiny_model, tiny_tokenizer, event):
    # the persona's tokens and the system text after them, which reads them: ~230 nodes a pair
    engine = Engine(tiny_model, tiny_tokenizer, 128)
    pairs = [_pair(tiny_tokenizer, event[0], corrupted=c) for c in ("a person", "a Jew")]
    atp, exact = A.attribute(engine, pairs, scope="system"), A.exact_map(engine, pairs, scope="system")
    pd.testing.assert_frame_equal(atp.nodes[list(A.NODE_COLUMNS)], exact.nodes[list(A.NODE_COLUMNS)])
    np.testing.assert_allclose(atp.pairs["metric_clean"], exact.pairs["metric_clean"], rtol=1e-6)
    score = A.agreement(atp.nodes["atp"], exact.nodes["exact"])
    assert score["spearman"] > 0.9 and score["top10"] >= 0.7, score
    assert (atp.forwards, atp.prompts) == (4, 4)  # two corrupted prompts of two lengths, two clean ones
    assert exact.prompts == 4 + len(exact.nodes)  # and one row per node


def test_exact_map_is_the_patching_forward_of_interp_patching(tiny_model, tiny_tokenizer, event):
    engine = Engine(tiny_model, tiny_tokenizer, 16)
    pair = _pair(tiny_tokenizer, event[0], corrupted="a Jew")
    exact = A.exact_map(engine, [pair], scope="slot")
    assert exact.pairs["metric_clean"][0] == pytest.approx(engine.score([list(pair.clean.ids)], pair.trie)[0].expected)
    # the last persona token alone is persona_end:1 of the patching sweep
    specs = [PatchSpec.parse("persona_end:1", (layer,)) for layer in ("hook_embed", 0, 1)]
    swept = evaluate(engine, [pair.clean], [pair.corrupted], [specs], pair.trie)
    last = exact.nodes[exact.nodes["offset"] == 0]
    # equal up to float32 rounding: the sweep's scores sum the normaliser a vocabulary slice at a time
    np.testing.assert_allclose(last["exact"], swept["delta_expected"], atol=1e-6)
    sampled = A.exact_map(engine, [pair], scope="slot", sample=4, seed=1)
    assert len(sampled.nodes) == 4 and sampled.prompts == 1 + 5  # the corrupted prompt, the clean one, 4 nodes
    keyed = exact.nodes.set_index(["layer", "position"])["exact"]
    np.testing.assert_allclose(sampled.nodes["exact"], keyed.loc[list(zip(sampled.nodes["layer"],
                                                                          sampled.nodes["position"]))], atol=1e-9)
    estimate = np.arange(len(exact.nodes), dtype=float) * np.where(np.arange(len(exact.nodes)) % 2, -1, 1)
    ranked = A.exact_map(engine, [pair], scope="slot", sample=3, ranked_by=[estimate])
    largest = exact.nodes.iloc[np.sort(np.argsort(-np.abs(estimate))[:3])]  # where the estimate points
    assert ranked.nodes[["layer", "position"]].values.tolist() == largest[["layer", "position"]].values.tolist()


def test_gradients_never_reach_the_model(tiny_model, tiny_tokenizer, event):
    engine = Engine(tiny_model, tiny_tokenizer, 16)
    params = list(tiny_model.parameters())
    params[0].requires_grad_(False)  # a mix of flags comes back as it was
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    try:
        A.attribute(engine, [_pair(tiny_tokenizer, event[0])], scope="slot", graddrop=True)
        assert [p.requires_grad for p in params] == [False] + [True] * (len(params) - 1)
        assert all(p.grad is None for p in params)
        assert all(torch.equal(v, before[k]) for k, v in tiny_model.state_dict().items())
    finally:
        params[0].requires_grad_(True)


def test_graddrop_of_a_last_layer_node_is_its_atp_over_l_minus_1_times_l(tiny_model, tiny_tokenizer, event):
    # no block is downstream of the last block's output, so every dropped gradient is the full one
    engine = Engine(tiny_model, tiny_tokenizer, 16)
    nodes = A.attribute(engine, [_pair(tiny_tokenizer, event[0])], scope="slot", graddrop=True).nodes
    last = nodes[nodes["layer"] == 1]
    np.testing.assert_allclose(last["graddrop"], 2 * last["atp"].abs(), rtol=1e-5)


def test_prompts_that_differ_outside_the_slot_are_one_value_error(tiny_tokenizer, event):
    pair = _pair(tiny_tokenizer, event[0])
    other = _pair(tiny_tokenizer, event[1])  # another event: the tokens after the persona differ
    with pytest.raises(ValueError, match="differ after the slot .* expected prompts that differ in the slot only"):
        A.grid(pair.clean, other.corrupted)
    with pytest.raises(ValueError, match="unknown scope 'middle'; expected one of slot, system, prompt"):
        A.grid(pair.clean, pair.corrupted, "middle")


def test_the_grid_pairs_from_the_slots_end_as_patch_spec_does(tiny_tokenizer, event):
    pair = _pair(tiny_tokenizer, event[0])
    a, b = pair.clean.spans["persona"], pair.corrupted.spans["persona"]
    nodes = A.grid(pair.clean, pair.corrupted, "prompt")
    n = min(len(a), len(b))
    assert nodes[:n] == [(a.end - n + i, b.end - n + i) for i in range(n)]
    assert nodes[-1] == (len(pair.clean) - 1, len(pair.corrupted) - 1)
    assert len(A.grid(pair.clean, pair.corrupted, "slot")) == n
    assert A.grid(pair.clean, pair.corrupted, "system")[-1][0] == pair.clean.spans["system"].last
    # slot tokens the two prompts share at the same place (" a" of "a Muslim" and "a Jew") have equal states
    clean, corrupted = (PatchPrompt((1, 2, 3, k, 9), {"persona": TokenSpan("persona", 1, 4)}) for k in (4, 5))
    assert A.grid(clean, corrupted) == [(3, 3), (4, 4)]


def test_summary_recovers_a_planted_node_with_an_interval_over_units():
    rng = np.random.default_rng(0)
    rows = [{"pair": 2 * u + k, "event": f"e{u}", "layer": layer, "offset": 0,
             "atp": (1.0 if layer == 3 else 0.0) + rng.normal(0, 0.1)}
            for u in range(12) for k in range(2) for layer in range(5)]
    frame = pd.DataFrame(rows)
    out = A.summarize(frame, "atp", "event")
    planted = out.set_index("layer").loc[3]
    assert planted["ci_low"] < planted["mean"] < planted["ci_high"] and planted["ci_low"] > 0.8
    assert (out.set_index("layer").drop(3)["ci_high"] < 0.3).all()
    assert out["n_pairs"].tolist() == [24] * 5 and out["n_units"].tolist() == [12] * 5
    per_event = frame[frame["layer"] == 3].groupby("event")["atp"].mean()
    assert (planted["unit_min"], planted["unit_max"]) == (per_event.min(), per_event.max())
    few = A.summarize(frame[frame["event"].isin([f"e{u}" for u in range(8)])], "atp", "event")
    assert few["ci_low"].isna().all() and few["unit_min"].notna().all()  # 8 events: a range, no interval
    some = frame.assign(layer=lambda f: np.where((f["event"] == "e0") & (f["layer"] == 0), 9, f["layer"]))
    assert A.summarize(some, "atp", "event").set_index("layer").loc[9, ["ci_low", "ci_high"]].isna().all()


def _bootstrap_t(sums: np.ndarray, counts: np.ndarray, n_resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """The studentized bootstrap of Σ sums / Σ counts over units, one resample at a time (the reference)."""
    n, ratio = len(sums), sums.sum() / counts.sum()

    def se(s: np.ndarray, c: np.ndarray) -> float:
        r = s.sum() / c.sum()
        return np.sqrt(n / (n - 1) * ((s - r * c) ** 2).sum()) / c.sum()
    pivots = [(sums[d].sum() / counts[d].sum() - ratio) / se(sums[d], counts[d]) for d in resamples(n, n_resamples,
                                                                                                      seed)]
    low, high = percentile_interval(np.array(pivots))
    return ratio - high * se(sums, counts), ratio - low * se(sums, counts)


def test_the_summary_interval_is_the_hull_of_t_or_fieller_and_the_studentized_bootstrap_over_units():
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"event": np.repeat(np.arange(10), 5), "layer": 0, "offset": 0,
                          "atp": np.repeat(1 - rng.exponential(2, 10), 5) + rng.normal(0, 1, 50)})
    per_event = frame.groupby("event")["atp"].mean().to_numpy()  # pairs of an event: one unit
    row = A.summarize(frame, "atp", "event").iloc[0]
    t, boot = t_interval(per_event, 0.95), _bootstrap_t(per_event * 5, np.full(10, 5.0))
    assert boot[0] < t[0]  # skewed to the left: the bootstrap reaches further down than t
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((min(t[0], boot[0]), max(t[1], boot[1])))
    unequal = frame.drop(index=[0, 1, 2, 7])  # events 0 and 1 keep 2 and 4 pairs
    sums, counts = (unequal.groupby("event")["atp"].agg(f).to_numpy(dtype=float) for f in ("sum", "count"))
    row = A.summarize(unequal, "atp", "event").iloc[0]
    assert row["mean"] == pytest.approx(sums.sum() / counts.sum())
    f, boot = fieller(sums, counts, 0.95)[:2], _bootstrap_t(sums, counts)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((min(f[0], boot[0]), max(f[1], boot[1])))
    assert A.summarize(unequal, "atp", "event").equals(A.summarize(unequal, "atp", "event"))  # seeded
    other = A.summarize(unequal, "atp", "event", seed=1).iloc[0]
    assert (other["ci_low"], other["ci_high"]) != (row["ci_low"], row["ci_high"])


def test_the_summary_interval_of_a_constant_node_is_its_value_and_a_node_set_of_its_own_units():
    frame = pd.DataFrame({"event": np.tile(np.arange(12), 3), "layer": np.repeat([0, 1, 2], 12), "offset": 0,
                          "atp": np.concatenate([np.zeros(12), np.random.default_rng(2).normal(0, 1, 24)])})
    frame["event"] = frame["event"].map("e{:02d}".format)  # units in their sorted order, as the reference draws them
    out = A.summarize(frame[(frame["layer"] < 2) | (frame["event"] < "e11")], "atp", "event").set_index("layer")
    assert out.loc[0, ["ci_low", "ci_high"]].tolist() == [0.0, 0.0]  # no resample varies: t's empty width
    assert out["n_units"].tolist() == [12, 12, 11]
    per_event = frame[(frame["layer"] == 2) & (frame["event"] < "e11")]["atp"].to_numpy()
    t, boot = t_interval(per_event, 0.95), _bootstrap_t(per_event, np.ones(11))  # its 11 units resampled
    assert out.loc[2, ["ci_low", "ci_high"]].tolist() == pytest.approx([min(t[0], boot[0]), max(t[1], boot[1])])


def test_the_map_flags_where_atp_is_known_to_fail():
    assert A.caution(5, 0) == "slot token" and A.caution(-1, 3) == "earliest layer"
    assert A.caution(0, -1) == "slot token, earliest layer" and A.caution(5, 2) == ""


def test_agreement_counts_the_top_nodes_recovered():
    exact = np.array([5.0, -4.0, 0.1, 0.2, 3.0] + [0.0] * 15)
    estimate = np.array([4.0, 0.0, 0.1, 0.2, -6.0] + [0.0] * 15)
    out = A.agreement(estimate, exact, ks=(2, 3), fractions=(0.05, 0.25))
    assert out["top2"] == 0.5 and out["top3"] == pytest.approx(2 / 3)
    assert (out["k_5pct"], out["top_5pct"]) == (1, 0.0)  # 5 against -6
    assert (out["k_25pct"], out["top_25pct"]) == (5, 1.0)
    assert A.top_k(4630, fraction=0.05) == 232 and A.top_k(4, k=10) == 4
    with pytest.raises(ValueError, match="expected two equal 1-d maps"):
        A.agreement(estimate, exact[:3])


# --- the study ----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_study_on_the_pinned_run_equals_the_direct_calls(pinned_run, tmp_path, capsys):
    from behavioral.inference import models
    from behavioral.analysis.studies import get_study
    from behavioral.analysis.study import run_study

    study = get_study("attribution")
    options = study.Options(where=("category=religion",), modes=("swap",), positions="slot", validate=1,
                            device="cpu")
    report = run_study(study, [pinned_run], options, tmp_path / "out", progress=False).report
    assert ("attribution: intergroup model: religion P0S0T0: 1 modes × 5 in-group prompts × 1 events = 5 pairs"
            in capsys.readouterr().out)
    out = report.parent
    model, tokenizer, _ = models.load(str(PINNED_MODEL), "cpu", "fp32")
    engine = Engine(model, tokenizer, 32)
    trie = IP.setting_trie(tokenizer, SETTING)
    events = sample_events(embedded_events(), 1, 0)
    x = "a Muslim"
    pair = A.Pair(IP.build(tokenizer, SETTING, x, x, events[0]),
                  IP.build(tokenizer, SETTING, IP.swap_source(get_category("religion"), x, x), x, events[0]),
                  trie, A.expected_metric(trie))
    nodes = pd.read_csv(out / "nodes.csv")
    pairs = pd.read_csv(out / "pairs.csv")
    k = int(pairs.index[pairs["clean"] == x][0])
    direct = A.attribute(engine, [pair], scope="slot").nodes
    np.testing.assert_allclose(nodes.loc[nodes["pair"] == k, "atp"], direct["atp"], rtol=1e-5, atol=1e-9)
    validated = nodes[nodes["exact"].notna()]
    assert set(validated["pair"]) == {0}
    agreement = pd.read_csv(out / "agreement.csv")
    assert agreement["over"].tolist() == ["pair 0", "pooled", "mean map"]
    cost = pd.read_csv(out / "cost.csv").set_index("method")
    assert cost.loc["AtP", "backwards"] == 5 and cost.loc["activation patching", "prompts"] == 1 + len(validated) + 1
    text = report.read_text()
    assert "What this can and cannot show" in text and "Spearman" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["study"] == "attribution" and manifest["layers"] == ["hook_embed", "blocks.0.hook_resid_post",
                                                                         "blocks.1.hook_resid_post"]


@pytest.mark.parametrize("argv, message", [
    (["--positions", "middle"], "--positions 'middle': expected one of slot, system, prompt"),
    (["--mode", "both"], "--mode: unknown mode 'both'; expected one of person, swap"),
    (["--source", "a Jew"], "--source is for another slot's pairs; persona pairs take --mode"),
    (["--validate", "-1"], "--validate must be at least 0, got -1"),
    (["--kind", "perceiver"], "--kind 'perceiver' is not a span kind of suite intergroup"),
    (["--layers", "9"], "--layers: block 9 was not available"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(pinned_run, tmp_path, capsys, argv, message):
    from behavioral.cli.commands import main

    out = tmp_path / "new" / "out"
    assert main(["interp", "attribution", str(pinned_run), "--out", str(out), "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err.rstrip("\n").split("\n")[-1]  # after the library's loading bar, if any
    assert message in err, err
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_another_suites_slot_pairs_differ_in_the_slot_only(long_model_dir, tmp_path):
    from behavioral.runner.run import RunConfig, run
    from behavioral.analysis.studies import get_study
    from behavioral.analysis.study import run_study
    from behavioral.suites import isear

    config = RunConfig("isear", str(long_model_dir), isear.Options(sample_k=2, events="project"), mode="score",
                       device="cpu", dtype="fp32")
    run_dir = run(config, tmp_path / "run", progress=False)
    study = get_study("attribution")
    report = run_study(study, [run_dir], study.Options(limit_events=3, positions="slot", validate=1,
                                                       device="cpu"), tmp_path / "out", progress=False).report
    out = report.parent
    pairs = pd.read_csv(out / "pairs.csv")
    assert len(pairs) == 3 and (pairs["clean"] != pairs["source"]).all()
    assert [c.split("|")[0] for c in pairs["clean_item"]] == [s.split("|")[0] for s in pairs["source_item"]]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metric"] == "log-probability of the clean prompt's greedy answer"
    assert manifest["slot"] == "gender (slot gender, field gender)"
    nodes = pd.read_csv(out / "nodes.csv")
    assert (nodes["offset"] <= 0).all() and nodes["exact"].notna().any()
