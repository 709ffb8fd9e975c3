"""The engine's answers: tree-masked scoring against brute force and against greedy generation."""

from __future__ import annotations

import math
import re
import warnings
from functools import partial

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from behavioral.inference import chat
from behavioral.suites.intergroup import prompts
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie
from behavioral.suites.intergroup.answers import answer_decided, parse_intensity
from behavioral.suites.intergroup.corpus import embedded_events
from behavioral.inference.engine import Batch, Engine, Sampling, shared_prefix_length
from behavioral.inference.prefix_plan import common_length
from tests.conftest import favouring_model, make_tiny_model


def _prompt_ids(tokenizer, n: int, setting: str = "P0S0T0", perceivers=("a Christian", "a person from Canada")):
    events = embedded_events()
    out = []
    for i in range(n):
        p = prompts.build(setting, perceivers[i % len(perceivers)], "a Hindu", events[i].emotion,
                          events[i].narrative("text"))
        text, _ = chat.render(tokenizer, p, chat.SYSTEM)
        out.append(tokenizer(text, add_special_tokens=False).input_ids)
    return out


@torch.no_grad()
def _brute_force(model, trie: AnswerTrie, tokenizer, ids: list[int], max_rating: int):
    """Answer log-probs by one full forward per answer string, and the greedy walk by one forward per step."""
    logp = {}
    for value in range(max_rating + 1):
        answer = tokenizer.encode(str(value), add_special_tokens=False)
        lp = model(torch.tensor([ids + answer])).logits[0].double().log_softmax(-1)
        path = sum(lp[len(ids) - 1 + j, t] for j, t in enumerate(answer))
        cont = lp[len(ids) - 1 + len(answer)][trie.continues].exp().sum()
        logp[value] = float(path + torch.log1p(-cont))
    path: list[int] = []
    while True:
        logits = model(torch.tensor([ids + path])).logits[0, -1]
        text = tokenizer.decode(path)
        kids = sorted({tokenizer.encode(str(v), add_special_tokens=False)[len(path)]
                       for v in range(max_rating + 1)
                       if str(v).startswith(text) and len(tokenizer.encode(str(v), add_special_tokens=False)) > len(path)})
        if not kids:
            break
        best = max(kids, key=lambda t: logits[t])
        others = logits.clone()
        others[kids] = -math.inf
        if path and logits[best] <= others.max():
            break
        path.append(best)
    return logp, int(tokenizer.decode(path))


@pytest.mark.parametrize("max_rating", [100, 10])
def test_score_equals_brute_force_scoring_of_every_answer(tiny_model, tiny_tokenizer, max_rating):
    trie = AnswerTrie.for_scale(tiny_tokenizer, max_rating)
    ids = _prompt_ids(tiny_tokenizer, 3)
    scores = Engine(tiny_model, tiny_tokenizer, batch_size=3).score(ids, trie)
    for prompt, got in zip(ids, scores):
        logp, greedy = _brute_force(tiny_model, trie, tiny_tokenizer, prompt, max_rating)
        z = sum(math.exp(v) for v in logp.values())
        assert got.valid_mass == pytest.approx(z, rel=1e-4)
        assert got.expected == pytest.approx(sum(k * math.exp(v) for k, v in logp.items()) / z, rel=1e-4)
        assert got.greedy == greedy


def test_trie_of_a_digit_tokenizer_has_one_node_per_digit_string(tiny_tokenizer):
    trie = AnswerTrie.for_scale(tiny_tokenizer, 100)
    assert len(trie) == 10 + 90 + 1
    assert sorted(v for v in trie.value_of if v is not None) == list(range(101))
    assert int(trie.depth.max()) == 3


def test_prefix_cache_and_batching_do_not_change_scores(tiny_model, tiny_tokenizer):
    trie = AnswerTrie.for_scale(tiny_tokenizer, 100)
    ids = _prompt_ids(tiny_tokenizer, 4, perceivers=("a Christian",))
    assert shared_prefix_length(ids) > 20
    together = Engine(tiny_model, tiny_tokenizer, batch_size=4).score(ids, trie)
    alone = [Engine(tiny_model, tiny_tokenizer, batch_size=1).score([p], trie)[0] for p in ids]
    for a, b in zip(together, alone):
        assert a.greedy == b.greedy
        assert a.expected == pytest.approx(b.expected, abs=1e-4)
        assert a.start_mass == pytest.approx(b.start_mass, abs=1e-6)


def test_batched_generation_equals_one_prompt_at_a_time(tiny_model, tiny_tokenizer):
    ids = _prompt_ids(tiny_tokenizer, 4)
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=4, max_new_tokens=5)
    batched = engine.generate(ids)
    for prompt, got in zip(ids, batched):
        out = tiny_model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=5,
                                  eos_token_id=engine.stop_ids, pad_token_id=engine.pad_id)[0, len(prompt):]
        assert tiny_tokenizer.decode(out, skip_special_tokens=True) == got.text
        assert got.truncated == (len(out) == 5 and int(out[-1]) not in engine.stop_ids)


def _talkative_model(tokenizer, seed: int):
    """A tiny model whose greedy replies mix words, spaces and digits, so that numbers turn up anywhere within 128
    tokens."""
    return favouring_model(tokenizer, seed, lambda t: t.strip(" .").isdigit() or t in (" ", ".", " I", " can", "'t"),
                           bias=1.5)


@pytest.mark.parametrize("seed", [4, 5])
def test_early_stopping_gives_the_parsed_answers_of_decoding_to_the_limit(tiny_tokenizer, seed):
    model = _talkative_model(tiny_tokenizer, seed)
    ids = _prompt_ids(tiny_tokenizer, 16)
    engine = Engine(model, tiny_tokenizer, batch_size=8, max_new_tokens=128)
    full = engine.generate(ids)
    computed_full = engine.tokens_computed
    engine.tokens_computed = 0
    early = engine.generate(ids, until=[partial(answer_decided, max_rating=100)] * len(ids))
    answers = [parse_intensity(g.text, 100) for g in full]
    assert [parse_intensity(g.text, 100) for g in early] == answers
    assert all(f.text.startswith(e.text) for f, e in zip(full, early))
    assert sum(a is not None for a in answers) >= 4, "the test needs replies that hold numbers"
    assert sum(f.truncated for f in full) >= 4 and engine.tokens_computed < computed_full
    for f, e in zip(full, early):  # a reply stopped early is never truncated; one that runs on is, as before
        assert e.truncated == (f.truncated and not answer_decided(f.text, 100))


class _FirstTokenIsADigit(LogitsProcessor):
    """Forces the first generated token to be a digit; every later token is the model's own greedy choice."""

    def __init__(self, prompt_length: int, digits: list[int]):
        self.prompt_length = prompt_length
        self.digits = digits

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] == self.prompt_length:
            forced = torch.full_like(scores, -math.inf)
            forced[:, self.digits] = scores[:, self.digits]
            return forced
        return scores


@pytest.mark.parametrize(("seed", "digit_bias"), [(2, 1.0), (3, 0.5)])
def test_score_greedy_equals_generation_wherever_generation_is_a_number(tiny_tokenizer, seed, digit_bias):
    model = make_tiny_model(len(tiny_tokenizer), seed=seed)
    trie = AnswerTrie.for_scale(tiny_tokenizer, 100)
    digits = [int(t) for t in trie.tokens[list(trie.children[0])]]
    head = torch.nn.Linear(model.config.hidden_size, len(tiny_tokenizer), bias=True)
    with torch.no_grad():  # sharper logits, and digits favoured so that some answers run to two digits
        head.weight.copy_(model.lm_head.weight * 4)
        head.bias.zero_()
        head.bias[digits] = digit_bias
    model.lm_head = head
    ids = _prompt_ids(tiny_tokenizer, 24)
    scored = Engine(model, tiny_tokenizer, batch_size=8).score(ids, trie)
    answers = []
    for prompt, score in zip(ids, scored):
        forced = LogitsProcessorList([_FirstTokenIsADigit(len(prompt), digits)])
        out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=4, logits_processor=forced,
                             pad_token_id=tiny_tokenizer.pad_token_id)
        text = tiny_tokenizer.decode(out[0, len(prompt):])
        first = int(re.match(r"\d+", text).group())
        if first <= 100:
            answers.append(first)
            assert score.greedy == first, text
    assert len(answers) >= 12
    assert {len(str(a)) for a in answers} == {1, 2}, "the test needs answers that stop and that continue"


@torch.no_grad()
def test_logits_with_the_prefix_cache_equal_a_plain_forward(tiny_model, tiny_tokenizer):
    ids = _prompt_ids(tiny_tokenizer, 3, perceivers=("a Christian",))
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=3)
    batch = Batch(engine, ids)
    assert batch.cache is not None
    cached = tiny_model(input_ids=batch.ids, attention_mask=batch.bias(batch.prompt_mask()),
                        position_ids=batch.positions, use_cache=True, **{engine.cache_key: batch.cache}).logits[:, -1]
    for row, prompt in enumerate(ids):
        plain = tiny_model(torch.tensor([prompt])).logits[0, -1]
        assert torch.max(torch.abs(cached[row] - plain)) < 1e-4


def test_rows_reading_different_cached_prefixes_equal_plain_forwards(tiny_model, tiny_tokenizer):
    """Two personas' prompts in one batch: each row reads its own persona's branch point from the prefix store (one
    cache, prefixes left-padded), and its logits, scores and greedy text are those of the prompt alone."""
    ids = _prompt_ids(tiny_tokenizer, 8, perceivers=("a Jew", "a person from the United Kingdom"))
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=8, max_new_tokens=5)
    [chunk] = engine._chunks(ids, 0)
    prefixes = {tuple(ids[i][:k]) for i, k in chunk}
    assert len(prefixes) == 2 and len({len(p) for p in prefixes}) == 2  # two prefixes, of different lengths
    batch = Batch(engine, [ids[i] for i, _ in chunk], [k for _, k in chunk])
    cached = tiny_model(input_ids=batch.ids, attention_mask=batch.bias(batch.prompt_mask()),
                        position_ids=batch.positions, use_cache=True, **{engine.cache_key: batch.cache}).logits[:, -1]
    for row, (i, _) in enumerate(chunk):
        assert torch.max(torch.abs(cached[row] - tiny_model(torch.tensor([ids[i]])).logits[0, -1])) < 1e-4
    trie = AnswerTrie.for_scale(tiny_tokenizer, 100)
    for together, prompt in zip(engine.score(ids, trie), ids):
        alone = Engine(tiny_model, tiny_tokenizer, batch_size=1).score([prompt], trie)[0]
        assert together.greedy == alone.greedy
        assert together.expected == pytest.approx(alone.expected, abs=1e-4)
    for got, prompt in zip(engine.generate(ids), ids):
        out = tiny_model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=5,
                                  eos_token_id=engine.stop_ids, pad_token_id=engine.pad_id)[0, len(prompt):]
        assert tiny_tokenizer.decode(out, skip_special_tokens=True) == got.text


def test_prefixes_filled_in_batches_equal_each_computed_alone(tiny_model, tiny_tokenizer):
    """The prefix store computes a pool's prefixes in one forward per level of their prefix tree, not one per prefix,
    a deeper prefix extending the stored one above it; every stored key and value is that of the prefix alone."""
    a, b = _prompt_ids(tiny_tokenizer, 2, perceivers=("a Jew", "a person from the United Kingdom"))
    d = common_length(a, b)  # the two personas' prompts part here
    wanted = [tuple(a[:d + 35]), tuple(b[:d + 20]), tuple(a[:d]), tuple(a[:d + 20])]
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=8)
    forwards = []
    handle = tiny_model.model.embed_tokens.register_forward_hook(lambda m, i, o: forwards.append(tuple(o.shape[:2])))
    try:
        engine._fill_prefixes(wanted)
    finally:
        handle.remove()
    assert forwards == [(1, d), (2, 20), (1, 15)]  # a[:d] alone (it tells the cache kind), then one per level
    for prefix in wanted:
        alone = tiny_model(torch.tensor([prefix]), use_cache=True)
        alone = getattr(alone, engine.cache_key)
        for stored, plain in zip(engine.prefixes.entries[prefix].layers, alone.layers):
            assert stored.keys.shape == plain.keys.shape
            assert torch.allclose(stored.keys, plain.keys, atol=1e-5)
            assert torch.allclose(stored.values, plain.values, atol=1e-5)
    forwards.clear()
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=8)
    handle = tiny_model.model.embed_tokens.register_forward_hook(lambda m, i, o: forwards.append(tuple(o.shape[:2])))
    try:
        engine._fill_prefixes([tuple(a[:d + 20]), tuple(b[:d + 20])])
    finally:
        handle.remove()
    assert forwards == [(1, d), (2, 20)]  # their shared d tokens once, then each one's own 20


@pytest.mark.parametrize("sampled", [False, True])
def test_generate_and_score_equals_generate_and_score_apart(tiny_tokenizer, sampled):
    model = _talkative_model(tiny_tokenizer, 6)  # replies that hold numbers, stop early, and run on
    trie = AnswerTrie.for_scale(tiny_tokenizer, 100)
    ids = _prompt_ids(tiny_tokenizer, 12) + _prompt_ids(tiny_tokenizer, 4, perceivers=("a Christian",))
    engine = Engine(model, tiny_tokenizer, batch_size=5, max_new_tokens=24)
    kwargs = {"until": [partial(answer_decided, max_rating=100)] * len(ids)}
    if sampled:
        kwargs |= {"sampling": Sampling(temperature=1.0), "seeds": list(range(len(ids)))}
    joint = engine.generate_and_score(ids, trie, **kwargs)
    computed = engine.tokens_computed
    engine.tokens_computed = 0
    generated, scored = engine.generate(ids, **kwargs), engine.score(ids, trie)
    assert [g.text for g in joint] == [g.text for g in generated]
    assert [g.truncated for g in joint] == [g.truncated for g in generated]
    assert len({g.text for g in joint}) > 4 and any(g.truncated for g in joint) and not all(g.truncated for g in joint)
    for g, s in zip(joint, scored):
        assert g.scores.greedy == s.greedy
        assert g.scores.expected == pytest.approx(s.expected, abs=1e-5)
        assert g.scores.valid_mass == pytest.approx(s.valid_mass, rel=1e-5)
    assert computed < engine.tokens_computed  # each prompt ran once, not twice
    with pytest.raises(ValueError, match="prefill"):
        engine.generate_and_score(ids, AnswerTrie.build(tiny_tokenizer, AnswerSpec.choices(
            {"yes": ["yes"], "no": ["no"]}, prefill="Answer:")))


def test_no_deprecated_cache_keyword(tiny_model, tiny_tokenizer):
    """The engine passes the KV cache under the keyword the installed transformers wants (`cache` from 5.24, where
    `past_key_values` warns FutureWarning on every forward), so no run prints a deprecation."""
    ids = _prompt_ids(tiny_tokenizer, 3, perceivers=("a Christian",))
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=3, max_new_tokens=3)
    trie = AnswerTrie.build(tiny_tokenizer, AnswerSpec.integers(0, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        engine.generate(ids)
        engine.score(ids, trie)
        engine.generate_and_score(ids, trie)
