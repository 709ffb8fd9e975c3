"""Exactness on the run's own prompts: in fp32 the engine's greedy texts equal `model.generate`'s, one unpadded
prompt at a time, in every mode that decodes and at every batch size; with early stopping each text is a prefix of
the full decode and parses to the same answer. The tiny model runs in the quick suite, SmolLM2 in the slow one."""

from __future__ import annotations

from functools import partial

import torch

from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.engine import Engine
from behavioral.runner.run import RunConfig, Runner
from behavioral.suite.registry import get_suite
from behavioral.suites.intergroup import Options
from behavioral.suites.intergroup.answers import answer_decided, parse_intensity
from tests.benchmarks.bench_engine import grid_prompts

BATCH_SIZES = (1, 5, 32)  # one prompt, batches that split personas, every prompt in one batch


def _grid(model, tokenizer, n: int) -> list[list[int]]:
    """The first n prompts of the religion grid (P0S0T0) in run order, rendered as a run renders them."""
    options = Options(categories=("religion",), settings=("P0S0T0",), limit_events=max(1, n // 6))
    runner = Runner(model, tokenizer, RunConfig("intergroup", "fidelity", options=options), get_suite("intergroup"))
    return [ids for _, ids in grid_prompts(runner, n)]


@torch.inference_mode()
def _reference(model, prompts: list[list[int]], engine: Engine, max_new_tokens: int) -> list[str]:
    """Greedy `model.generate` of each prompt alone (no padding), cut at its first stop token."""
    texts = []
    for prompt in prompts:
        out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=max_new_tokens,
                             eos_token_id=engine.stop_ids, pad_token_id=engine.pad_id, temperature=None, top_p=None,
                             top_k=None)[0, len(prompt):].tolist()
        stops = [j for j, t in enumerate(out) if t in engine.stop_ids]
        texts.append(engine.tokenizer.decode(out[:stops[0]] if stops else out, skip_special_tokens=True))
    return texts


def _check(model, tokenizer, prompts: list[list[int]], max_new_tokens: int) -> None:
    """Every decoding mode at every batch size against the one-prompt reference."""
    engine = Engine(model, tokenizer, max_new_tokens=max_new_tokens)
    want = _reference(model, prompts, engine, max_new_tokens)
    trie = AnswerTrie.build(tokenizer, AnswerSpec.integers(0, 100))
    until = [partial(answer_decided, max_rating=100)] * len(prompts)
    for size in BATCH_SIZES:
        engine.batch_size = size
        engine.prefixes.entries.clear()
        assert [g.text for g in engine.generate(prompts)] == want, f"generate, batch size {size}"
        assert [g.text for g in engine.generate_and_score(prompts, trie)] == want, f"both, batch size {size}"
        early = [g.text for g in engine.generate(prompts, until)]
        assert all(w.startswith(e) for w, e in zip(want, early)), f"early stop, batch size {size}"
        assert [parse_intensity(e, 100) for e in early] == [parse_intensity(w, 100) for w in want]


def test_engine_texts_equal_model_generate_tiny(tiny_model, tiny_tokenizer):
    _check(tiny_model, tiny_tokenizer, _grid(tiny_model, tiny_tokenizer, 18), max_new_tokens=10)


def test_engine_texts_equal_model_generate_smollm2(smollm2):
    model, tokenizer, _ = smollm2
    _check(model, tokenizer, _grid(model, tokenizer, 8), max_new_tokens=24)
