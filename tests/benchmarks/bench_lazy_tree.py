"""How much of the answer tree a lazy read needs on a model, by tolerance: the full tree of the intergroup grid's first
prompts is read once, then the lazy read's choices (behavioral.inference.lazy_tree.expansion) are replayed on those logits at
each tolerance, without further forwards. Prints, per tolerance, the nodes read a prompt, the rounds and the
positions a batch computes, the largest expected-value and probability bounds, the largest distance from the full
tree's numbers, and whether every prompt lies within its bounds; writes them to a JSON file.

A replay picks the nodes the engine's rounds pick (the same rule on the same numbers, to float rounding); the engine
benchmark times the rounds themselves.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json

import torch

from behavioral.inference import models
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.engine import Batch
from behavioral.inference.lazy_tree import expansion
from behavioral.suites.intergroup.settings import get_setting
from tests.benchmarks.bench_engine import add_grid_arguments, grid_prompts, grid_runner

TOLERANCES = "1,0.1,0.01,0.001,0.0001"


def replay(trie: AnswerTrie, tree, tolerance: float) -> tuple[torch.Tensor, list[int]]:
    """The positions a lazy read at `tolerance` computes on full-tree logits `tree`, and each round's width."""
    computed = torch.zeros(tree.lse.shape[0], 1 + len(trie), dtype=torch.bool)
    computed[:, 0] = True
    widths = []
    while True:
        chosen = expansion(trie, trie.reading(tree, computed), tree, computed, tolerance)
        if not chosen.any():
            return computed, widths
        widths.append(int(chosen.sum(1).max()))
        computed[:, 1:] |= chosen


def main() -> None:
    """Read the full trees, replay each tolerance, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_grid_arguments(parser, "bench_lazy_tree.json")
    parser.add_argument("--tolerances", default=TOLERANCES)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    model, tokenizer, info = models.load(args.model, args.device, args.dtype)
    runner = grid_runner(args, model, tokenizer, args.batch_size)
    prompts = [ids for _, ids in grid_prompts(runner, args.prompts)]
    trie = runner.trie(AnswerSpec.integers(0, get_setting(args.setting).max_rating))
    engine = runner.engine
    trees = []
    with torch.inference_mode():
        for start in range(0, len(prompts), args.batch_size):
            batch = Batch(engine, prompts[start:start + args.batch_size])
            trees.append(trie.reduce(engine.tree_forward(batch, trie, use_cache=False).logits))
    full = [trie.read(tree) for tree in trees]
    rows = []
    for tolerance in map(float, args.tolerances.split(",")):
        nodes = rounds = positions = 0
        worst = {"expected_bound": 0.0, "probs_bound": 0.0, "expected_error": 0.0, "probs_error": 0.0}
        holds = True
        for tree, exact in zip(trees, full):
            computed, widths = replay(trie, tree, tolerance)
            rounds, positions = rounds + len(widths), positions + sum(widths) * len(exact)
            for lazy, f in zip(trie.read(tree, computed), exact):
                nodes += lazy.nodes
                errors = {"expected_error": abs(lazy.expected - f.expected),
                          "probs_error": max(abs(a - b) for a, b in zip(lazy.probs, f.probs))}
                holds &= errors["expected_error"] <= lazy.expected_bound + 1e-9 and \
                    errors["probs_error"] <= lazy.probs_bound + 1e-9 and lazy.greedy == f.greedy
                for key, value in (*errors.items(), ("expected_bound", lazy.expected_bound),
                                   ("probs_bound", lazy.probs_bound)):
                    worst[key] = max(worst[key], value)
        rows.append({"tolerance": tolerance, "mean_nodes": nodes / len(prompts), "rounds_per_batch": rounds / len(trees),
                     "positions_per_prompt": positions / len(prompts), **{f"max_{k}": v for k, v in worst.items()},
                     "within_bounds": holds})
    mass = sum(s.valid_mass for f in full for s in f) / len(prompts)
    result = {"model": info["model"], "dtype": info["dtype"], "device": info["device"], "prompts": len(prompts),
              "setting": args.setting, "category": args.category, "tree_nodes": len(trie),
              "mean_valid_mass": mass, "tolerances": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{info['model']}, {args.setting} ({len(trie)} nodes), {len(prompts)} prompts, mean answer-set mass "
          f"{mass:.3f}")
    print(f"{'tolerance':>9} {'nodes':>6} {'rounds':>6} {'positions':>9} {'bound E':>8} {'error E':>8} "
          f"{'bound p':>8} {'error p':>8} {'within':>6}")
    for r in rows:
        print(f"{r['tolerance']:>9g} {r['mean_nodes']:>6.1f} {r['rounds_per_batch']:>6.2f} "
              f"{r['positions_per_prompt']:>9.1f} {r['max_expected_bound']:>8.2g} {r['max_expected_error']:>8.2g} "
              f"{r['max_probs_bound']:>8.2g} {r['max_probs_error']:>8.2g} {str(r['within_bounds']):>6}")
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
