"""Attribution patching (AtP; Nanda 2023, Kramár et al. 2024): a first-order estimate of the effect of every
(layer, position) activation patch on a scalar metric, from one clean forward and backward and one corrupted forward
per prompt pair, beside the exact activation-patching map on the same grid that validates it.

Nodes are residual-stream points (activations.capture): ``hook_embed`` and ``blocks.{l}.hook_resid_post`` (a node
table's ``hook``; its ``layer`` is activations.capture.table_layer's, -1 for hook_embed), at prompt positions only
(as interp.patching.run patches them; the answer-trie tokens score mode appends read the prompt through attention).
Patching node (l, t) of the clean prompt with position s of the corrupted one overwrites the output of layer l at t,
so later layers read the corrupted value there; AtP estimates the change of the metric as

    AtP(l, t) = (a_corr[l, s] - a_clean[l, t]) · ∂metric/∂a_clean[l, t],

exact where the metric is linear in that state (`exact_map` computes the real change, one patched forward a node).

The grid (`grid`): the two prompts must be the same tokens outside the patched slot (its span is ``PERSONA`` of
interp.patching.spec.encode). Positions before the slot are then the same states in both prompts (causal attention) and
have no effect; from the slot on, positions are paired from the slot's end as patch_spec's ``persona_end`` and
``system`` groups pair them: the last tokens of the two slots from their ends (the first tokens of a longer clean
slot keep their values and are no node; nor is a slot token at the same position in both prompts before their first
different token, the " a" of "a Muslim" and "a Jew", whose states are the same in both), then every token after the
slot with its counterpart the same distance after the corrupted slot. `scope` ends the grid at the slot's end
(``slot``), at the end of the system text (``system``) or at the prompt's end (``prompt``).

The metric is the suite's outcome as score mode reads it from the same tree-masked forward the engine scores with
(``Engine.tree_forward``, every prompt token in it): `expected_metric`, the expected value over the answer set
(interp.patching.run's ``PatchScores.expected``; intergroup: the expected intensity), or `logp_metric`, the
log-probability of writing one answer and ending it there (``PatchScores.logp``), so AtP, `exact_map` and the
patching study measure one quantity.

AtP* (Kramár et al. 2024) adds two fixes to AtP:

- the QK fix for attention saturation recomputes the attention softmax exactly when a query or key node is patched.
  It is a fix for attention-score nodes: a residual-stream node feeds every later sub-layer, there is no one softmax
  of its own to recompute, and the fix does not apply to the nodes here;
- GradDrop against cancellation between paths: for each block l, the gradient is taken with the gradient through
  block l's own contribution to the residual stream stopped (its output read as input + (output - input).detach(),
  so the forward is unchanged), and the node's score is (1 / (L - 1)) Σ_l |AtP_drop l|, a magnitude. It applies to
  residual-stream nodes and is implemented (`attribute(graddrop=True)`: L more forwards and backwards per pair). It
  assumes block l reads block l - 1's output unchanged (Llama, Qwen2, Mistral, SmolLM2; models that scale or add to
  the embedding before block 0, Gemma and GPT-2, rescale the embedding node's gradient when block 0 is dropped).

Gradients never reach the model's parameters: they are switched off for the backward (`frozen`) and their flags come
back afterwards.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from activations.capture import EMBED_HOOK, Layers, ResidualHooks, hook_names, n_layers_of, resolve_layers, \
    table_layer
from behavioral.analysis.bootstrap import LEVEL, MIN_UNITS, percentile_interval, resamples
from behavioral.analysis.paired import fieller
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.engine import Batch
from interp.patching.sources import prefix_batches, prefixes, source_states
from interp.patching.spec import PERSONA, SYSTEM_GROUP, PatchError, PatchPrompt

SCOPES = ("slot", "system", "prompt")
NODE_COLUMNS = ("pair", "hook", "layer", "position", "source_position", "offset", "from_end")
Metric = Callable[[torch.Tensor], torch.Tensor]  # tree logits [B, 1 + trie nodes, V] -> [B]


# --- the metric ---------------------------------------------------------------------------------------------------

def expected_metric(trie: AnswerTrie) -> Metric:
    """The expected value over the answer set (score mode's ``expected``; intergroup: the expected intensity)."""
    values = trie.spec.values
    if values is None:
        raise ValueError("the answer set has no values to take an expectation of; expected a valued scale, or "
                         "logp_metric")

    def metric(logits: torch.Tensor) -> torch.Tensor:
        _, logp = trie.answer_logprobs(logits)
        return torch.softmax(logp, dim=-1) @ torch.tensor(values, dtype=logp.dtype, device=logp.device)
    return metric


def logp_metric(trie: AnswerTrie, label) -> Metric:
    """The log-probability of writing answer `label` and ending it there (``PatchScores.logp``)."""
    if label not in trie.spec.names:
        raise ValueError(f"answer {label!r} is not in the answer set; expected one of {list(trie.spec.names)}")
    index = trie.spec.names.index(label)
    return lambda logits: trie.answer_logprobs(logits)[1][:, index]


@dataclass(frozen=True)
class Pair:
    """A clean prompt and its corrupted counterpart (the patched slot's span as ``PERSONA`` in both), the answer trie
    both are scored with, and the metric read from the clean prompt's tree logits."""

    clean: PatchPrompt
    corrupted: PatchPrompt
    trie: AnswerTrie
    metric: Metric


# --- the grid -----------------------------------------------------------------------------------------------------

def grid(clean: PatchPrompt, corrupted: PatchPrompt, scope: str = "prompt") -> list[tuple[int, int]]:
    """(clean position, corrupted position) of every node position, in clean order (module docstring); a PatchError
    (a ValueError) where the prompts differ outside the slot or the scope is unknown."""
    if scope not in SCOPES:
        raise PatchError(f"unknown scope {scope!r}; expected one of {', '.join(SCOPES)}")
    if PERSONA not in clean.spans or PERSONA not in corrupted.spans:
        raise PatchError("a prompt of the pair has no patched slot span; expected prompts from "
                         "interp.patching.spec.encode (or a PatchPrompt with a 'persona' span)")
    a, b = clean.spans[PERSONA], corrupted.spans[PERSONA]
    if clean.ids[:a.start] != corrupted.ids[:b.start]:
        raise PatchError(f"the clean and corrupted prompts differ before the slot (tokens 0..{a.start} and "
                         f"0..{b.start}); expected prompts that differ in the slot only")
    if clean.ids[a.end:] != corrupted.ids[b.end:]:
        raise PatchError(f"the clean and corrupted prompts differ after the slot ({len(clean) - a.end} and "
                         f"{len(corrupted) - b.end} tokens after it); expected prompts that differ in the slot only")
    if scope == SYSTEM_GROUP and SYSTEM_GROUP not in clean.spans:
        raise PatchError("scope 'system' needs the system span of interp.patching.spec.encode; this prompt has none")
    end = {"slot": a.end, SYSTEM_GROUP: clean.spans.get(SYSTEM_GROUP, a).end, "prompt": len(clean)}[scope]
    n = min(len(a), len(b))
    shared = next((i for i, (x, y) in enumerate(zip(clean.ids, corrupted.ids)) if x != y),
                  min(len(clean), len(corrupted)))  # the length of the prompts' common prefix
    inside = [(a.end - n + i, b.end - n + i) for i in range(n)]
    inside = [(t, s) for t, s in inside if not t == s < shared]
    return inside + [(t, b.end + t - a.end) for t in range(a.end, end)]


def _layers(model, layers: Layers | None) -> list[str]:
    """The grid's hooks, shallowest first: those `layers` names (activations.capture.resolve_layers, hook_embed
    allowed); None: hook_embed and every block."""
    n = n_layers_of(model)
    return hook_names(n) if layers is None else sorted(resolve_layers(layers, n, embed=True), key=table_layer)


# --- forwards -----------------------------------------------------------------------------------------------------

def tree_logits(engine, prompts: Sequence[Sequence[int]], trie: AnswerTrie) -> torch.Tensor:
    """[B, 1 + len(trie), V]: the logits Engine.score reads (after each prompt and its prefill, then after every trie
    node) from the engine's tree-masked forward with every prompt token in it; differentiable where grad is on."""
    rows = [list(p) + list(trie.prefill) for p in prompts]
    with engine.hooked(share_prefix=False):
        return engine.tree_forward(Batch(engine, rows), trie, use_cache=False).logits


@contextlib.contextmanager
def frozen(model) -> Iterator[None]:
    """Inside the block the model's parameters do not require grad (a backward reaches the residual states only, and
    no parameter gradient is built or kept); each parameter's flag comes back on exit, also when the block raises."""
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        yield
    finally:
        # by name and in inference mode: accelerate remakes an offloaded module's parameters in each forward, also in
        # the engine's inference-mode forwards (a model split with cpu or disk entries)
        with torch.inference_mode():
            for name, p in model.named_parameters():
                p.requires_grad_(flags[name])


def clean_gradients(engine, pair: Pair, layers: Layers,
                    drop: int | None = None) -> tuple[float, torch.Tensor, torch.Tensor]:
    """(metric, states, gradients) of the clean prompt, states and ∂metric/∂state [len(layers), T, d] (float32 at
    least) at its T prompt positions for the hooks `layers` names (activations.capture.resolve_layers, in the order
    named), from one forward and one backward; with `drop` (a block number, -1 the last), the gradient through that
    block's own contribution to the residual stream is stopped (GradDrop)."""
    model = engine.model
    every = hook_names(n_layers_of(model))  # hook_embed, then every block: each reads the one before
    names = resolve_layers(layers, len(every) - 1, embed=True)
    dropped = None if drop is None else resolve_layers(drop, len(every) - 1)[0]
    kept: dict[str, torch.Tensor] = {}

    def keep(name: str, hidden: torch.Tensor) -> torch.Tensor:
        if name == EMBED_HOOK:  # the graph starts here: no parameter requires grad
            hidden = hidden.detach().requires_grad_(True)
        elif name == dropped:
            before = kept[every[every.index(name) - 1]].to(hidden.device)  # a split model's blocks span devices
            hidden = before + (hidden - before).detach()
        kept[name] = hidden
        return hidden

    n = len(pair.clean)
    with frozen(model), torch.inference_mode(False), torch.enable_grad():
        with ResidualHooks(model, every, edit=keep, retain=False):
            logits = tree_logits(engine, [pair.clean.ids], pair.trie)
        value, upstream = _metric_gradient(pair.metric, logits.detach())
        grads = torch.autograd.grad(logits, [kept[name] for name in names], grad_outputs=upstream)
    device = kept[names[0]].device  # where a split model's blocks span devices, the first hook's
    states = torch.stack([_wide(kept[name][0, :n].detach()).to(device) for name in names])
    return value.item(), states, torch.stack([_wide(g[0, :n]).to(device) for g in grads])


def _metric_gradient(metric: Metric, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(metric summed over rows, its gradient with respect to `logits`), the backward through the metric apart from
    the model's: answer_logprobs writes into a tensor it saved for the backward, which autograd copies instead of
    refusing only under a dispatch mode that slows every operation, so only the metric runs under it."""
    logits = logits.requires_grad_(True)
    with torch.autograd.graph.allow_mutation_on_saved_tensors():
        value = metric(logits).sum()
        (grad,) = torch.autograd.grad(value, [logits])
    return value.detach(), grad


def _wide(x: torch.Tensor) -> torch.Tensor:
    """`x` in float32 at least (float64 stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _source_cost(ids: Sequence[Sequence[int]], upto: Sequence[int], batch_size: int) -> tuple[int, int]:
    """(forwards, prompts) `source_states` runs for these prompts cut at `upto`: one forward per batch of distinct
    prefixes."""
    cut = prefixes(ids, upto)
    return len(prefix_batches(cut, batch_size)), len(set(cut))


# --- the maps -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeMap:
    """One method's map: `nodes` one row per (pair, layer, position) (NODE_COLUMNS, then the method's values),
    `pairs` one row per pair (metric_clean, n_nodes, seconds), and its cost: model forwards (batched calls),
    prompts through the model, backward passes and wall seconds."""

    nodes: pd.DataFrame
    pairs: pd.DataFrame
    forwards: int
    prompts: int
    backwards: int
    seconds: float


def _node_rows(i: int, pair: Pair, layers: Sequence[str], nodes: Sequence[tuple[int, int]],
               values: dict[str, np.ndarray]) -> pd.DataFrame:
    """The node rows of pair `i`: layer-major (`layers` hook names), positions in grid order; `values` name ->
    [layers, positions]."""
    last = pair.clean.spans[PERSONA].last
    t = np.array([p for p, _ in nodes])
    frame = pd.DataFrame({
        "pair": i, "hook": np.repeat(layers, len(nodes)),
        "layer": np.repeat([table_layer(name) for name in layers], len(nodes)), "position": np.tile(t, len(layers)),
        "source_position": np.tile([s for _, s in nodes], len(layers)), "offset": np.tile(t - last, len(layers)),
        "from_end": np.tile(len(pair.clean) - 1 - t, len(layers))})
    for name, v in values.items():
        frame[name] = v.reshape(-1)
    return frame


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for k in range(0, len(items), size):
        yield items[k:k + size]


def attribute(engine, pairs: Sequence[Pair], layers: Layers | None = None, scope: str = "prompt",
              graddrop: bool = False) -> NodeMap:
    """The AtP map of every pair over the hooks `layers` names (activations.capture.resolve_layers, hook_embed
    allowed; None: hook_embed and every block): column ``atp`` (and ``graddrop``, AtP*'s GradDrop magnitude, with
    `graddrop`).
    Corrupted states come from one forward per distinct corrupted prefix (interp.patching.sources, `engine.batch_size`
    pairs at a time), then each pair's clean prompt takes one forward and one backward (L more with `graddrop`)."""
    layers = _layers(engine.model, layers)
    n_blocks = n_layers_of(engine.model)
    if graddrop and n_blocks < 2:
        raise ValueError(f"GradDrop averages over L - 1 dropped layers; the model has {n_blocks} block")
    blocks = [name for name in layers if name != EMBED_HOOK]
    frames, rows = [], []
    forwards = prompts = backwards = 0
    start = time.perf_counter()
    for chunk_start, chunk in zip(range(0, len(pairs), engine.batch_size), _chunks(pairs, engine.batch_size)):
        nodes = [grid(p.clean, p.corrupted, scope) for p in chunk]
        upto = [max(s for _, s in g) + 1 for g in nodes]
        ids = [p.corrupted.ids for p in chunk]
        cache = source_states(engine.model, ids, blocks, upto, engine.batch_size)
        f, n = _source_cost(ids, upto, engine.batch_size)
        forwards, prompts = forwards + f, prompts + n
        for j, (pair, g) in enumerate(zip(chunk, nodes)):
            began = time.perf_counter()
            t, s = [a for a, _ in g], [b for _, b in g]
            value, states, grads = clean_gradients(engine, pair, layers)
            corrupted = torch.stack([cache.get(j, layer)[s] for layer in layers]).to(states.device, states.dtype)
            diff = corrupted - states[:, t]
            values = {"atp": (diff * grads[:, t]).sum(-1).cpu().numpy(),
                      "patch_norm": diff.norm(dim=-1).cpu().numpy()}
            if graddrop:
                dropped = [clean_gradients(engine, pair, layers, drop=block)[2] for block in range(n_blocks)]
                values["graddrop"] = (sum((diff * d[:, t]).sum(-1).abs() for d in dropped) /
                                      (n_blocks - 1)).cpu().numpy()
            passes = 1 + (n_blocks if graddrop else 0)
            forwards, prompts, backwards = forwards + passes, prompts + passes, backwards + passes
            i = chunk_start + j
            frames.append(_node_rows(i, pair, layers, g, values))
            rows.append({"pair": i, "metric_clean": value, "n_nodes": len(layers) * len(g),
                         "seconds": time.perf_counter() - began})
    return NodeMap(_concat(frames), pd.DataFrame(rows), forwards, prompts, backwards, time.perf_counter() - start)




def _patched_metrics(engine, pair: Pair, jobs: Sequence[tuple[int, int, int] | None], layers: Sequence[str],
                     cache) -> list[float]:
    """The metric of the clean prompt once per job, in one forward: a job (index into `layers`, clean position,
    corrupted position) patches that node, None patches nothing."""
    edits: dict[str, tuple[list[int], list[int], list[torch.Tensor]]] = {}
    for row, job in enumerate(jobs):
        if job is not None:
            k, t, s = job
            rs, ts, vs = edits.setdefault(layers[k], ([], [], []))
            rs.append(row)
            ts.append(t)
            vs.append(cache.get(0, layers[k])[s])

    def write(name: str, hidden: torch.Tensor) -> torch.Tensor:
        rs, ts, vs = edits[name]
        hidden = hidden.clone()
        hidden[rs, ts] = torch.stack(vs).to(hidden.device, hidden.dtype)
        return hidden

    with torch.inference_mode(), ResidualHooks(engine.model, list(edits), edit=write, retain=False):
        logits = tree_logits(engine, [pair.clean.ids] * len(jobs), pair.trie)
        return pair.metric(logits).double().cpu().tolist()


def _concat(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(NODE_COLUMNS))


def exact_map(engine, pairs: Sequence[Pair], layers: Layers | None = None, scope: str = "prompt",
              sample: int | None = None, seed: int = 0, ranked_by: Sequence[np.ndarray] | None = None) -> NodeMap:
    """The activation-patching map on `attribute`'s grid: column ``exact``, the metric with one node patched minus
    the clean metric. Per pair: its corrupted states from one forward, then the clean prompt once per node (and once
    unpatched), `engine.batch_size` rows a forward, each row patching one node; with `sample`, only that many nodes
    of each pair (where its grid has more), in grid order: those of largest |ranked_by[i]| (pair i's estimates in
    grid order, e.g. its AtP map: where an estimate points is where it must hold), else a seeded uniform sample."""
    if sample is not None and sample < 1:
        raise ValueError(f"sample={sample}: expected at least 1 node a pair, or None for all")
    layers = _layers(engine.model, layers)
    blocks = [name for name in layers if name != EMBED_HOOK]
    frames, rows = [], []
    forwards = prompts = 0
    start = time.perf_counter()
    for i, pair in enumerate(pairs):
        began = time.perf_counter()
        g = grid(pair.clean, pair.corrupted, scope)
        cache = source_states(engine.model, [pair.corrupted.ids], blocks, [max(s for _, s in g) + 1],
                              engine.batch_size)
        n = len(layers) * len(g)
        if sample is None or sample >= n:
            chosen = np.arange(n)
        elif ranked_by is not None:
            chosen = np.sort(np.argsort(-np.abs(np.asarray(ranked_by[i], dtype=float)), kind="stable")[:sample])
        else:
            chosen = np.sort(np.random.default_rng([seed, i]).choice(n, sample, replace=False))
        jobs = [None, *((k // len(g), *g[k % len(g)]) for k in chosen.tolist())]
        values = [v for chunk in _chunks(jobs, engine.batch_size)
                  for v in _patched_metrics(engine, pair, chunk, layers, cache)]
        forwards += 1 + math.ceil(len(jobs) / engine.batch_size)
        prompts += 1 + len(jobs)
        exact = np.full(n, np.nan)
        exact[chosen] = np.array(values[1:]) - values[0]
        frame = _node_rows(i, pair, layers, g, {"exact": exact})
        frames.append(frame.iloc[chosen].reset_index(drop=True))
        rows.append({"pair": i, "metric_clean": values[0], "n_nodes": len(chosen),
                     "seconds": time.perf_counter() - began})
    return NodeMap(_concat(frames), pd.DataFrame(rows), forwards, prompts, 0, time.perf_counter() - start)


# --- reading the maps ---------------------------------------------------------------------------------------------

def caution(layer: int, offset: int) -> str:
    """Where AtP's linear estimate is known to fail, as a map prints it (`layer` a node table's ``layer`` value,
    activations.capture.table_layer's): the slot's own tokens (offset <= 0, where the corrupted state differs most;
    on SmolLM2 AtP overstated layers 7-12 there two to four times and got the sign wrong) and the embedding and first
    block (layer <= 0); '' elsewhere."""
    where = [name for name, hit in (("slot token", offset <= 0), ("earliest layer", layer <= 0)) if hit]
    return ", ".join(where)


def top_k(n_nodes: int, k: int | None = None, fraction: float | None = None) -> int:
    """The k of a top-k comparison: `k`, or ceil(`fraction` × n_nodes) (at least 1), at most n_nodes."""
    return min(n_nodes, k if k is not None else max(1, math.ceil(fraction * n_nodes)))


def recovered(estimate: np.ndarray, exact: np.ndarray, k: int) -> float:
    """The share of the k nodes of largest |exact| effect that are among the k of largest |estimate| (ties broken by
    node order)."""
    top = lambda v: set(np.argsort(-np.abs(np.asarray(v, dtype=float)), kind="stable")[:k].tolist())  # noqa: E731
    return len(top(estimate) & top(exact)) / k


def agreement(estimate: np.ndarray, exact: np.ndarray, ks: Sequence[int] = (10,),
              fractions: Sequence[float] = (0.05,)) -> dict[str, float]:
    """How well an estimated map ranks the nodes as the exact one does: ``n_nodes``; ``spearman``, the rank
    correlation of the signed effects (NaN where either map is constant); per k of `ks`, ``top{k}``, the share of
    the exact top k recovered; per fraction f (``{100 f}pct``), the same with k = ceil(f × n_nodes): ``top_{..}pct``
    and that k, ``k_{..}pct``."""
    estimate, exact = np.asarray(estimate, dtype=float), np.asarray(exact, dtype=float)
    if estimate.shape != exact.shape or estimate.ndim != 1:
        raise ValueError(f"maps of {estimate.shape} and {exact.shape} nodes; expected two equal 1-d maps")
    n = len(exact)
    constant = not n or np.ptp(estimate) == 0 or np.ptp(exact) == 0
    out = {"n_nodes": n, "spearman": math.nan if constant else float(spearmanr(estimate, exact).statistic)}
    for k in ks:
        out[f"top{k}"] = recovered(estimate, exact, top_k(n, k)) if n else math.nan
    for f in fractions:
        name, k = f"{100 * f:g}pct", top_k(n, fraction=f)
        out[f"top_{name}"], out[f"k_{name}"] = (recovered(estimate, exact, k) if n else math.nan), k
    return out


N_RESAMPLES = 1000  # unit resamples of the map interval's studentized bootstrap (`studentized`)
CHUNK = 512  # nodes a studentized bootstrap holds at once ([CHUNK, N_RESAMPLES] arrays)


def summarize(nodes: pd.DataFrame, value: str, unit: str, by: Sequence[str] = ("layer", "offset"),
              level: float = LEVEL, min_units: int = MIN_UNITS, n_resamples: int = N_RESAMPLES,
              seed: int = 0) -> pd.DataFrame:
    """Per node group (`by`): the mean of `value` over the pairs that have the node, n_pairs, n_units (the distinct
    values of column `unit`, e.g. events, that have the node), the range of the per-unit means (unit_min, unit_max:
    not an interval of the mean) and its interval over those units (ci_low, ci_high; NaN where fewer than
    `min_units`, or where Fieller's is unbounded): the hull of Fieller's for the mean as the ratio of the per-unit
    sums to the per-unit pair counts, which with as many pairs in every unit is Student's t over the per-unit means
    (pairs of one unit are not independent), and of the studentized bootstrap of that ratio over the node's own
    units (`studentized`, `n_resamples` resamples drawn from `seed`), which follows a skewed spread of the per-unit
    means where t's symmetric interval does not (docs/BENCHMARKS.md: "AtP map interval on skewed event
    means")."""
    by = list(by)
    units, unit_index = np.unique(nodes[unit].astype(str), return_inverse=True)
    groups = nodes.groupby(by, sort=True).ngroup().to_numpy()
    n_groups = groups.max() + 1 if len(groups) else 0
    sums = np.zeros((len(units), n_groups))
    counts = np.zeros((len(units), n_groups))
    np.add.at(sums, (unit_index, groups), nodes[value].to_numpy(dtype=float))
    np.add.at(counts, (unit_index, groups), 1)
    out = nodes.groupby(by, sort=True).agg(mean=(value, "mean"), n_pairs=(value, "size")).reset_index()
    out["n_units"] = (counts > 0).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        unit_means = np.where(counts > 0, sums / counts, np.nan)
    out["unit_min"], out["unit_max"] = np.nanmin(unit_means, axis=0), np.nanmax(unit_means, axis=0)
    low, high = np.full(n_groups, np.nan), np.full(n_groups, np.nan)
    has = counts > 0
    wide = np.flatnonzero(has.sum(0) >= max(2, min_units))  # a node's own units, however many the others have
    if len(wide):
        patterns, which = np.unique(has[:, wide].T, axis=0, return_inverse=True)
        for p, pattern in enumerate(patterns):  # nodes of the same units: one set of resamples
            g = wide[which.reshape(-1) == p]
            s, c = sums[pattern][:, g].T, counts[pattern][:, g].T
            ends = np.array([fieller(s_i, c_i, level)[:2] for s_i, c_i in zip(s, c)], dtype=float).reshape(-1, 2)
            boot = np.concatenate([np.array(studentized(s[k:k + CHUNK], c[k:k + CHUNK], level, n_resamples, seed))
                                   for k in range(0, len(g), CHUNK)], axis=1)
            # the hull; Fieller's NaN (unbounded) stays NaN, a bootstrap without a finite resample leaves Fieller's
            low[g] = np.where(np.isnan(boot[0]), ends[:, 0], np.minimum(ends[:, 0], boot[0]))
            high[g] = np.where(np.isnan(boot[1]), ends[:, 1], np.maximum(ends[:, 1], boot[1]))
    out["ci_low"], out["ci_high"] = low, high
    return out


def studentized(sums: np.ndarray, counts: np.ndarray, level: float = LEVEL, n_resamples: int = N_RESAMPLES,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) [nodes]: the studentized (bootstrap-t) `level` interval of R = Σ sums / Σ counts per node from
    its per-unit `sums` and pair `counts` [nodes, units] (counts > 0), over the units resampled with replacement
    (behavioral.analysis.bootstrap.resamples: the same `n_resamples` draws from `seed` for every node). The pivot
    is (R* − R) / se*, se the ratio's linearised standard error, √(n / (n − 1) Σ (sums − R counts)²) / Σ counts
    (with equal counts, s / √n of the per-unit means); the interval is (R − q_high se, R − q_low se) with q the
    pivot's central percentile interval over the resamples where it is finite (a resample of equal residuals has
    none); NaN where none is."""
    sums, counts = np.asarray(sums, dtype=float), np.asarray(counts, dtype=float)
    n_nodes, n = sums.shape
    draws = resamples(n, n_resamples, seed)
    weights = np.zeros((n_resamples, n))
    np.add.at(weights, (np.arange(n_resamples)[:, None], draws), 1)  # how often each unit is drawn
    total = counts.sum(1)
    ratio = sums.sum(1) / total
    resid = sums - ratio[:, None] * counts  # about R: no cancellation where |R| dwarfs the spread
    se = np.sqrt(n / (n - 1) * (resid ** 2).sum(1)) / total
    w_total, w_resid = counts @ weights.T, resid @ weights.T  # [nodes, resamples]
    delta = w_resid / w_total  # R* − R
    spread = (resid ** 2) @ weights.T - 2 * delta * ((resid * counts) @ weights.T) + delta ** 2 * (
        (counts ** 2) @ weights.T)  # Σ w (resid − δ counts)²
    se_star = np.sqrt(n / (n - 1) * np.maximum(spread, 0)) / w_total
    with np.errstate(divide="ignore", invalid="ignore"):
        pivot = np.where(se_star > 1e-9 * se[:, None], delta / se_star, np.nan)
    finite = np.isfinite(pivot).all(1)
    q = np.empty((n_nodes, 2))
    tail = 100 * (1 - level) / 2  # percentile_interval's ends, at once where every resample's pivot is finite
    q[finite] = np.percentile(pivot[finite], [tail, 100 - tail], axis=1).T
    q[~finite] = np.array([percentile_interval(row, level) for row in pivot[~finite]], dtype=float).reshape(-1, 2)
    return ratio - q[:, 1] * se, ratio - q[:, 0] * se
