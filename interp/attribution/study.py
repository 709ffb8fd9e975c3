"""The attribution-patching study (`empathy-gap interp attribution RUN_DIR`): which (layer, position) residual-stream
states of an identity slot carry the suite's outcome? For prompt pairs that differ in the slot only, AtP
(interp.attribution) estimates the effect of patching each state of the corrupted prompt into the clean one, for a
whole layer × position map at the cost of two forwards and a backward a pair; with --validate K, activation patching
of every node of K pairs measures how well the estimate ranks them, and what each costs.

Pairs: intergroup's persona as the patching study's modes define them (clean: an in-group prompt, X perceives X;
corrupted: the persona "a person", mode person, or the out-group persona the swap puts in, mode swap; the metric is
the expected intensity); any other suite's identity slot (a span kind of its capture spec, the slot's value in the
kind's last field) through its items: the clean item and the item whose slot field alone holds another value (--source,
or the next identity in the suite's order that the item's context has); the metric is the expected value where the
answer set has values, else the log-probability of the clean prompt's greedy answer."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure as MplFigure

from activations.capture import LAYER_GRAMMAR, hook_names, n_layers_of, select_hooks
from activations.spans import prompt_spans
from behavioral.inference import chat
from behavioral.analysis.bootstrap import MIN_UNITS
from behavioral.report.formats import literal
from behavioral.analysis.runs import Run, prepared_data
from behavioral.report.blocks import Analysis, Figure, Section, Table, scope
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.engine import Engine
from behavioral.analysis.figure_style import GREY, count_range, heatmap_ticks, n_text, new_figure, styled
from behavioral.core.options import SEED, option
from behavioral.runner.run import RunConfig
from behavioral.core.selection import select_rows
from interp.identities import parse_where, span_kind, suite_of, where_text
from behavioral.analysis.rerun import ModelOptions, load_model, one_run
from behavioral.analysis.study import Study
from interp import attribution as atp
from interp.patching.spec import PERSONA, PatchPrompt

GENERIC_MODE = "counterfactual"  # the mode column of another slot's pairs
KS, FRACTIONS = (10,), (0.05,)  # the top-k comparisons: 10 nodes and 5% of the nodes


@dataclass(frozen=True)
class Options(ModelOptions):
    """What is attributed (the slice, the slot and its counterfactual, the pairs), the map's grid, the validation,
    and how the run's model is loaded."""

    where: tuple[str, ...] = option((), "the slice, FIELD=VALUE (intergroup's persona: one category and one "
                                        "setting, default the run's first; another slot: item fields, a field "
                                        "given twice selects either value)", metavar="FIELD=VALUE")
    kind: str | None = option(None, "the capture span kind whose slot is patched (default the suite's first: "
                                    "intergroup's persona)", metavar="KIND")
    modes: tuple[str, ...] = option(("person", "swap"), "intergroup's persona: the corrupted persona (person: \"a "
                                                        "person\"; swap: the out-group persona)", name="--mode",
                                    metavar="MODE")
    source: str | None = option(None, "another slot: the value of every corrupted prompt's slot (default the next "
                                      "identity in the suite's order that the clean item's context has)",
                                metavar="VALUE")
    limit_events: int = option(1, "intergroup's persona: events, a seeded sample of the run's corpus; another slot: "
                                  "clean items, a seeded sample", metavar="N", minimum=1)
    layers: str = option("all", f"layers of the map: {LAYER_GRAMMAR}", metavar="LAYERS")
    positions: str = option("prompt", "positions of the map, from the slot's tokens on: slot (to the slot's end), "
                                      "system (to the end of the system text) or prompt (to the prompt's end)",
                            metavar="SCOPE")
    validate: int = option(0, "activation-patch every node of the first K pairs of each mode as well, and compare "
                              "(one forward row a node)", metavar="K", minimum=0)
    validate_nodes: int = option(0, "activation-patch the N nodes of largest |AtP| of each validated pair instead "
                                    "of all (0: all): where AtP points is where it must hold; the agreement is then "
                                    "over those nodes", metavar="N", minimum=0)
    graddrop: bool = option(False, "AtP*'s GradDrop magnitudes too (L more forwards and backwards a pair)")
    top: int = option(20, "nodes of largest mean |AtP| listed in the report, per mode", metavar="N", minimum=1)
    seed: int = option(0, "seed of another slot's sample of items", metavar="N", **SEED)
    batch_size: int = option(32, "prompts per forward (pairs at a time for the corrupted states, nodes at a time "
                                 "for activation patching)", metavar="N", minimum=1)

    def __post_init__(self):
        super().__post_init__()
        if self.positions not in atp.SCOPES:
            raise ValueError(f"--positions {self.positions!r}: expected one of {', '.join(atp.SCOPES)}")
        if not self.modes:
            raise ValueError("--mode: none given; expected person, swap or both")
        parse_where(self.where)


@dataclass(frozen=True)
class Pairs:
    """The study's pairs and one meta row each (mode, clean, source, unit: the event the bootstrap resamples), what
    the metric is, and the slot's name."""

    pairs: list[atp.Pair]
    meta: pd.DataFrame
    metric: str
    slot: str


# --- pairs --------------------------------------------------------------------------------------------------------

def _pairs_protocol(run: Run, kind: str):
    """The suite's patching protocol where it builds its own pairs for span kind `kind` (its `kind` and `pairs`),
    else None (the pairs come from the suite's capture spec, `slot_pairs`)."""
    protocol = suite_of(run).protocols.get("patch")
    return protocol if getattr(protocol, "kind", None) == kind and hasattr(protocol, "pairs") else None


def _prepared(run: Run, config: RunConfig, engine: Engine | None):
    """The suite's data of `config`, prepared as its run prepares it (analysis.runs.prepared_data)."""
    model, tokenizer = (engine.model, engine.tokenizer) if engine is not None else (None, None)
    return prepared_data(run, config, suite_of(run), model, tokenizer)


def _chat_format(run: Run, tokenizer) -> str:
    """The run's recorded prompt format (else the tokenizer's, as a run detects it)."""
    return run.config.get("chat_format") or chat.detect_format(tokenizer, run.config.get("prompt_format", "auto"))


def _encoded(tokenizer, item, slot: str, fmt: str) -> PatchPrompt:
    """An item's prompt as the recorder tokenizes it, its slot's span as the patched one."""
    ids, spans = prompt_spans(tokenizer, item.prompt(), fmt)
    return PatchPrompt(tuple(ids), {PERSONA: spans[slot]})


def slot_pairs(run: Run, engine: Engine, kind: str, where: dict, options: Options) -> Pairs:
    """Another slot's pairs, through the suite's capture spec: clean items (a seeded sample of the scored items the
    selection holds that mark the slot) and, for each, the item whose slot field alone differs (--source, or the
    next identity in the suite's order among those the context holds); pairs whose prompts differ outside the slot
    are left out. ValueError where none is left."""
    suite = suite_of(run)
    slot, fields = suite.capture.spans[kind]
    field = fields[-1]
    items = [item for _, group in suite.groups(_prepared(run, RunConfig.from_run_dir(run.run_dir), engine))
             for item in group if item.answers is not None and any(s.name == slot for s in item.prompt().slots)]
    frame = select_rows(pd.DataFrame([dict(item.fields) for item in items]), where, f"{run.run_dir}: the items")
    items = [items[i] for i in frame.index]
    context = lambda item: tuple(sorted((k, v) for k, v in item.fields.items() if k != field))  # noqa: E731
    by_context: dict[tuple, dict[str, object]] = {}
    for item in items:
        by_context.setdefault(context(item), {})[item.fields[field]] = item
    fmt = _chat_format(run, engine.tokenizer)
    order = np.random.default_rng(options.seed).permutation(len(items))
    pairs, meta, tries, dropped = [], [], {}, 0
    for i in order:
        if len(pairs) == options.limit_events:
            break
        clean = items[i]
        held = by_context[context(clean)]
        value = options.source or _next_identity(suite, kind, list(held), clean.fields[field])
        if value is None or value not in held or value == clean.fields[field]:
            continue
        trie = tries.setdefault(clean.answers, AnswerTrie.build(engine.tokenizer, clean.answers))
        a, b = _encoded(engine.tokenizer, clean, slot, fmt), _encoded(engine.tokenizer, held[value], slot, fmt)
        try:
            atp.grid(a, b, "slot")
        except ValueError:
            dropped += 1
            continue
        pairs.append((a, b, trie))
        meta.append({"mode": GENERIC_MODE, "clean": clean.fields[field], "source": value,
                     "unit": _context_id(context(clean)), "clean_item": clean.item_id,
                     "source_item": held[value].item_id})
    if not pairs:
        raise ValueError(f"{run.run_dir}: no item of {kind} ({where_text(where)}) has a counterfactual "
                         f"{field} that changes its prompt in the slot only ({dropped} differ elsewhere)")
    pairs, metric = _with_metrics(engine, pairs)
    return Pairs(pairs, pd.DataFrame(meta), metric, f"{kind} (slot {slot}, field {field})")


def _context_id(context: tuple) -> str:
    """A short stable name of an item's context (its fields but the slot's): the unit the bootstrap resamples."""
    return hashlib.sha256(repr(context).encode()).hexdigest()[:12]


def _next_identity(suite, kind: str, held: list[str], value: str) -> str | None:
    """The identity after `value` in the suite's order of `held` (cyclically), None where there is no other."""
    order, _ = suite.identity_set(kind, held)
    if value not in order or len(order) < 2:
        return None
    return order[(order.index(value) + 1) % len(order)]


def _with_metrics(engine: Engine, pairs: list[tuple[PatchPrompt, PatchPrompt, AnswerTrie]]) -> tuple[list[atp.Pair],
                                                                                                    str]:
    """(clean, corrupted, trie) triples as pairs with their metric: the expected value where every answer set has
    values, else the log-probability of the clean prompt's greedy answer (one scoring forward a clean prompt)."""
    if all(trie.spec.values is not None for _, _, trie in pairs):
        return [atp.Pair(a, b, trie, atp.expected_metric(trie)) for a, b, trie in pairs], "expected value"
    out = [atp.Pair(a, b, trie, atp.logp_metric(trie, engine.score([list(a.ids)], trie)[0].greedy))
           for a, b, trie in pairs]
    return out, "log-probability of the clean prompt's greedy answer"


# --- tables and figures -------------------------------------------------------------------------------------------

def _tokens(tokenizer, pairs: Sequence[atp.Pair], nodes: pd.DataFrame) -> pd.Series:
    """The clean token at each node, as Python writes the string (quotes show its spaces; newlines escaped)."""
    cache: dict[int, str] = {}
    ids = [pairs[p].clean.ids[t] for p, t in zip(nodes["pair"], nodes["position"])]
    return pd.Series([cache.setdefault(i, repr(tokenizer.decode([i]))) for i in ids], index=nodes.index)


def map_table(nodes: pd.DataFrame, value: str) -> pd.DataFrame:
    """The mean map of one mode (layer × offset from the slot's last token) with its interval over events and the
    clean token(s) at that offset."""
    out = atp.summarize(nodes, value, "unit", ("layer", "offset"))
    tokens = nodes.groupby("offset")["token"].agg(lambda t: t.iloc[0] if t.nunique() == 1 else
                                                  f"({t.nunique()} tokens)")
    out.insert(2, "token", out["offset"].map(tokens))
    out["caution"] = [atp.caution(layer, offset) for layer, offset in zip(out["layer"], out["offset"])]
    return out


@styled
def heatmap(summary: pd.DataFrame, title: str) -> MplFigure:
    """Layer (rows) × offset (columns) of the mean AtP, diverging around 0, two columns wide, its tick labels fitted
    to the cells (every few shown where they are many); the title ends with the pairs per cell."""
    grid = summary.pivot_table(index="layer", columns="offset", values="mean", sort=True)
    data = grid.to_numpy(dtype=float)
    fig = new_figure(2, min(8.0, 1.6 + 0.16 * grid.shape[0]))
    ax = fig.add_subplot()
    finite = np.abs(data[np.isfinite(data)])
    lim = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    im = ax.imshow(data, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    ax.set_xlabel("position: offset from the slot's last token")
    ax.set_ylabel("layer")
    fig.colorbar(im, ax=ax, label="mean AtP (metric units)")
    ax.set_title(f"{title}\n{n_text(pairs=count_range(summary['n_pairs']))} per cell")
    heatmap_ticks(ax, [str(c) for c in grid.columns], ["embed" if v < 0 else str(v) for v in grid.index])
    return fig


@styled
def scatter(nodes: pd.DataFrame, title: str) -> MplFigure:
    """AtP against activation patching, one point a node, coloured by layer, with the identity line; the title ends
    with the nodes and pairs drawn."""
    fig = new_figure(1, 3.2)
    ax = fig.add_subplot()
    points = ax.scatter(nodes["exact"], nodes["atp"], c=nodes["layer"], s=4, cmap="viridis")
    ends = [float(np.nanmin(nodes[["exact", "atp"]].to_numpy())), float(np.nanmax(nodes[["exact", "atp"]].to_numpy()))]
    ax.plot(ends, ends, color=GREY, lw=0.6)
    ax.set_xlabel("activation patching: Δ metric")
    ax.set_ylabel("AtP estimate")
    fig.colorbar(points, ax=ax, label="layer (-1: embed)")
    ax.set_title(f"{title}\n{n_text(nodes=len(nodes), pairs=nodes['pair'].nunique())}")
    return fig


def agreement_rows(nodes: pd.DataFrame) -> pd.DataFrame:
    """Per mode: the agreement of AtP with activation patching for every validated pair, pooled over them, and on
    their mean map (layer × offset); with a ``graddrop`` column, the same of AtP*'s GradDrop magnitude with
    |activation patching| (``estimate`` says which)."""
    estimates = {"AtP": lambda f: (f["atp"], f["exact"])}
    if "graddrop" in nodes:
        estimates["GradDrop, magnitude"] = lambda f: (f["graddrop"], f["exact"].abs())
    rows = []
    for mode, part in nodes.groupby("mode", sort=False):
        mean = part.groupby(["layer", "offset"])[[c for c in ("atp", "graddrop", "exact") if c in part]].mean()
        groups = [*((f"pair {pair}", 1, one) for pair, one in part.groupby("pair")),
                  ("pooled", part["pair"].nunique(), part), ("mean map", part["pair"].nunique(), mean)]
        for name, read in estimates.items():
            rows += [{"mode": mode, "estimate": name, "over": over, "pairs": n,
                      **atp.agreement(*read(frame), KS, FRACTIONS)} for over, n, frame in groups]
    return pd.DataFrame(rows)


def by_layer(nodes: pd.DataFrame) -> pd.DataFrame:
    """Per mode and layer: Spearman of AtP with activation patching over the layer's validated nodes, and the
    summed |effect| of each (where a layer's estimate goes wrong)."""
    rows = []
    for (mode, layer), part in nodes.groupby(["mode", "layer"], sort=False):
        rows.append({"mode": mode, "layer": layer, "n_nodes": len(part),
                     "spearman": atp.agreement(part["atp"], part["exact"], (), ())["spearman"],
                     "sum_abs_atp": part["atp"].abs().sum(), "sum_abs_exact": part["exact"].abs().sum()})
    return pd.DataFrame(rows)


def cost_rows(mode: str, found: atp.NodeMap, exact: atp.NodeMap | None) -> list[dict]:
    """What each method cost for one mode: pairs, nodes, forwards (batched model calls), prompts through the model,
    backwards, seconds, per pair and per node; for activation patching also its seconds for the whole map of a pair
    (``full_map_seconds_per_pair``: seconds a node × the AtP map's nodes a pair, measured where every node ran,
    projected where a sample did) and that over AtP's seconds a pair (``speedup_per_pair``)."""
    out = []
    for method, m in (("AtP", found), ("activation patching", exact)):
        if m is None:
            continue
        n, nodes = len(m.pairs), int(m.pairs["n_nodes"].sum())
        out.append({"mode": mode, "method": method, "pairs": n, "nodes": nodes, "forwards": m.forwards,
                    "prompts": m.prompts, "backwards": m.backwards, "seconds": m.seconds,
                    "seconds_per_pair": m.seconds / n if n else math.nan,
                    "seconds_per_node": m.seconds / nodes if nodes else math.nan})
    if len(out) == 2:
        atp_row, exact_row = out
        full = exact_row["seconds_per_node"] * atp_row["nodes"] / atp_row["pairs"]
        exact_row["full_map_seconds_per_pair"] = full
        exact_row["speedup_per_pair"] = full / atp_row["seconds_per_pair"]
    return out


# --- the study ----------------------------------------------------------------------------------------------------

# What the map's interval covered on synthetic maps of 10, 12 and 20 events (200 maps of 20 nodes a world, 5 pairs an
# event, event effects as large as the pair noise or three times larger; tests/benchmarks/inference_calibration.py
# --atp-events 10,12,20 --atp-runs 200 with the other parts off, 2026-12-02; docs/BENCHMARKS.md, "AtP map interval
# on skewed event means").
MAP_COVERAGE = ("0.95-0.97 where the per-event means were normal or heavy-tailed (t₃), 0.94-0.95 where they were "
                "skewed as an exponential (skewness ±2) and 0.87-0.94 where they were skewed more strongly (skewness "
                "−4 and −6), least with 10 events and event effects three times the pair noise; Student's t alone, "
                "printed before: 0.94-0.96, 0.89-0.94 and 0.81-0.92 (200 synthetic maps of 20 nodes a world; "
                "tests/benchmarks/inference_calibration.py --atp-events 10,12,20)")
MAP_TEXT = (
    "AtP estimates, for each residual-stream state (layer, position) of the clean prompt, the change of the metric "
    "when that one state is replaced by the corrupted prompt's (the state at the same distance from the slot's end): "
    "(a_corrupted − a_clean) · ∂metric/∂a_clean, from one clean forward and backward and one corrupted forward a "
    "pair. `offset` counts positions from the slot's last token (0; negative: inside the slot); layer -1 is the "
    "token embedding. AtP is a first-order estimate: read the map as a ranking of where to look, then patch those "
    "nodes (--validate), not as effect sizes in rating points. `caution` marks where it is known to fail: the slot's "
    "own tokens (on SmolLM2 it overstated layers 7-12 there two to four times and got the sign wrong) and the "
    "earliest layers. `mean` is over the pairs that have the node; `unit_min`/`unit_max` the range of its per-event "
    "means (another slot: the clean items' contexts, `unit`), not an interval; `ci_low`/`ci_high` the 95% "
    "interval of the mean over the units (pairs of one unit are not independent): the hull of Student's t over the "
    "per-unit means (where every unit has as many pairs at the node, else Fieller's for the ratio of the per-unit "
    "sums to their pair counts) and of a studentized bootstrap of that mean over the units (1,000 seeded "
    "resamples), which reaches further on the side where the per-unit means are skewed, only where the node has at "
    f"least {MIN_UNITS} units (where its coverage was measured: on synthetic maps of 10-20 events it covered "
    f"{MAP_COVERAGE}). The report lists the nodes of largest |mean|; the "
    "whole map is `map_<mode>.csv`, every pair's nodes `nodes.csv`.")
VALIDATION_TEXT = (
    "Activation patching ran every node of the first pairs of each mode (one forward row a node; with "
    "--validate-nodes N, the N nodes of largest |AtP| a pair, where AtP points, and every measure below is over "
    "those). "
    "`spearman` is the rank correlation of the signed effects, `top10` the share of the 10 nodes of largest "
    "|effect| under activation patching that are among AtP's 10 largest, `top_5pct` the same for 5% of the nodes "
    "(`k_5pct` of them); per pair, pooled over the validated pairs, and on their mean map. The cost table counts "
    "batched model calls (`forwards`), prompts through the model and backward passes, with wall time; "
    "`full_map_seconds_per_pair` is activation patching's time for a pair's whole map (projected where a sample "
    "ran). With --graddrop, the rows of estimate `GradDrop, magnitude` compare AtP*'s GradDrop (a magnitude) "
    "with the size of the activation-patching effect.")


def _layers(options: Options, model) -> list[str]:
    """The map's hooks, by the one layer grammar."""
    return select_hooks(options.layers, hook_names(n_layers_of(model)), "--layers", "available")


def _scope_section(pairs: Pairs, options: Options, n_nodes: int, validated: pd.DataFrame | None) -> Section:
    """The report's "what this can and cannot show", from this run's settings (`n_nodes`: distinct layer × offset
    nodes of the map)."""
    units = pairs.meta["unit"].nunique()
    can = [f"Which of {n_nodes} (layer, position) residual-stream states of the {pairs.slot} move the "
           f"{pairs.metric} when taken one at a time from the corrupted prompt, to first order, over "
           f"{len(pairs.pairs)} pairs from {units} event{'s' if units != 1 else ''}"
           + (" with intervals over the events." if units >= MIN_UNITS else
              f" (no interval: {units} event{'s' if units != 1 else ''}, fewer than {MIN_UNITS}; the range of the "
              "per-event means instead).")]
    cannot = ["Where the outcome is computed: a state's effect is also carried by every later state that reads it, "
              "effects of several states do not add, and a last-layer state before the final position changes "
              "nothing by construction.",
              "A difference between cells of the suite (intergroup's δ): the map is of one prompt's metric, the "
              "clean prompt patched from the corrupted one."]
    if validated is None:
        cannot.insert(0, "Whether the first-order ranking holds for this model and these prompts: no activation "
                         "patching ran (--validate K compares them on K pairs).")
    else:
        pooled = validated[(validated["over"] == "pooled") & (validated["estimate"] == "AtP")]
        reading = "; ".join(f"{r.mode}: Spearman {r.spearman:.2f}, top-10 recovered {r.top10:.0%} over "
                            f"{r.n_nodes} nodes of {r.pairs} pairs" for r in pooled.itertuples())
        sampled = f", on the {options.validate_nodes} nodes of largest |AtP| a pair" if options.validate_nodes else ""
        can.append(f"How far AtP's ranking agrees with activation patching on the validated pairs ({reading}); "
                   f"the agreement is measured on those pairs only{sampled}.")
        cannot.insert(0, "That the estimate is right on the pairs that were not validated, or at a node where the "
                         "patch moves the state far (the slot's own tokens at the embedding, where the token itself "
                         "changes), where a first-order estimate is least trustworthy.")
    if not options.graddrop:
        cannot.append("A node whose paths cancel (AtP near 0, a real effect): AtP*'s GradDrop did not run "
                      "(--graddrop).")
    return scope(can, cannot)


class AttributionStudy(Study):
    """Attribution patching of a suite's identity slot over every (layer, position), validated by activation
    patching on a few pairs."""

    name = "attribution"
    description = ("attribution patching (AtP): a first-order estimate of every (layer, position) patch of the "
                   "suite's identity slot (intergroup: the persona) for a whole layer × position map at two forwards "
                   "and a backward a pair; --validate K compares it with activation patching on K pairs")
    Options = Options
    reruns_model = True

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        run = one_run(runs, self.name)
        kind = span_kind(run, options.kind)
        where = parse_where(options.where)
        protocol = _pairs_protocol(run, kind)
        if protocol is not None:
            if options.source is not None:
                raise ValueError(f"--source is for another slot's pairs; {kind} pairs take --mode")
            what = protocol.pairs_plan(run, suite_of(run), where, options)
        else:
            if options.positions == "system":
                raise ValueError(f"--positions system: the end of the system text is located for the suite's "
                                 f"patching protocol's slot only, not {kind!r}; expected slot or prompt")
            what = (f"{kind}: up to {options.limit_events} clean items ({where_text(where)}) and their "
                    "counterfactual slot values")
        nodes_of = f"the {options.validate_nodes} nodes of largest |AtP|" if options.validate_nodes else "every node"
        check = (f"; activation patching of {nodes_of} of {options.validate} pairs a mode (one forward row a node)"
                 if options.validate else "")
        return (f"{run.name}: {what}; AtP map over --layers {options.layers} × the positions to the "
                f"{options.positions}'s end (one corrupted forward, one clean forward and backward a pair"
                f"{', and GradDrop: L more' if options.graddrop else ''}){check}.")

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True,
                model: tuple | None = None) -> Analysis:
        run = one_run(runs, self.name)
        kind = span_kind(run, options.kind)
        where = parse_where(options.where)
        model, tokenizer, info = load_model(run, options.device, options.dtype, options.trust_remote_code, model)
        engine = Engine(model, tokenizer, options.batch_size)
        layers = _layers(options, model)
        protocol = _pairs_protocol(run, kind)
        pairs = (Pairs(*protocol.pairs(run, suite_of(run), engine, where, options, _chat_format(run, tokenizer)))
                 if protocol is not None else slot_pairs(run, engine, kind, where, options))
        sections, files, costs, mode_nodes, record = [], [], [], [], {}
        for mode in dict.fromkeys(pairs.meta["mode"]):
            index = np.flatnonzero(pairs.meta["mode"].to_numpy() == mode)
            chosen = [pairs.pairs[i] for i in index]
            if progress:
                print(f"{mode}: AtP of {len(chosen)} pairs", flush=True)
            found = atp.attribute(engine, chosen, layers, options.positions, options.graddrop)
            nodes = found.nodes.assign(pair=index[found.nodes["pair"]])
            nodes = nodes.merge(pairs.meta.rename_axis("pair").reset_index(), on="pair", how="left")
            nodes["token"] = _tokens(tokenizer, pairs.pairs, nodes)
            exact = None
            if options.validate:
                k = min(options.validate, len(chosen))
                if progress:
                    nodes_of = (f"the {options.validate_nodes} nodes of largest |AtP|" if options.validate_nodes
                                else "every node")
                    print(f"{mode}: activation patching of {nodes_of} of {k} pairs", flush=True)
                ranked = [found.nodes.loc[found.nodes["pair"] == j, "atp"].to_numpy() for j in range(k)]
                exact = atp.exact_map(engine, chosen[:k], layers, options.positions,
                                      options.validate_nodes or None, options.seed, ranked)
                keyed = exact.nodes.assign(pair=index[exact.nodes["pair"]])[["pair", "layer", "position", "exact"]]
                nodes = nodes.merge(keyed, on=["pair", "layer", "position"], how="left")
            mode_nodes.append(nodes)
            costs += cost_rows(mode, found, exact)
            summary = map_table(nodes, "atp")
            top = summary.reindex(summary["mean"].abs().sort_values(ascending=False).index).head(options.top)
            files.append(Table(f"map_{mode}", f"AtP map, mode {mode}: layer × offset", summary))
            title = f"{run.name} · {pairs.slot} · mode {mode} · {len(chosen)} pairs"
            sections.append(Section(f"AtP map: {mode}", MAP_TEXT,
                                    (Table(f"top_{mode}", f"The {len(top)} nodes of largest |mean AtP|", top,
                                           {"n_pairs": "count", "n_units": "count"}),),
                                    (Figure(f"figures/map_{mode}", f"Mean AtP, mode {mode}",
                                            heatmap(summary, f"mean AtP of {pairs.metric}\n{title}")),)))
            record[mode] = {"pairs": len(chosen), "nodes": int(found.pairs["n_nodes"].sum()),
                            "seconds_atp": round(found.seconds, 2)}
        nodes = pd.concat(mode_nodes, ignore_index=True)
        files.append(Table("nodes", "Every node of every pair", nodes))
        files.append(Table("pairs", "The pairs", pairs.meta.rename_axis("pair").reset_index()))
        agreement = None
        if options.validate:
            checked = nodes[nodes["exact"].notna()]
            agreement = agreement_rows(checked)
            cost = pd.DataFrame(costs)
            sections.append(Section(
                "AtP against activation patching", VALIDATION_TEXT,
                (Table("agreement", "Rank agreement with activation patching", agreement,
                       {"n_nodes": "count", "pairs": "count", "k_5pct": "count"}),
                 Table("agreement_by_layer", "Per layer", by_layer(checked), {"n_nodes": "count"}),
                 Table("cost", "What each method cost", cost,
                       {k: "count" for k in ("pairs", "nodes", "forwards", "prompts", "backwards")})),
                tuple(Figure(f"figures/scatter_{mode}", f"AtP against activation patching, mode {mode}",
                             scatter(part, f"{run.name} · {pairs.slot} · mode {mode}"))
                      for mode, part in checked.groupby("mode", sort=False))))
            record["agreement"] = agreement.to_dict("records")
            record["cost"] = cost.to_dict("records")
        else:
            sections.append(Section("Cost", "", (Table("cost", "What AtP cost", pd.DataFrame(costs),
                                                       {k: "count" for k in ("pairs", "nodes", "forwards", "prompts",
                                                                             "backwards")}),)))
        sections.append(_scope_section(pairs, options, nodes.groupby(["layer", "offset"]).ngroups, agreement))
        method = [f"interp.attribution on {literal(info['model'])} ({literal(info['dtype'])}, "
                  f"{literal(info['device'])}): metric {pairs.metric}; grid --layers {literal(options.layers)} × "
                  f"positions to the {options.positions}'s end, paired from the slot's end; corrupted states from "
                  f"one forward per distinct prefix, {options.batch_size} a forward."]
        record |= {"kind": kind, "slot": pairs.slot, "metric": pairs.metric, "layers": layers,
                   "positions": options.positions, "units": sorted(pairs.meta["unit"].unique().tolist())}
        return Analysis("Attribution patching: which states of the slot carry the outcome",
                        "empathy-gap interp attribution (interp.attribution; AtP, Nanda 2023; AtP*, Kramár et al. "
                        "2024)", sections, method, files, record=record | {"model": info})


STUDY = AttributionStudy()
