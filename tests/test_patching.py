"""Activation patching of the persona on the tiny fp32 Llama: sanity checks that cannot pass by accident, alignment
rules, batching, the engine left as found, the forward-count bound, the documented table columns, and intergroup's
δ-by-layer experiment (its prompts, swap sources and gap table)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from activations.capture import ResidualTrace, parse_layers
from activations.spans import SpanError, TokenSpan
from behavioral.inference import chat
from behavioral.inference.lazy_tree import AnswerTree
from behavioral.inference.engine import Engine
from behavioral.suites.intergroup import patching as IP
from behavioral.suites.intergroup import prompts
from behavioral.suites.intergroup.corpus import Event
from behavioral.suites.intergroup.groups import get_category
from interp.patching.gap_by_layer import GAP_COLUMNS, ONE_EVENT
from interp.patching.gap_report import gap_figure
from behavioral.analysis.cell_gap import empathy_gap, zscore
from interp import patching as P
from interp.patching import PatchPrompt, PatchSpec
from tests.conftest import NO_SYSTEM, build_tiny_tokenizer

SETTING = "P0S1T0"
EVENTS = [Event("joy-t1", "joy", "I won the race.", "I felt joy when I won the race."),
          Event("fear-t2", "fear", "A dog ran at me.", "I felt fear when a dog ran at me.")]
ALL_LAYERS = ("hook_embed", 0, 1)  # the tiny model has 2 decoder layers
TOL = 1e-5


@pytest.fixture
def engine(tiny_model, tiny_tokenizer):
    return Engine(tiny_model, tiny_tokenizer, batch_size=16, answer_tree=AnswerTree("full"))


@pytest.fixture(scope="module")
def trie(tiny_tokenizer):
    return IP.setting_trie(tiny_tokenizer, SETTING)


def prompt(tok, perceiver, experiencer="a Jew", event=EVENTS[0]):
    return IP.build(tok, SETTING, perceiver, experiencer, event)


def same_length_pair(tok):
    """Two religion personas whose prompts have the same number of tokens (and different scores)."""
    built = [prompt(tok, p) for p in get_category("religion").identities]
    for i, a in enumerate(built):
        for b in built[i + 1:]:
            if len(a) == len(b):
                return a, b
    pytest.fail("no two religion personas tokenize to the same length")


def clean(engine, trie, items):
    return P.patched_scores(engine, items, items, PatchSpec(()), trie)


def assert_scores_close(a, b, tol):
    assert a.greedy == b.greedy
    assert abs(a.expected - b.expected) <= tol
    assert abs(a.start_mass - b.start_mass) <= tol
    assert max(abs(x - y) for x, y in zip(a.answer_logp, b.answer_logp)) <= tol


def spread(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a.answer_logp, b.answer_logp))


# --- the two sanity checks ----------------------------------------------------------------------------------------

def test_patching_everything_from_the_source_gives_the_source(engine, trie, tiny_tokenizer):
    target, source = same_length_pair(tiny_tokenizer)
    t_clean, s_clean = clean(engine, trie, [target, source])
    assert spread(t_clean, s_clean) > 1e-3  # the two prompts really differ, so equality below means something
    patched = P.patched_scores(engine, [target], [source], PatchSpec(ALL_LAYERS, "all"), trie)[0]
    assert_scores_close(patched, s_clean, 1e-4)
    # Every decoder layer but not the embedding: the last prompt position's logits (start_mass) are the source's,
    # while the answer-trie tokens still read the target's layer-0 keys and values.
    blocks = P.patched_scores(engine, [target], [source], PatchSpec((0, 1), "all"), trie)[0]
    assert abs(blocks.start_mass - s_clean.start_mass) <= 1e-6
    assert spread(blocks, s_clean) > 1e-5


def test_patching_with_the_targets_own_activations_changes_nothing(engine, trie, tiny_tokenizer):
    """Every group that copies positions one to one (persona_mean replaces a span by its mean: not a no-op)."""
    targets = [prompt(tiny_tokenizer, "a Muslim"), prompt(tiny_tokenizer, "a Buddhist", "a Hindu", EVENTS[1])]
    groups = ["persona_end", "persona_end:1", "system", "all"]
    before = clean(engine, trie, targets)
    specs = [PatchSpec.parse(g, ALL_LAYERS) for g in groups for _ in targets]
    after = P.patched_scores(engine, targets * len(groups), targets * len(groups), specs, trie)
    for a, b in zip(after, before * len(groups)):
        assert_scores_close(a, b, TOL)


def test_patching_changes_the_target(engine, trie, tiny_tokenizer):
    """The hooks really fire: a different persona at layer 0 moves the answer distribution."""
    target, source = prompt(tiny_tokenizer, "a Muslim"), prompt(tiny_tokenizer, "a person")
    before = clean(engine, trie, [target])[0]
    after = P.patched_scores(engine, [target], [source], PatchSpec((0,), "system"), trie)[0]
    assert spread(after, before) > 1e-4


def test_patching_nothing_changes_nothing(engine, trie, tiny_tokenizer):
    targets = [prompt(tiny_tokenizer, "a Muslim"), prompt(tiny_tokenizer, "a Hindu", "a Christian", EVENTS[1])]
    plain = engine.score([list(t.ids) for t in targets], trie)  # share_prefix on: the suite's own path
    sources = [prompt(tiny_tokenizer, "a person")] * 2
    for spec in (PatchSpec(()), PatchSpec((), "system")):
        for a, b in zip(P.patched_scores(engine, targets, sources, spec, trie), plain):
            assert a.greedy == b.greedy
            assert abs(a.expected - b.expected) <= TOL and abs(a.start_mass - b.start_mass) <= TOL


def test_batching_gives_the_same(engine, tiny_model, tiny_tokenizer, trie):
    """Two targets of different lengths with different specs at once, or one at a time, or one row per forward."""
    targets = [prompt(tiny_tokenizer, "a Christian"), prompt(tiny_tokenizer, "a Jew", "a Muslim", EVENTS[1])]
    sources = [prompt(tiny_tokenizer, "a person"), prompt(tiny_tokenizer, "a Hindu", "a Muslim", EVENTS[1])]
    assert len(targets[0]) != len(targets[1])
    specs = [PatchSpec((0,), "persona_mean"), PatchSpec(("hook_embed", 1), "system")]
    together = P.patched_scores(engine, targets, sources, specs, trie)
    alone = [P.patched_scores(engine, [t], [s], sp, trie)[0] for t, s, sp in zip(targets, sources, specs)]
    single = P.patched_scores(Engine(tiny_model, tiny_tokenizer, batch_size=1), targets, sources, specs, trie)
    for a, b, c in zip(together, alone, single):
        assert_scores_close(a, b, TOL)
        assert_scores_close(a, c, TOL)
    assert spread(together[0], together[1]) > 1e-3


def test_engine_left_as_found(engine, trie, tiny_tokenizer, tiny_model):
    """Inside an outer engine.hooked block (a tracer, the shared prefix on), patching leaves that block's settings in
    force afterwards, also when scoring raises, and no hook behind."""
    hooks = {n: (dict(m._forward_hooks), dict(m._forward_pre_hooks)) for n, m in tiny_model.named_modules()}
    t, s = prompt(tiny_tokenizer, "a Muslim"), prompt(tiny_tokenizer, "a person")
    # enough prompts that their shared prefix saves the positions a cached prefix must (prefix_plan)
    ids = [list(prompt(tiny_tokenizer, "a Muslim", who).ids) for who in ("a Muslim", "a Jew", "a Christian", "a Hindu")]

    def settings_in_force() -> bool:
        """The tracer is active (results carry states) and the shared prefix is cached (prefix tokens computed)."""
        before = engine.prefixes.tokens_computed
        engine.prefixes.entries.clear()
        scores = engine.score(ids, trie)
        return all(x.state is not None for x in scores) and engine.prefixes.tokens_computed > before

    with engine.hooked(tracer=lambda positions: ResidualTrace(tiny_model, [0], positions=positions)):
        assert settings_in_force()
        P.patched_scores(engine, [t], [s], PatchSpec((0,), "system"), trie)
        assert settings_in_force()
        score = engine.score

        def boom(*args, **kwargs):
            raise RuntimeError("boom")

        engine.score = boom
        with pytest.raises(RuntimeError, match="boom"):
            P.patched_scores(engine, [t], [s], PatchSpec((0,), "system"), trie)
        engine.score = score
        assert settings_in_force()
    assert hooks == {n: (dict(m._forward_hooks), dict(m._forward_pre_hooks)) for n, m in tiny_model.named_modules()}


def test_sweep_costs_at_most_layers_plus_one_forwards_per_prompt(engine, tiny_model, tiny_tokenizer, trie,
                                                                 monkeypatch):
    identities = get_category("religion").identities
    targets = [prompt(tiny_tokenizer, identities[i], identities[i], EVENTS[i % 2]) for i in range(3)]
    sources = [prompt(tiny_tokenizer, identities[i + 1], identities[i], EVENTS[i % 2]) for i in range(3)]
    engine.batch_size = 4  # several rows per forward, and several forwards
    calls = []
    forward = tiny_model.forward
    monkeypatch.setattr(tiny_model, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    layers = [0, 1]
    frame = P.sweep(engine, targets, sources, layers, trie, groups=("system",))
    n, L = len(targets), len(layers)
    assert len(calls) <= (L + 1) * n
    # Exactly: one capture forward per distinct source prefix length (3 personas), then one engine call over the
    # clean targets, the clean sources and the N * L patched prompts, batch_size rows per forward.
    prefix_lengths = {s.spans["system"].end for s in sources}
    assert len(calls) == len(prefix_lengths) + math.ceil((2 * n + n * L) / engine.batch_size)
    assert len(frame) == n * L


def test_progress_tells_the_planned_forwards_and_an_estimate(engine, tiny_model, tiny_tokenizer, trie, monkeypatch,
                                                             capsys):
    """The plan printed before any forward names as many forwards as then run; an estimate follows the first
    scoring forward."""
    identities = get_category("religion").identities
    targets = [prompt(tiny_tokenizer, identities[i], identities[i], EVENTS[i % 2]) for i in range(3)]
    sources = [prompt(tiny_tokenizer, identities[i + 1], identities[i], EVENTS[i % 2]) for i in range(3)]
    engine.batch_size = 4
    calls = []
    forward = tiny_model.forward
    monkeypatch.setattr(tiny_model, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    P.sweep(engine, targets, sources, [0, 1], trie, groups=("system",), progress="sweep")
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert f"sweep: {len(calls)} forwards planned (3 setup, {len(calls) - 3} main" in text
    assert "one main forward took" in text and "estimated" in text
    P.sweep(engine, targets, sources, [0], trie, groups=("system",))
    printed = capsys.readouterr()
    assert "planned" not in printed.out + printed.err  # silent without a label


def test_sweep_columns_and_metrics(engine, trie, tiny_tokenizer):
    targets = [prompt(tiny_tokenizer, "a Muslim", "a Muslim"), prompt(tiny_tokenizer, "a Jew", "a Jew", EVENTS[1])]
    sources = [prompt(tiny_tokenizer, "a Hindu", "a Muslim"), prompt(tiny_tokenizer, "a Christian", "a Jew", EVENTS[1])]
    meta = [{"perceiver": "a Muslim"}, {"perceiver": "a Jew"}]
    frame = P.sweep(engine, targets, sources, ["hook_embed", 0, -1], trie, meta=meta)
    assert list(frame.columns) == ["prompt", "layer", "positions", "layers", "perceiver", *P.METRICS]
    assert list(dict.fromkeys(zip(frame["layer"], frame["layers"]))) == [
        (-1, "hook_embed"), (0, "blocks.0.hook_resid_post"), (1, "blocks.1.hook_resid_post")]
    assert len(frame) == 2 * 3 * len(P.SWEEP_POSITION_GROUPS)
    assert set(frame["positions"]) == set(P.SWEEP_POSITION_GROUPS)
    row = frame.iloc[0]
    gap = row["expected_source"] - row["expected_clean"]
    assert row["delta_expected"] == pytest.approx(row["expected"] - row["expected_clean"])
    assert row["frac_closed"] == pytest.approx(row["delta_expected"] / gap)
    assert row["delta_logp_greedy"] == pytest.approx(row["logp_greedy"] - row["logp_greedy_clean"])
    # At the last layer nothing after the persona reads it any more: nothing moves.
    last = frame[frame["layer"] == 1]
    assert np.abs(last["delta_expected"]).max() < 1e-6
    summary = P.summarize(frame)
    assert list(summary.columns) == ["layer", "positions", "delta_expected", "delta_logp_greedy", "n", "frac_closed"]
    assert len(summary) == 3 * len(P.SWEEP_POSITION_GROUPS)


def test_patched_gap(tiny_model, tiny_tokenizer, trie):
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=64)
    frame = IP.patched_gap_prompts(engine, "religion", SETTING, EVENTS[:1], [0], positions="system")
    table = IP.gap_table(frame, "religion")
    assert list(table.columns) == list(GAP_COLUMNS)
    assert list(zip(table["mode"], table["layer"])) == [("person", 0), ("swap", 0)]
    assert (table["n_prompts"] == 25).all()
    # δ_unpatched is δ of the plain suite scores (z-scoring magnifies the prefix cache's ~1e-7 differences).
    cat = get_category("religion")
    M0 = np.array([[s.expected for s in engine.score(
        [list(prompt(tiny_tokenizer, p, x).ids) for x in cat.identities], trie)] for p in cat.identities])
    assert table["delta_unpatched"].iloc[0] == pytest.approx(empathy_gap(zscore(M0), cat.in_group()), rel=1e-3)
    counts = table[["p_unpatched", "p_patched"]].to_numpy() * 120  # exact p over the 5! matchings: a multiple of 1/120
    assert np.allclose(counts, counts.round()) and (counts >= 1).all()
    assert (table["p_patched_fwe"] >= table["p_patched"]).all() and (table["p_min"] == 1 / 120).all()
    assert (table["interval_note"] == ONE_EVENT).all() and table["gap_closed_low"].isna().all()  # one event
    assert (table["delta_patched"] != table["delta_unpatched"]).all()
    swap = frame[frame["mode"] == "swap"]
    assert (swap["source_perceiver"] != swap["perceiver"]).all()
    lines = {line.get_label(): list(line.get_ydata()) for line in gap_figure(table).axes[0].get_lines()}
    assert lines["unpatched"] == [table["gap_raw_unpatched"].iloc[0]] * 2
    assert list(gap_figure(table).axes[0].containers[0].lines[0].get_ydata()) == [table["gap_raw_patched"].iloc[0]]
    heatmap = P.heatmap_figure(P.summarize(frame, ("layer", "mode")).rename(columns={"mode": "positions"}))
    assert heatmap.axes[0].get_images()[0].get_array().shape == (1, 2)  # layer 0 × the two modes
    with pytest.raises(P.PatchError, match="unknown mode 'both'; expected one of person, swap"):
        IP.patched_gap_prompts(engine, "religion", SETTING, EVENTS[:1], [0], modes=("both",))


def test_the_in_group_sweep_patches_each_in_group_prompt_from_its_swap_source(tiny_tokenizer):
    religion = get_category("religion")
    targets, sources, meta = IP.ingroup_sweep_prompts(tiny_tokenizer, religion, SETTING, EVENTS)
    assert len(targets) == len(sources) == len(meta) == 5 * 2
    assert [(m["perceiver"], m["source_perceiver"], m["event_id"]) for m in meta[:2]] == [
        (religion.identities[0], IP.swap_source(religion, religion.identities[0], religion.identities[0]), "joy-t1"),
        (religion.identities[0], IP.swap_source(religion, religion.identities[0], religion.identities[0]), "fear-t2")]
    assert targets[0].ids == prompt(tiny_tokenizer, religion.identities[0], religion.identities[0]).ids


# --- alignment, spans, answers ------------------------------------------------------------------------------------

def fake(length, persona, system):
    return PatchPrompt(tuple(range(length)), {"persona": TokenSpan("persona", *persona),
                                              "system": TokenSpan("system", *system)})


def test_alignment_rules():
    source, target = fake(20, (3, 5), (3, 10)), fake(21, (3, 6), (3, 11))
    assert P.align(PatchSpec((0,), "persona_end"), source, target) == [(4, (3,)), (5, (4,))]
    assert P.align(PatchSpec((0,), "persona_end", 1), source, target) == [(5, (4,))]
    assert P.align(PatchSpec((0,), "persona_mean"), source, target) == [(t, (3, 4)) for t in (3, 4, 5)]
    assert P.align(PatchSpec((0,), "system"), source, target) == [(t, (t - 1,)) for t in range(4, 11)]
    assert P.align(PatchSpec((0,), "system"), target, source) == [(t, (t + 1,)) for t in range(3, 10)]
    with pytest.raises(P.PatchError, match="equal length"):
        P.align(PatchSpec((0,), "all"), source, target)
    assert P.align(PatchSpec((0,), "all"), source, source) == [(i, (i,)) for i in range(20)]
    with pytest.raises(P.PatchError):
        PatchSpec((0,), "persona_mean", 2)
    with pytest.raises(P.PatchError):
        PatchSpec((0,), "middle")
    assert PatchSpec.parse("persona_end:2", [3, 1]) == PatchSpec((3, 1), "persona_end", 2)
    assert PatchSpec.parse("persona_end:2", [3, 1]).hooks(4) == ("blocks.1.hook_resid_post", "blocks.3.hook_resid_post")
    with pytest.raises(P.PatchError, match="bad position group 'persona_end:x'"):
        PatchSpec.parse("persona_end:x", [0])


@pytest.mark.parametrize("template", [None, NO_SYSTEM])
def test_system_span(tiny_tokenizer, template):
    tok = tiny_tokenizer if template is None else build_tiny_tokenizer(template)
    fmt = chat.detect_format(tok)
    assert fmt == (chat.SYSTEM if template is None else chat.FOLDED)
    p = prompts.build(SETTING, "a person from Iran", "a Jew", "joy", "I won.")
    enc = P.encode(tok, p, "perceiver", fmt)
    system, persona = enc.spans["system"], enc.spans["persona"]
    assert system.start == persona.start
    text = tok.decode(list(enc.ids[system.start:system.end]))
    assert text.strip().startswith("a person from Iran") and text.endswith("No explanation is needed.")
    assert "needed" not in tok.decode(list(enc.ids[system.end:system.end + 1]))
    assert "experiencer" in enc.spans and "perceiver" not in enc.spans  # the patched slot is the persona
    with pytest.raises(SpanError, match="the prompt has no slot 'speaker' to patch; its slots: perceiver, experiencer"):
        P.encode(tok, p, "speaker", fmt)


def test_answer_logprobs_match_the_scores(engine, trie, tiny_tokenizer):
    s = clean(engine, trie, [prompt(tiny_tokenizer, "a Muslim")])[0]
    logp = np.array(s.answer_logp)
    assert np.exp(logp).sum() == pytest.approx(s.valid_mass, rel=1e-6)
    probs = np.exp(logp - logp.max())
    assert (probs / probs.sum()) @ np.array(s.values) == pytest.approx(s.expected, rel=1e-6)
    assert s.logp(s.greedy) == s.answer_logp[s.values.index(s.greedy)]


def test_source_states_one_forward_per_distinct_prompt(tiny_model, monkeypatch):
    calls = []
    forward = tiny_model.forward
    monkeypatch.setattr(tiny_model, "forward", lambda *a, **k: calls.append(k["input_ids"].shape) or forward(*a, **k))
    ids = [(5, 6, 7, 8), (5, 6, 7, 9), (5, 6, 7, 8), (5, 6, 7, 8, 10)]
    cache = P.source_states(tiny_model, ids, [1], upto=[None, None, None, 4])
    assert sorted(calls) == [(2, 4)]  # two distinct prefixes of length 4, one batched forward
    assert cache.names == ("hook_embed", "blocks.1.hook_resid_post")
    assert torch.equal(cache.states[0], cache.states[2]) and torch.equal(cache.states[0], cache.states[3])
    with torch.inference_mode():
        hidden = tiny_model(input_ids=torch.tensor([ids[1]]), output_hidden_states=True).hidden_states
    assert torch.allclose(cache.get(1, "hook_embed"), hidden[0][0], atol=1e-6)
    assert torch.equal(cache.get(1, -1), cache.get(1, "blocks.1.hook_resid_post"))
    with pytest.raises(P.PatchError, match=r"layer 0 \(blocks.0.hook_resid_post\) was not captured"):
        cache.get(1, 0)
    assert P.source_states(tiny_model, ids[:1], -1).names == P.source_states(tiny_model, ids[:1], "last").names == \
        cache.names


def test_swap_source():
    religion, race = get_category("religion"), get_category("race")
    assert IP.swap_source(religion, "a Jew", "a Muslim") == "a Muslim"
    assert IP.swap_source(religion, "a Muslim", "a Muslim") == "a Jew"
    assert IP.swap_source(race, "a white person", "a Caucasian") == "a black person"
    assert race.group_of[IP.swap_source(race, "a Latina", "a Latino")] != "Hispanic"


def test_minus_one_a_hook_name_and_the_parser_patch_the_same_layer(engine, trie, tiny_tokenizer):
    """-1 is the last block (as in --layers), whichever way it is written; hook_embed is the embedding by name only."""
    target, source = prompt(tiny_tokenizer, "a Muslim"), prompt(tiny_tokenizer, "a person")
    ways = [PatchSpec(layers, "system") for layers in
            ((-1,), -1, ("blocks.1.hook_resid_post",), "last", tuple(parse_layers("-1", 2)))]
    assert {spec.hooks(2) for spec in ways} == {("blocks.1.hook_resid_post",)}
    embeds = [PatchSpec(layers, "system") for layers in (("hook_embed",), "embed", ("hook_embed", "hook_embed"))]
    assert {spec.hooks(2) for spec in embeds} == {("hook_embed",)}
    scores = P.patched_scores(engine, [target] * 8, [source] * 8, [*ways, *embeds], trie)
    for s in scores[1:len(ways)]:
        assert_scores_close(s, scores[0], 0)
    for s in scores[len(ways) + 1:]:
        assert_scores_close(s, scores[len(ways)], 0)
    assert spread(scores[0], scores[len(ways)]) > 1e-5  # the embedding is another point than the last block


@pytest.mark.parametrize("layers, message", [
    ((2,), "layers: block 2 was not available; available: [0, 1]"), ((-3,), "layers: block -3 was not available"),
    (("blocks.5.hook_resid_post",), "layers: block 5 was not available"),
    (("hook_resid",), "layers: unknown entry 'hook_resid'; expected all, or a comma list of"),
])
def test_a_bad_patch_layer_is_named_before_any_forward(engine, trie, tiny_tokenizer, tiny_model, monkeypatch,
                                                        layers, message):
    monkeypatch.setattr(tiny_model, "forward", lambda *a, **k: pytest.fail("a forward ran"))
    t, s = prompt(tiny_tokenizer, "a Muslim"), prompt(tiny_tokenizer, "a person")
    with pytest.raises(P.PatchError) as err:
        P.patched_scores(engine, [t], [s], PatchSpec(layers, "system"), trie)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_patch_layer_of_no_layer_type_is_refused_at_once():
    with pytest.raises(P.PatchError, match="layers: 1.5 is not a layer; expected all, or a comma list of"):
        PatchSpec((0, 1.5), "system")
