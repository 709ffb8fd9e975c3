"""Attribution patching against activation patching: what a whole layer × position map of intergroup's persona
costs each way, and how well AtP ranks its nodes.

For a few in-group prompts (X perceives X, the first identities of --category, one event) and their corrupted partner
(--mode swap: the out-group persona the patch study's swap puts in; person: "a person"), AtP maps every
(layer, position) node from the persona's tokens to the end of --positions (interp.attribution.attribute), and
activation patching patches the same nodes one a forward row (exact_map): every node with --nodes 0; else every
node at the persona's own tokens (all layers) and a seeded sample of --nodes others a pair, the whole map's
seconds then projected from the measured seconds a node. The JSON keeps every validated node at the persona's tokens
(both estimates and the exact effect by layer). One AtP pass and one patched forward run first, untimed
(first-call costs). Prints a table and writes a JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import os
import platform

import pandas as pd
import torch

from behavioral.inference import models
from behavioral.inference.engine import Engine
from behavioral.suites.intergroup import patching as IP
from behavioral.suites.intergroup.corpus import embedded_events, sample_events
from behavioral.suites.intergroup.groups import UNSPECIFIED, get_category
from tests.benchmarks.bench_engine import random_model
from tests.benchmarks.gpu_check import TINY
from tests.tiny_tokenizer import build_tiny_tokenizer
from interp import attribution as A

TINY_MODEL = "tiny"  # a random 2-layer Llama with the tests' tokenizer


def load(args: argparse.Namespace) -> tuple:
    """(model, tokenizer, what the JSON records of it)."""
    if args.model == TINY_MODEL:
        tokenizer = build_tiny_tokenizer()
        torch.manual_seed(args.seed)
        model = random_model(TINY | {"vocab_size": len(tokenizer)}, args.device, torch.float32)
        return model, tokenizer, {"model": "tiny random Llama (tests.benchmarks.gpu_check.TINY, seed "
                                           f"{args.seed})", "dtype": "float32", "device": args.device}
    model, tokenizer, info = models.load(args.model, args.device, args.dtype)
    return model, tokenizer, {k: info[k] for k in ("model", "dtype", "device")}


def build_pairs(tokenizer, args: argparse.Namespace) -> tuple[list[A.Pair], list[dict]]:
    """The first --pairs in-group prompts of --category and their corrupted partners, one event."""
    category = get_category(args.category)
    event = sample_events(embedded_events(), 1, args.seed)[0]
    trie = IP.setting_trie(tokenizer, args.setting)
    pairs, meta = [], []
    for x in category.identities[:args.pairs]:
        source = UNSPECIFIED if args.mode == "person" else IP.swap_source(category, x, x)
        prompts = [IP.build(tokenizer, args.setting, p, x, event) for p in (x, source)]
        pairs.append(A.Pair(*prompts, trie, A.expected_metric(trie)))
        meta.append({"clean": x, "source": source, "event": event.event_id, "tokens": len(prompts[0])})
    return pairs, meta


def validated(engine, pairs: list[A.Pair], args: argparse.Namespace) -> tuple[pd.DataFrame, float, int, int, int]:
    """Activation-patched nodes (the whole grid, or the persona's nodes and a sample of the rest), its seconds,
    forwards, prompts and nodes."""
    runs = [A.exact_map(engine, pairs, None, args.positions)] if not args.nodes else [
        A.exact_map(engine, pairs, None, "slot"),
        A.exact_map(engine, pairs, None, args.positions, sample=args.nodes, seed=args.seed)]
    nodes = pd.concat([r.nodes for r in runs]).drop_duplicates(["pair", "layer", "position"])
    return (nodes, sum(r.seconds for r in runs), sum(r.forwards for r in runs), sum(r.prompts for r in runs),
            sum(len(r.nodes) for r in runs))


def agreements(both: pd.DataFrame) -> dict:
    """Per subset of the validated nodes (all; at the persona's tokens; after them): AtP's agreement with activation
    patching (interp.attribution.agreement); with a ``graddrop`` column, also of |AtP| and of GradDrop with
    |activation patching| (both magnitudes)."""
    subsets = {"all validated": both, "persona tokens (offset <= 0)": both[both["offset"] <= 0],
               "after the persona (offset > 0)": both[both["offset"] > 0]}
    out = {}
    for name, part in subsets.items():
        if not len(part):
            continue
        out[name] = {"AtP": A.agreement(part["atp"], part["exact"])}
        if "graddrop" in part:
            out[name] |= {"|AtP| vs |exact|": A.agreement(part["atp"].abs(), part["exact"].abs()),
                          "GradDrop vs |exact|": A.agreement(part["graddrop"], part["exact"].abs())}
    return out


def cost_rows(found: A.NodeMap, dropped: A.NodeMap | None, exact: tuple, args: argparse.Namespace) -> list[dict]:
    """One row a method: pairs, nodes a pair, forwards, prompts, backwards, seconds and the whole map's seconds a
    pair (activation patching: measured, or projected from a sample's seconds a node)."""
    _, seconds, forwards, prompts, n_exact = exact
    n = len(found.pairs)
    per_pair = len(found.nodes) / n
    rows = [{"method": name, "pairs": n, "nodes_per_pair": per_pair, "forwards": m.forwards, "prompts": m.prompts,
             "backwards": m.backwards, "seconds": m.seconds, "map_seconds_per_pair": m.seconds / n,
             "measured": "whole map"}
            for name, m in (("AtP", found), ("AtP + GradDrop", dropped)) if m is not None]
    rows.append({"method": "activation patching", "pairs": n, "nodes_per_pair": n_exact / n, "forwards": forwards,
                 "prompts": prompts, "backwards": 0, "seconds": seconds,
                 "map_seconds_per_pair": seconds / n_exact * per_pair,
                 "measured": "whole map" if not args.nodes else "projected from a sample"})
    return rows


def main() -> None:
    """Map, validate, print the tables and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=TINY_MODEL, help=f"{TINY_MODEL}, or a model alias or path")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--category", default="religion")
    parser.add_argument("--setting", default="P0S0T0")
    parser.add_argument("--mode", default="swap", choices=("swap", "person"))
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--positions", default="prompt", choices=A.SCOPES)
    parser.add_argument("--nodes", type=int, default=0, help="activation-patch the persona's nodes and a sample of "
                                                             "N others a pair (0: every node)")
    parser.add_argument("--graddrop", action="store_true", help="AtP*'s GradDrop as well (L more passes a pair)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default torch's; 1 where "
                                                                   "another process keeps a core busy)")
    parser.add_argument("--out", type=Path, default=Path("bench_attribution.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer, info = load(args)
    engine = Engine(model, tokenizer, args.batch_size)
    pairs, meta = build_pairs(tokenizer, args)
    A.attribute(engine, pairs[:1], None, "slot")  # warm-up, untimed: first-call costs of both methods
    A.exact_map(engine, pairs[:1], None, "slot", sample=1)

    found = A.attribute(engine, pairs, None, args.positions)
    print(f"AtP: {len(found.nodes)} nodes of {len(pairs)} pairs in {found.seconds:.1f} s", flush=True)
    dropped = A.attribute(engine, pairs, None, args.positions, graddrop=True) if args.graddrop else None
    exact = validated(engine, pairs, args)
    both = exact[0].merge(found.nodes, on=list(A.NODE_COLUMNS))
    if dropped is not None:
        both = both.merge(dropped.nodes[[*A.NODE_COLUMNS, "graddrop"]], on=list(A.NODE_COLUMNS))
    agreement = agreements(both)
    by_layer = {int(layer): A.agreement(part["atp"], part["exact"], (), ())["spearman"]
                for layer, part in both.groupby("layer")}
    cost = cost_rows(found, dropped, exact, args)
    speedup = cost[-1]["map_seconds_per_pair"] / cost[0]["map_seconds_per_pair"]
    print(pd.DataFrame(cost).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"activation patching of the whole map a pair / AtP's: {speedup:.0f}× ({cost[-1]['measured']})")
    table = pd.DataFrame([{"nodes": name, "estimate": what, **values} for name, methods in agreement.items()
                          for what, values in methods.items()])
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("AtP's Spearman by layer (-1: embed):", {k: round(v, 3) for k, v in by_layer.items()})
    record = {"command": "python tests/benchmarks/bench_attribution.py " + " ".join(sys.argv[1:]),
              "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                          "platform": platform.platform(), "cuda": torch.cuda.is_available(),
                          "torch": torch.__version__},
              "model": info, "setting": args.setting, "mode": args.mode, "positions": args.positions,
              "pairs": meta, "cost": cost, "speedup_per_pair": speedup, "agreement": agreement,
              "spearman_by_layer": by_layer, "metric_clean": found.pairs["metric_clean"].tolist(),
              "persona_nodes": both[both["offset"] <= 0].drop(columns=["source_position", "from_end"]).to_dict(
                  "records")}
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
