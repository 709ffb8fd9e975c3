"""Engine benchmark: plain batched model.generate against the engine's generate, score and both (one pass that
generates and scores) modes on the same prompts.

Score mode reads the answer tree as a run does by default (lazily, behavioral.inference.lazy_tree, at --tree-tolerance), and
once more in full (`score_full`): the table gives the nodes each read on average and the largest expected-value bound,
and the JSON how far the lazy read's expected values lie from the full tree's. Both decode up to --max-new-tokens
(the run's default, 128); the engine stops a reply early once its answer is decided, as a run does, so agreement is measured on the parsed answers (and on the engine's text being a prefix of
the baseline's). Prints a table and writes a JSON file. On a GPU, `--shapes llama-3.1-8b` builds a random-weight model with
Llama-3.1-8B's shapes in bf16 (weights do not change speed) and uses `--model`'s tokenizer. `--backend vllm` also times
vLLM's generate and score (behavioral.inference.vllm.engine, prefix caching on) on the same prompts, against the engine's.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import resource
import time
from functools import partial

import torch

from behavioral.inference import models
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.engine import shared_prefix_length
from behavioral.inference.lazy_tree import AnswerTree
from behavioral.rundir.manifest import TREE_TOLERANCE
from behavioral.runner.run import RunConfig, Runner
from behavioral.runner.config import RUN_DEFAULTS
from behavioral.inference.vllm.engine import VllmEngine, load
from behavioral.suite.registry import get_suite
from behavioral.suites.intergroup import Options
from behavioral.suites.intergroup.answers import answer_decided, parse_intensity
from behavioral.suites.intergroup.settings import get_setting
from behavioral.suite.work import work_units

REAL_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "crowd-envent"
LLAMA_31_8B = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                   intermediate_size=14336, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0)


def grid_prompts(runner: Runner, n: int) -> list[tuple[str, list[int]]]:
    """The first n prompts of the run's grid in run order (perceiver-major), with their perceivers."""
    suite = runner.suite
    out: list[tuple[str, list[int]]] = []
    for unit in work_units(suite.groups(suite.dataset(runner.config)), unit_size=32):
        out += [(item.perceiver, runner.tokens(item)) for item in unit.items]
        if len(out) >= n:
            break
    return out[:n]


def unique_tokens(prompts: list[tuple[str, list[int]]]) -> int:
    """Prompt tokens outside the prefix each prompt shares with every prompt of its persona."""
    groups: dict[str, list[list[int]]] = {}
    for perceiver, ids in prompts:
        groups.setdefault(perceiver, []).append(ids)
    return sum(sum(len(p) for p in g) - len(g) * shared_prefix_length(g) for g in groups.values())


def random_model(shapes: dict, device: str, dtype: torch.dtype = torch.bfloat16):
    """A random-weight LlamaForCausalLM of `shapes`, built on `device` directly in `dtype` (weights do not change
    speed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**shapes, dtype=dtype)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def timed(fn, device: str) -> tuple[object, float, float]:
    """Result, wall seconds and peak memory (GiB: GPU allocations on CUDA, process max RSS on CPU)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return result, time.perf_counter() - start, peak


def baseline_ids(model, tokenizer, prompts: list[list[int]], batch_size: int, max_new_tokens: int,
                 stop_ids: list[int], pad_id: int) -> list[list[int]]:
    """What a user writes: left-padded batches through model.generate, greedy, same stopping; the new token ids of
    each prompt, up to its first stop token."""
    if not isinstance(max_new_tokens, int):  # model.generate would take None as its own 20-token default
        raise ValueError(f"max_new_tokens is {max_new_tokens!r}; expected the same whole number the engine decodes to")
    out: list[list[int]] = []
    tokenizer.padding_side = "left"
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer.pad({"input_ids": prompts[start:start + batch_size]}, return_tensors="pt")
        batch = {k: v.to(model.device) for k, v in batch.items()}
        with torch.inference_mode():
            ids = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stop_ids,
                                 pad_token_id=pad_id, temperature=None, top_p=None, top_k=None)
        for row in ids[:, batch["input_ids"].shape[1]:].tolist():
            ends = [j for j, t in enumerate(row) if t in stop_ids]
            out.append(row[:ends[0]] if ends else row)
    return out


def baseline_generate(model, tokenizer, prompts: list[list[int]], batch_size: int, max_new_tokens: int,
                      stop_ids: list[int], pad_id: int) -> list[str]:
    """The replies of `baseline_ids` as text."""
    ids = baseline_ids(model, tokenizer, prompts, batch_size, max_new_tokens, stop_ids, pad_id)
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def _synchronize(device: str) -> None:
    """Wait for the device's queued work (CUDA only; CPU work is synchronous)."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak_flops(device: str, dtype: torch.dtype, size: int = 8192, repeats: int = 20) -> float:
    """Measured dense matmul FLOP/s of this device in `dtype` (a size x size x size product)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def add_grid_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """The flags of a benchmark on the intergroup grid's first prompts: model, device, dtype, prompts, decoding
    limit, setting, category, events, and the JSON file `out` it writes by default."""
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--prompts", type=int, default=256)
    # the run's resolved default (128), not RunConfig.max_new_tokens, which is None until a suite's defaults apply:
    # passed to model.generate, None meant transformers' 20-token default for the baseline alone
    parser.add_argument("--max-new-tokens", type=int, default=RUN_DEFAULTS["max_new_tokens"])
    parser.add_argument("--setting", default="P0S0T0")
    parser.add_argument("--category", default="nationality")
    parser.add_argument("--events", type=Path, default=REAL_CORPUS if REAL_CORPUS.is_dir() else None)
    parser.add_argument("--out", type=Path, default=Path(out))


def grid_runner(args: argparse.Namespace, model, tokenizer, batch_size: int = 16) -> Runner:
    """A Runner of the intergroup slice the grid flags name (mode both), on a loaded model."""
    options = Options(categories=(args.category,), settings=(args.setting,),
                      events=str(args.events) if args.events else None, limit_events=max(1, args.prompts // 8))
    config = RunConfig(suite="intergroup", model=args.model, options=options, mode="both",
                       batch_size=batch_size, max_new_tokens=args.max_new_tokens)
    return Runner(model, tokenizer, config, get_suite("intergroup"))


def vllm_side(args: argparse.Namespace, prompts: list[list[int]], until: list, trie, texts: list[str],
              scores: list, device: str) -> dict:
    """vLLM's generate and score of the same prompts: start-up seconds, prompts/s, and agreement with the engine's
    texts and answer-set probabilities."""
    started = time.perf_counter()
    model, tokenizer, _ = load(args.model, args.dtype)
    startup = time.perf_counter() - started
    engine = VllmEngine(model, tokenizer, args.max_new_tokens)
    warm = prompts[: min(4, len(prompts))]
    engine.generate(warm, until[:len(warm)]), engine.score(warm, trie)
    model.llm.reset_prefix_cache()
    generated, t_gen, _ = timed(lambda: engine.generate(prompts, until), device)
    model.llm.reset_prefix_cache()
    scored, t_score, _ = timed(lambda: engine.score(prompts, trie), device)
    return {"vllm_startup_s": startup, "vllm_generate_prompts_per_s": len(prompts) / t_gen,
            "vllm_score_prompts_per_s": len(prompts) / t_score,
            "vllm_generate_text_agreement": sum(g.text == t for g, t in zip(generated, texts)) / len(prompts),
            "vllm_score_max_prob_difference": max(abs(a - b) for s, e in zip(scored, scores)
                                                  for a, b in zip(s.probs, e.probs)),
            "vllm_score_answer_agreement": sum(s.greedy == e.greedy for s, e in zip(scored, scores)) / len(prompts)}


def main() -> None:
    """Run the four paths on the same prompts and report prompts/s, agreement and memory."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_grid_arguments(parser, "bench_engine.json")
    parser.add_argument("--shapes", choices=("model", "llama-3.1-8b"), default="model")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--tree-tolerance", type=float, default=TREE_TOLERANCE)
    parser.add_argument("--backend", choices=("engine", "vllm"), default="engine",
                        help="vllm: also time vLLM's generate and score on the same prompts (needs vLLM)")
    args = parser.parse_args()

    model, tokenizer, info = models.load(args.model, args.device, args.dtype)
    device = info["device"]
    if args.shapes == "llama-3.1-8b":
        model = random_model(LLAMA_31_8B, device)
        info |= {"model": f"random {args.shapes} (tokenizer of {args.model})", "dtype": "bfloat16"}
    max_rating = get_setting(args.setting).max_rating
    runner = grid_runner(args, model, tokenizer, args.batch_size)
    labelled = grid_prompts(runner, args.prompts)
    prompts = [ids for _, ids in labelled]
    trie = runner.trie(AnswerSpec.integers(0, max_rating))
    engine = runner.engine
    lazy, full = AnswerTree("lazy", args.tree_tolerance), AnswerTree("full")
    engine.answer_tree = lazy

    until = [partial(answer_decided, max_rating=max_rating)] * len(prompts)

    warm = prompts[: min(4, len(prompts))]
    baseline_generate(model, tokenizer, warm, args.batch_size, 2, engine.stop_ids, engine.pad_id)
    engine.generate(warm), engine.score(warm, trie)
    engine.prefixes.entries.clear()

    base, t_base, m_base = timed(lambda: baseline_generate(
        model, tokenizer, prompts, args.batch_size, args.max_new_tokens, engine.stop_ids, engine.pad_id), device)
    def score_full():
        with engine.hooked(answer_tree=full):
            return engine.score(prompts, trie)

    computed = {}
    for name, fn in (("generate", lambda: [g.text for g in engine.generate(prompts, until)]),
                     ("score", lambda: engine.score(prompts, trie)),
                     ("score_full", score_full),
                     ("both", lambda: engine.generate_and_score(prompts, trie, until))):
        engine.prefixes.entries.clear()
        engine.tokens_computed = engine.prefixes.tokens_computed = 0
        computed[name] = timed(fn, device)
        computed[name] += (engine.tokens_computed + engine.prefixes.tokens_computed,)
    (gen, t_gen, m_gen, n_gen), (scored, t_score, m_score, n_score) = computed["generate"], computed["score"]
    joint, t_both, m_both, n_both = computed["both"]
    exact, t_full, m_full, n_full = computed["score_full"]

    numeric = [i for i, text in enumerate(base) if text.strip()[:1].isdigit()
               and parse_intensity(text, max_rating) is not None]
    prompt_tokens = sum(len(p) for p in prompts)
    result = {
        "model": info["model"], "device": device, "dtype": info["dtype"], "prompts": len(prompts),
        "batch_size": args.batch_size, "setting": args.setting, "category": args.category,
        "events": str(args.events) if args.events else "embedded", "mean_prompt_tokens": prompt_tokens / len(prompts),
        "baseline_prompts_per_s": len(prompts) / t_base,
        "generate_prompts_per_s": len(prompts) / t_gen,
        "score_prompts_per_s": len(prompts) / t_score,
        "score_full_prompts_per_s": len(prompts) / t_full,
        "score_over_generate": t_gen / t_score,
        "tree_tolerance": args.tree_tolerance,
        "tree_nodes": len(trie),
        "score_mean_nodes": sum(s.nodes for s in scored) / len(scored),
        "score_full_mean_nodes": sum(s.nodes for s in exact) / len(exact),
        "score_max_expected_bound": max(s.expected_bound for s in scored),
        "score_max_expected_error": max(abs(s.expected - e.expected) for s, e in zip(scored, exact)),
        # within its bound, give or take float rounding between the lazy rounds and one forward (relative 1e-5 of the
        # scale, as between two batch sizes)
        "score_bound_holds": all(abs(s.expected - e.expected) <= s.expected_bound + 1e-5 * max_rating
                                 for s, e in zip(scored, exact)),
        "score_full_prompt_tokens_per_s": prompt_tokens / t_full,
        "baseline_prompt_tokens_per_s": prompt_tokens / t_base,
        "generate_prompt_tokens_per_s": prompt_tokens / t_gen,
        "score_prompt_tokens_per_s": prompt_tokens / t_score,
        "both_prompts_per_s": len(prompts) / t_both,
        "both_apart_prompts_per_s": len(prompts) / (t_gen + t_score),
        "both_prompt_tokens_per_s": prompt_tokens / t_both,
        "both_speedup_over_apart": (t_gen + t_score) / t_both,
        "both_agreement": sum(j.text == g and j.scores.greedy == s.greedy
                              for j, g, s in zip(joint, gen, scored)) / len(prompts),
        "both_max_expected_difference": max(abs(j.scores.expected - s.expected) for j, s in zip(joint, scored)),
        "generate_speedup": t_base / t_gen,
        "max_new_tokens": args.max_new_tokens,
        "generate_agreement": sum(parse_intensity(a, max_rating) == parse_intensity(b, max_rating)
                                  for a, b in zip(base, gen)) / len(prompts),
        "generate_prefix_agreement": sum(a.startswith(b) for a, b in zip(base, gen)) / len(prompts),
        "numeric_rate": len(numeric) / len(prompts),
        "score_agreement": (sum(scored[i].greedy == parse_intensity(base[i], max_rating) for i in numeric)
                            / len(numeric)) if numeric else None,
        "peak_memory_gib": {"baseline": m_base, "generate": m_gen, "score": m_score, "score_full": m_full,
                            "both": m_both},
        "unique_prompt_tokens": unique_tokens(labelled),
        "tokens_computed": {"generate": n_gen, "score": n_score, "score_full": n_full, "both": n_both},
        "torch_threads": torch.get_num_threads(),
    }
    if args.backend == "vllm":
        result |= vllm_side(args, prompts, until, trie, gen, scored, device)
    if device.startswith("cuda"):
        peak = matmul_peak_flops(device, torch.bfloat16)
        n_params = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
        unique = result["unique_prompt_tokens"]
        result |= {"matmul_peak_flops": peak,
                   "generate_mfu": 2 * n_params * n_gen / t_gen / peak,
                   "score_mfu": 2 * n_params * n_score / t_score / peak,
                   "generate_floor_fraction": 2 * n_params * unique / t_gen / peak,
                   "score_floor_fraction": 2 * n_params * unique / t_score / peak}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'path':<10} {'prompts/s':>10} {'tokens/s':>10} {'agreement':>10} {'peak GiB':>9}")
    for name, key, agree in (("baseline", "baseline", 1.0), ("generate", "generate", result["generate_agreement"]),
                             ("score", "score", result["score_agreement"]), ("score_full", "score_full", None),
                             ("both", "both", result["both_agreement"])):
        agree_text = "n/a" if agree is None else f"{agree:.3f}"
        print(f"{name:<10} {result[f'{key}_prompts_per_s']:>10.2f} {result[f'{key}_prompt_tokens_per_s']:>10.0f} "
              f"{agree_text:>10} {result['peak_memory_gib'][key]:>9.2f}")
    print(f"agreement: parsed answers (generate), greedy score answer vs parsed baseline (score), text and greedy "
          f"score answer vs generate and score apart (both); the engine's text is a prefix of the baseline's for "
          f"{result['generate_prefix_agreement']:.3f}")
    print(f"both in one pass: {result['both_speedup_over_apart']:.2f}x generate + score apart "
          f"({result['both_apart_prompts_per_s']:.2f} prompts/s); largest expected-value difference "
          f"{result['both_max_expected_difference']:.2g}")
    print(f"score over generate: {result['score_over_generate']:.2f}x; the lazy tree read "
          f"{result['score_mean_nodes']:.1f} of {len(trie)} nodes a prompt at tolerance {args.tree_tolerance:g} "
          f"(largest expected-value bound {result['score_max_expected_bound']:.2g}, largest difference from the "
          f"full tree {result['score_max_expected_error']:.2g}, within every bound to float rounding: "
          f"{result['score_bound_holds']})")
    print(f"numeric rate of the baseline: {result['numeric_rate']:.3f}; json: {args.out}")
    if args.backend == "vllm":
        print(f"vLLM (started in {result['vllm_startup_s']:.0f} s): generate "
              f"{result['vllm_generate_prompts_per_s']:.2f} prompts/s, texts equal to the engine's "
              f"{result['vllm_generate_text_agreement']:.3f}; score "
              f"{result['vllm_score_prompts_per_s']:.2f} prompts/s, greedy answers equal "
              f"{result['vllm_score_answer_agreement']:.3f}, largest probability difference "
              f"{result['vllm_score_max_prob_difference']:.2g}")


if __name__ == "__main__":
    main()
