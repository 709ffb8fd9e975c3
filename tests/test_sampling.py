"""Seeded sampling: each sample's stream comes from (seed, item, sample), so batches and resumes give the same text,
and the draws follow the model's distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from behavioral.inference.engine import Engine, Sampling, stream_seed
from tests.test_engine import _prompt_ids


def _texts(engine, prompts, sampling, seeds):
    return [g.text for g in engine.generate(prompts, sampling=sampling, seeds=seeds)]


def test_samples_do_not_depend_on_the_batch(tiny_model, tiny_tokenizer):
    prompts = _prompt_ids(tiny_tokenizer, 6)
    seeds = [stream_seed(0, f"item{i}", 0) for i in range(6)]
    sampling = Sampling(temperature=1.0, top_p=0.9)
    together = _texts(Engine(tiny_model, tiny_tokenizer, batch_size=6, max_new_tokens=6), prompts, sampling, seeds)
    alone = [_texts(Engine(tiny_model, tiny_tokenizer, batch_size=1, max_new_tokens=6), [p], sampling, [s])[0]
             for p, s in zip(prompts, seeds)]
    assert together == alone
    other = _texts(Engine(tiny_model, tiny_tokenizer, batch_size=6, max_new_tokens=6), prompts, sampling,
                   [stream_seed(1, f"item{i}", 0) for i in range(6)])
    assert other != together  # another run seed, other samples
    greedy = [g.text for g in Engine(tiny_model, tiny_tokenizer, max_new_tokens=6).generate(prompts)]
    assert together != greedy


def test_a_vanishing_top_p_is_greedy(tiny_model, tiny_tokenizer):
    prompts = _prompt_ids(tiny_tokenizer, 3)
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=3, max_new_tokens=5)
    seeds = [stream_seed(0, i, 0) for i in range(3)]
    assert _texts(engine, prompts, Sampling(1.0, 1e-9), seeds) == [g.text for g in engine.generate(prompts)]


def test_draws_follow_the_distribution(tiny_model, tiny_tokenizer):
    """4,000 one-token samples of one prompt at temperature 1.5: each frequent token's share matches softmax."""
    [ids] = _prompt_ids(tiny_tokenizer, 1)
    with torch.no_grad():
        probs = torch.softmax(tiny_model(torch.tensor([ids])).logits[0, -1].double() / 1.5, dim=-1).numpy()
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=500, max_new_tokens=1)
    n = 4000
    out = engine.generate([ids] * n, sampling=Sampling(1.5), seeds=[stream_seed(7, "x", k) for k in range(n)])
    counts: dict[str, int] = {}
    for g in out:
        counts[g.text] = counts.get(g.text, 0) + 1
    for token in np.argsort(probs)[::-1][:5]:
        p = probs[token]
        text = tiny_tokenizer.decode([int(token)], skip_special_tokens=True)
        if int(token) in engine.stop_ids or not text:
            continue
        share = sum(c for t, c in counts.items() if t == text) / n
        assert share == pytest.approx(p, abs=4 * (p * (1 - p) / n) ** 0.5 + 1e-3), text


def test_sampling_needs_seeds_and_valid_settings(tiny_model, tiny_tokenizer):
    engine = Engine(tiny_model, tiny_tokenizer)
    with pytest.raises(ValueError, match="seed per prompt"):
        engine.generate(_prompt_ids(tiny_tokenizer, 1), sampling=Sampling(1.0))
    with pytest.raises(ValueError, match="--top-p"):
        Sampling(1.0, 0.0)
    with pytest.raises(ValueError, match="--temperature"):
        Sampling(-1.0)
    assert stream_seed(0, "a", 1) == stream_seed(0, "a", 1) != stream_seed(0, "a", 2)
