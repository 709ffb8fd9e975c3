"""The engine's GPU-relevant costs, counted on any device: per prompt, the positions run through the model per unique
prompt token, the host-device syncs (`.tolist()`, `.item()`, `.cpu()`), the tokenizer decodes of the early-stop
predicate, and the bytes of KV cache copied (the shared prefix's deep copy and its repeat per row); per batch, the
prefix its prompts share against the one each persona's prompts share.

Counts do not depend on the device (a sync counted here is a stall on a GPU); times are not taken. Prints a table
and writes a JSON file.

`--run-path` counts instead what a whole score run computes through `behavioral.runner.run.run` (work units, their batching,
the prefix store), for three suites, against the prefix-tree ideal: every distinct prompt prefix computed once. A
random model with the tokenizer's vocabulary runs it (counts do not depend on the weights).

    python tests/benchmarks/bench_engine_costs.py --prompts 256 --batch-sizes 16,64,256 --out costs.json
    python tests/benchmarks/bench_engine_costs.py --run-path --batch-sizes 16,64,256 --out run_path_costs.json
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import contextlib
import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from functools import partial

import torch
from transformers import cache_utils

import behavioral.inference.engine as engine_module
from behavioral.inference import models
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.engine import shared_prefix_length
from behavioral.inference.prefix_plan import common_length
from behavioral.runner.run import RunConfig, Runner, run
from behavioral.suite.registry import get_suite
from behavioral.suites.intergroup.answers import answer_decided
from behavioral.suites.intergroup.settings import get_setting
from behavioral.suite.work import work_units
from tests.benchmarks.bench_engine import add_grid_arguments, grid_prompts, grid_runner, random_model, unique_tokens

SYNCS = ("tolist", "item", "cpu", "__bool__", "__float__", "__int__", "__index__")  # each reads a device value


def cache_bytes(cache) -> int:
    """Bytes held by a KV cache's key and value tensors."""
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
               if t is not None)


@contextlib.contextmanager
def counting(tokenizer) -> Iterator[Counter]:
    """Counts, while the block runs, of host-device syncs, tokenizer decodes and KV-cache bytes copied."""
    counts: Counter = Counter()
    saved = {name: getattr(torch.Tensor, name) for name in SYNCS}
    deepcopy, repeat, decode = engine_module.copy.deepcopy, cache_utils.DynamicCache.batch_repeat_interleave, \
        tokenizer.decode

    def synced(name):
        def call(self, *args, **kwargs):
            counts["syncs"] += 1
            return saved[name](self, *args, **kwargs)
        return call

    def copied(value, *args):
        out = deepcopy(value, *args)
        if isinstance(out, cache_utils.Cache):
            counts["kv_bytes_copied"] += cache_bytes(out)
        return out

    def repeated(cache, times):
        repeat(cache, times)
        counts["kv_bytes_copied"] += cache_bytes(cache) * (times - 1) // times

    def decoded(*args, **kwargs):
        counts["decodes"] += 1
        return decode(*args, **kwargs)

    for name in SYNCS:
        setattr(torch.Tensor, name, synced(name))
    engine_module.copy.deepcopy, cache_utils.DynamicCache.batch_repeat_interleave = copied, repeated
    tokenizer.decode = decoded
    try:
        yield counts
    finally:
        for name in SYNCS:
            setattr(torch.Tensor, name, saved[name])
        engine_module.copy.deepcopy, cache_utils.DynamicCache.batch_repeat_interleave = deepcopy, repeat
        del tokenizer.decode


def batch_prefixes(engine, prompts: list[list[int]], extra: int) -> list[float]:
    """Per batch of the engine's plan, the mean length of the prefixes its rows read from the cache."""
    return [sum(k for _, k in chunk) / len(chunk) for chunk in engine._chunks(prompts, extra)]


def measure(runner: Runner, labelled: list, batch_size: int, max_rating: int) -> list[dict]:
    """One row per mode (generate, score, both) at `batch_size`: the counts per prompt."""
    engine = runner.engine
    engine.batch_size = batch_size
    prompts = [ids for _, ids in labelled]
    trie = runner.trie(AnswerSpec.integers(0, max_rating))
    until = [partial(answer_decided, max_rating=max_rating)] * len(prompts)
    unique = unique_tokens(labelled)
    persona_prefix = {p: shared_prefix_length([ids for q, ids in labelled if q == p]) for p, _ in labelled}
    rows = []
    for mode, fn, extra in (("generate", lambda: engine.generate(prompts, until), engine.max_new_tokens),
                            ("score", lambda: engine.score(prompts, trie), len(trie)),
                            ("both", lambda: engine.generate_and_score(prompts, trie, until),
                             max(engine.max_new_tokens, len(trie)))):
        engine.prefixes.entries.clear()
        engine.tokens_computed = engine.prefixes.tokens_computed = 0
        with counting(runner.tokenizer) as counts:
            fn()
        shared = batch_prefixes(engine, prompts, extra)
        n = len(prompts)
        rows.append({
            "mode": mode, "batch_size": batch_size, "prompts": n, "batches": len(shared),
            "tokens_computed_per_unique_token": (engine.tokens_computed + engine.prefixes.tokens_computed) / unique,
            "syncs_per_prompt": counts["syncs"] / n, "decodes_per_prompt": counts["decodes"] / n,
            "kv_bytes_copied_per_prompt": counts["kv_bytes_copied"] / n,
            "mean_batch_prefix_tokens": sum(shared) / len(shared),
            "mean_persona_prefix_tokens": sum(persona_prefix[p] for p, _ in labelled) / n,
            "tree_positions_per_prompt": len(trie) if mode != "generate" else 0,
            "unique_tokens_per_prompt": unique / n,
        })
    return rows


COLUMNS = ("mode", "batch_size", "batches", "tokens_computed_per_unique_token", "syncs_per_prompt",
           "decodes_per_prompt", "kv_bytes_copied_per_prompt", "mean_batch_prefix_tokens",
           "mean_persona_prefix_tokens", "tree_positions_per_prompt", "unique_tokens_per_prompt")


def table(rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> str:
    """The rows as a Markdown table."""
    def cell(value) -> str:
        return f"{value:,.2f}" if isinstance(value, float) else str(value)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows])


RUN_PATH_SUITES = {  # suite: options of a slice with several thousand prompts
    "intergroup nationality P0S0T0": ("intergroup", lambda o: o(categories=("nationality",), settings=("P0S0T0",),
                                                                limit_events=4)),
    "intergroup religion P0S1T0": ("intergroup", lambda o: o(categories=("religion",), settings=("P0S1T0",),
                                                             limit_events=24)),
    "giebench": ("giebench", lambda o: o()),
    "scm": ("scm", lambda o: o()),
}


def prefix_tree_nodes(prompts: list[list[int]]) -> int:
    """Distinct prefixes of the prompts (the nodes of their prefix tree): the positions a run that computes every
    shared prefix once needs."""
    ordered = sorted(prompts)
    return sum(len(p) - (common_length(p, q) if q is not None else 0)
               for p, q in zip(ordered, [None] + ordered[:-1]))


def run_path_row(name: str, batch_size: int, tokenizer, model, info: dict, out: Path) -> dict:
    """Positions one score run of `name` computes at `batch_size`, counted at the model's forward."""
    suite_name, options = RUN_PATH_SUITES[name]
    suite = get_suite(suite_name)
    config = RunConfig(suite=suite_name, model=info["model"], options=options(suite.Options), mode="score",
                       batch_size=batch_size)
    positions = Counter()

    def count(module, args, kwargs):
        positions["forwards"] += 1
        positions["positions"] += kwargs["input_ids"].numel()

    handle = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        run(config, out, loaded=(model, tokenizer, info), progress=False)
    finally:
        handle.remove()
    runner = Runner(model, tokenizer, config, suite)  # renders prompts and builds tries as the run's did
    items = [item for unit in work_units(suite.groups(suite.dataset(config)), config.unit_size)
             for item in unit.items]
    prompts = [runner.tokens(item) for item in items]
    tries = [runner.trie(item.answers) for item in items]
    tree = sum(len(trie) for trie in tries)
    ideal = prefix_tree_nodes([p + list(trie.prefill) for p, trie in zip(prompts, tries)])
    return {"suite": name, "batch_size": batch_size, "prompts": len(prompts), "forwards": positions["forwards"],
            "prompt_positions_per_ideal": (positions["positions"] - tree) / ideal,
            "ideal_positions_per_prompt": ideal / len(prompts),
            "tree_positions_per_prompt": tree / len(prompts)}


def run_path(args: argparse.Namespace) -> dict:
    """The run-path rows of every suite and batch size."""
    tokenizer = models.load_tokenizer(args.model)
    shapes = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, vocab_size=len(tokenizer), max_position_embeddings=8192)
    model = random_model(shapes, "cpu", torch.float32)
    info = {"model": args.model, "revision": None, "dtype": "float32", "device": "cpu", "model_hash": "random weights"}
    result = {"tokenizer": args.model, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name in RUN_PATH_SUITES:
            for size in map(int, args.batch_sizes.split(",")):
                result["rows"].append(run_path_row(name, size, tokenizer, model, info, Path(tmp) / f"{name}-{size}"))
                print(result["rows"][-1], flush=True)
    return result


RUN_PATH_COLUMNS = ("suite", "batch_size", "prompts", "forwards", "prompt_positions_per_ideal",
                    "ideal_positions_per_prompt", "tree_positions_per_prompt")


def main() -> None:
    """Count the costs of the grid's first prompts at each batch size and mode (or of whole runs: --run-path)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_grid_arguments(parser, "bench_engine_costs.json")
    parser.add_argument("--batch-sizes", default="16,64,256")
    parser.add_argument("--run-path", action="store_true", help="count whole score runs of three suites")
    args = parser.parse_args()
    if args.run_path:
        result = run_path(args)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(table(result["rows"], RUN_PATH_COLUMNS))
        return

    model, tokenizer, info = models.load(args.model, args.device, args.dtype)
    runner = grid_runner(args, model, tokenizer)
    labelled = grid_prompts(runner, args.prompts)
    max_rating = get_setting(args.setting).max_rating
    result = {"model": info["model"], "dtype": info["dtype"], "device": info["device"], "setting": args.setting,
              "category": args.category, "events": str(args.events) if args.events else "embedded",
              "max_new_tokens": args.max_new_tokens, "rows": []}
    for size in map(int, args.batch_sizes.split(",")):
        result["rows"] += measure(runner, labelled, size, max_rating)
        args.out.write_text(json.dumps(result, indent=2) + "\n")  # a long run keeps each finished batch size
        print(f"batch size {size} done; wrote {args.out}", flush=True)
    print(table(result["rows"]))


if __name__ == "__main__":
    main()
