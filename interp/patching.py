"""Activation patching of the persona: score a target prompt (perceiver B, experiencer X, event e) while its residual
stream at chosen layers and positions is replaced by values taken from a source prompt (perceiver A, same X and e).

Hook points have TransformerLens's names (activations.capture): layer ``l`` is ``blocks.{l}.hook_resid_post``, the
output of decoder layer ``l``; layer ``EMBED`` (-1) is ``hook_embed``, the token embedding's output (the residual
stream before block 0). A patch at layer ``l`` overwrites that layer's output, so layers ``l + 1`` onwards read the
source's values there; tokens after the patched positions have already read the target's values at layers <= l.

Position alignment (each target position receives one source position, or the mean of several), per group:

- ``persona_end`` (n): the last ``n`` tokens of the two persona spans, paired from the spans' ends
  (``activations.spans.align_from_end``); ``n=None`` pairs as many as the shorter span has. The first tokens of a
  longer target persona keep the target's values ("a person from Iran" <- "a person": " from Iran" <- " a person").
- ``persona_mean``: every target persona position receives the mean of the source persona span's values (per layer).
- ``system``: the block from the persona's first token to the last token of the system text (the system message, or
  the system part of the user message where the chat template folds it there), paired from the blocks' ends, as many
  as the shorter block has. The text after the persona is the same in both prompts, so those pairs are the same
  tokens; what is left over is the start of the longer persona, treated as in ``persona_end``.
- ``all``: every prompt position ``i`` <- ``i``; source and target must have the same length (the sanity check:
  with every layer and ``EMBED`` patched, the target's scores become the source's).

Only prompt positions are ever patched: the answer-trie tokens that score mode appends read the patched prompt
through attention. The target runs through ``Engine.score`` with ``engine.intervention`` set and
``engine.share_prefix = False`` (every prompt token in the forward), both restored afterwards. Batch rows are matched
to the plan by order (prompts go to the engine sorted by length, which its stable length sort keeps); every batch's
token ids are checked against the plan, so a change in the engine's ordering fails loudly instead of misattributing.

Cost: source values come from one forward per distinct source prefix (cut after the last position any patch reads;
causal attention makes it exact), all layers captured at once, same-length prefixes batched: every source with the
same persona and setting shares one prefix, so patching from "a person" costs one source forward in all. Every clean
target, clean source and patched (target, layer, group) prompt then goes through ONE ``Engine.score`` call,
``batch_size`` rows per forward (source values are looked up per batch, never held for all prompts). A one-group
layer sweep of N prompts over L layers therefore costs at most N + ceil(N (L + 2) / batch_size) forwards: at most
(L + 1) N whenever batch_size >= 3.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from activations.capture import _hidden, decoder_layers, embedding, hook_names, resid_post
from activations.spans import SpanError, TokenSpan, align_from_end, token_spans
from behavioral import chat, prompts as prompt_lib
from behavioral.answer_space import AnswerTrie, Scores
from behavioral.suites.intergroup.corpus import Event
from behavioral.suites.intergroup.groups import UNSPECIFIED, Category, get_category
from behavioral.suites.intergroup.settings import get_setting
from behavioral.suites.intergroup.stats import empathy_gap, permutation_test, zscore

EMBED = -1  # the layer index of hook_embed
GROUPS = ("persona_end", "persona_mean", "system", "all")
DEFAULT_GROUPS = ("persona_end:1", "persona_end", "persona_mean", "system")
MODES = ("person", "swap")
SYSTEM = "system"


class PatchError(ValueError):
    """A patch that cannot be applied as asked."""


# --- what to patch ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PatchSpec:
    """Layers to patch (``EMBED`` = -1 for hook_embed) and the position group; ``n`` is for ``persona_end`` only."""

    layers: tuple[int, ...] = ()
    positions: str = "persona_end"
    n: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "layers", tuple(sorted({int(layer) for layer in self.layers})))
        if self.positions not in GROUPS:
            raise PatchError(f"unknown position group {self.positions!r}; expected one of {', '.join(GROUPS)}")
        if self.n is not None and (self.positions != "persona_end" or self.n < 1):
            raise PatchError(f"n={self.n} is only for persona_end and must be at least 1")
        if any(layer < EMBED for layer in self.layers):
            raise PatchError(f"layers {self.layers}: expected block indices >= 0, or {EMBED} for hook_embed")

    @property
    def label(self) -> str:
        """The position group as written in tables: ``persona_end:1``, ``persona_end``, ``persona_mean``, ..."""
        return self.positions if self.n is None else f"{self.positions}:{self.n}"

    @classmethod
    def parse(cls, group: str, layers: Iterable[int] = ()) -> "PatchSpec":
        """A spec from a group label such as ``persona_end:2`` or ``system``."""
        name, _, n = group.partition(":")
        try:
            return cls(tuple(layers), name, int(n) if n else None)
        except ValueError as err:
            raise PatchError(f"bad position group {group!r}: {err}") from None


# --- prompts with the spans patching needs -----------------------------------------------------------------------

@dataclass(frozen=True)
class PatchPrompt:
    """Token ids of one rendered prompt and its spans: persona, experiencer, final, and system (persona start to the
    last token of the system text)."""

    ids: tuple[int, ...]
    spans: Mapping[str, TokenSpan] = field(compare=False)

    def __len__(self) -> int:
        return len(self.ids)


def chat_format_of(tokenizer) -> str:
    """The chat format the suite uses with this tokenizer (``system`` or ``system-in-user``)."""
    probe = prompt_lib.build("P0S0T0", UNSPECIFIED, UNSPECIFIED, "joy", "I won.")
    return chat.detect_format(tokenizer, probe)


def encode(tokenizer, prompt: prompt_lib.Prompt, chat_format: str | None = None) -> PatchPrompt:
    """Render and tokenize `prompt` as the suite does, with its persona, experiencer, final and system spans."""
    chat_format = chat_format or chat_format_of(tokenizer)
    text, rendered = chat.render(tokenizer, prompt, chat_format)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    spans = dict(token_spans(tokenizer, text, rendered, ids))
    # The system text is message 0 of the original prompt; in the folded format it opens message 0's content.
    at = text.find(rendered.messages[0]["content"])
    end = at + len(prompt.messages[0]["content"])
    inside = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a < end]
    persona = spans["persona"]
    if at < 0 or not inside or inside[-1] < persona.last:
        raise SpanError("cannot locate the end of the system text after the persona in the rendered prompt")
    spans[SYSTEM] = TokenSpan(SYSTEM, persona.start, inside[-1] + 1)
    return PatchPrompt(tuple(ids), spans)


def build(tokenizer, setting: str, perceiver: str, experiencer: str, event: Event,
          chat_format: str | None = None) -> PatchPrompt:
    """The suite's prompt for (setting, perceiver, experiencer, event), encoded for patching."""
    narrative = event.narrative(get_setting(setting).narrative_form)
    return encode(tokenizer, prompt_lib.build(setting, perceiver, experiencer, event.emotion, narrative), chat_format)


def _as_patch_prompts(tokenizer, items: Sequence, chat_format: str | None) -> list[PatchPrompt]:
    if any(not isinstance(p, PatchPrompt) for p in items):
        chat_format = chat_format or chat_format_of(tokenizer)
    return [p if isinstance(p, PatchPrompt) else encode(tokenizer, p, chat_format) for p in items]


# --- alignment ----------------------------------------------------------------------------------------------------

def align(spec: PatchSpec, source: PatchPrompt, target: PatchPrompt) -> list[tuple[int, tuple[int, ...]]]:
    """(target position, source positions whose mean it receives) pairs, by the rules in the module docstring."""
    if spec.positions == "persona_end":
        pairs = align_from_end(source.spans["persona"], target.spans["persona"], spec.n)
        return [(t, (s,)) for s, t in reversed(pairs)]
    if spec.positions == "persona_mean":
        src, tgt = source.spans["persona"], target.spans["persona"]
        return [(t, tuple(range(src.start, src.end))) for t in range(tgt.start, tgt.end)]
    if spec.positions == SYSTEM:
        pairs = align_from_end(source.spans[SYSTEM], target.spans[SYSTEM])
        return [(t, (s,)) for s, t in reversed(pairs)]
    if len(source) != len(target):
        raise PatchError(f"position group 'all' needs prompts of equal length, got {len(source)} (source) and "
                         f"{len(target)} (target) tokens")
    return [(i, (i,)) for i in range(len(target))]


# --- source activations -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceStates:
    """Residual-stream values of source prompts: ``states[i]`` is [len(layers), T_i, d] in ``layers`` order
    (``EMBED`` first), T_i the prompt's length or the prefix kept."""

    layers: tuple[int, ...]
    names: tuple[str, ...]
    states: tuple[torch.Tensor, ...]

    def __len__(self) -> int:
        return len(self.states)

    def get(self, i: int, layer: int) -> torch.Tensor:
        """[T_i, d] of prompt `i` at `layer`."""
        try:
            return self.states[i][self.layers.index(layer)]
        except ValueError:
            raise PatchError(f"layer {layer} was not captured; captured layers are {self.layers}") from None


def source_states(model, prompts: Sequence[Sequence[int]], layers: Iterable[int],
                  upto: Sequence[int | None] | None = None, batch_size: int = 16) -> SourceStates:
    """hook_embed and blocks.{l}.hook_resid_post of every prompt: one forward per distinct prompt (all layers at once,
    same-length prompts batched), keeping the first ``upto[i]`` positions of prompt i (None: all)."""
    blocks = [layer for layer in sorted(set(layers)) if layer != EMBED]
    names = tuple(hook_names(len(decoder_layers(model)), blocks))
    cut = [tuple(p[:u] if u else p) for p, u in zip(prompts, upto or [None] * len(prompts))]
    unique = list(dict.fromkeys(cut))
    by_length: dict[int, list[tuple[int, ...]]] = {}
    for ids in unique:
        by_length.setdefault(len(ids), []).append(ids)
    device = next(model.parameters()).device
    done: dict[tuple[int, ...], torch.Tensor] = {}
    for group in by_length.values():
        for k in range(0, len(group), batch_size):
            chunk = group[k:k + batch_size]
            stacked = resid_post(model, torch.tensor(chunk, device=device), layers=blocks)  # [H, b, T, d]
            for j, ids in enumerate(chunk):
                done[ids] = stacked[:, j]
    return SourceStates((EMBED, *blocks), names, tuple(done[ids] for ids in cut))


# --- answer log-probabilities -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PatchScores(Scores):
    """Scores plus the log-probability of every answer (path tokens and the number ending there), in ``values``
    order; ``answer_logp[values.index(greedy)]`` is the greedy answer's."""

    values: tuple[int, ...] = ()
    answer_logp: tuple[float, ...] = ()

    def logp(self, answer: int) -> float:
        """The model's log-probability of writing `answer` (and ending the number there)."""
        return self.answer_logp[self.values.index(answer)]


def answer_logprobs(trie: AnswerTrie, logits: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """(answer values, [B, A] float64 log-probabilities) from tree logits [B, 1 + T, V] (AnswerTrie.answer_logprobs)."""
    return trie.answer_logprobs(logits)


@dataclass(frozen=True)
class _LogProbTrie(AnswerTrie):
    """The same trie, whose ``read`` also returns every answer's log-probability (PatchScores)."""

    def read(self, logits: torch.Tensor) -> list[PatchScores]:
        values, logp = answer_logprobs(self, logits)
        rows = logp.cpu().tolist()
        return [PatchScores(**{f.name: getattr(s, f.name) for f in fields(Scores)}, values=tuple(values),
                            answer_logp=tuple(r)) for s, r in zip(super().read(logits), rows)]


def _logprob_trie(trie: AnswerTrie) -> _LogProbTrie:
    if isinstance(trie, _LogProbTrie):
        return trie
    return _LogProbTrie(**{f.name: getattr(trie, f.name) for f in fields(AnswerTrie)})


# --- the patched forward ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Row:
    """One prompt of the engine call: its ids and its patches (layer, aligned pairs, slot of the source in the cache);
    the values are looked up per batch, so only one batch's worth exists at a time."""

    ids: tuple[int, ...]
    patches: tuple[tuple[int, tuple[tuple[int, tuple[int, ...]], ...], int], ...] = ()


class _Patcher:
    """engine.intervention for one engine call: rows arrive in the order given (sorted by length, which the engine's
    stable length sort keeps), so each batch takes the next rows; a batch that raises (CUDA OOM, retried in halves)
    does not advance. Every row's ids are checked against the batch."""

    def __init__(self, model, rows: Sequence[_Row], cache: SourceStates):
        self.rows = rows
        self.cache = cache
        self.offset = 0
        self.blocks = decoder_layers(model)
        self.embed = embedding(model)

    def module(self, layer: int):
        return self.embed if layer == EMBED else self.blocks[layer]

    @contextlib.contextmanager
    def __call__(self, batch):
        n = batch.ids.shape[0]
        rows = self.rows[self.offset:self.offset + n]
        ids = batch.ids.cpu()
        mask = batch.mask.cpu()
        if len(rows) != n or any(ids[b][mask[b]].tolist() != list(row.ids) for b, row in enumerate(rows)):
            raise PatchError("engine batch rows differ from the patch plan: expected the engine to keep the order of "
                             "length-sorted prompts and to put every prompt token in the forward (share_prefix off)")
        # col[b, p]: the column of the forward holding position p of row b's prompt (-1: not in this forward).
        r, j = batch.mask.nonzero(as_tuple=True)
        col = torch.full((n, int(batch.positions.max()) + 1), -1, dtype=torch.long, device=batch.ids.device)
        col[r, batch.positions[r, j]] = j
        edits: dict[int, tuple[list, list, list]] = {}
        for b, row in enumerate(rows):
            for layer, pairs, slot in row.patches:
                cols = col[b, torch.tensor([t for t, _ in pairs], device=col.device)]
                values = _values(self.cache.get(slot, layer), pairs)
                if bool((cols < 0).any()):
                    raise PatchError("a patched position is not in the batch's first forward (share_prefix on?)")
                rs, cs, vs = edits.setdefault(layer, ([], [], []))
                rs.append(torch.full_like(cols, b))
                cs.append(cols)
                vs.append(values)
        handles = []
        try:
            for layer, (rs, cs, vs) in edits.items():
                handles.append(self.module(layer).register_forward_hook(
                    _replacer(torch.cat(rs), torch.cat(cs), torch.cat(vs))))
            yield
        finally:
            for h in handles:
                h.remove()
        self.offset += n  # only reached when the forward did not raise


def _replacer(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor):
    def hook(module, args, output):
        hidden = _hidden(output).clone()
        hidden[rows, cols] = values.to(hidden.dtype)
        if isinstance(output, torch.Tensor):
            return hidden
        if isinstance(output, tuple):
            return (hidden, *output[1:])
        raise PatchError(f"cannot patch a module output of type {type(output).__name__}")
    return hook


def _values(states: torch.Tensor, pairs: Sequence[tuple[int, tuple[int, ...]]]) -> torch.Tensor:
    """[n, d]: for each pair, the source state (or mean of states) it receives; states [T, d]."""
    if all(len(s) == 1 for _, s in pairs):
        return states[torch.tensor([s[0] for _, s in pairs], device=states.device)]
    return torch.stack([states[list(s)].float().mean(0) for _, s in pairs]).to(states.dtype)


@dataclass(frozen=True)
class Job:
    """Score prompt `target` of a list, patched from prompt `source` by `spec`; spec None (or no layers): clean."""

    target: int
    source: int | None = None
    spec: PatchSpec | None = None


@contextlib.contextmanager
def _patching(engine, patcher: _Patcher):
    saved = engine.intervention, engine.share_prefix
    engine.intervention, engine.share_prefix = patcher, False
    try:
        yield
    finally:
        engine.intervention, engine.share_prefix = saved


def run_jobs(engine, prompts: Sequence[PatchPrompt], jobs: Sequence[Job], trie: AnswerTrie) -> list[PatchScores]:
    """Scores of every job: source states captured once per distinct source prefix, then one engine.score call."""
    jobs = list(jobs)
    patched = [k for k, job in enumerate(jobs) if job.spec is not None and job.spec.layers]
    pairs: dict[int, list] = {}
    upto: dict[int, int] = {}
    layers: set[int] = set()
    for k in patched:
        job = jobs[k]
        if job.source is None:
            raise PatchError(f"job {k} patches layers {job.spec.layers} but names no source prompt")
        p = tuple(align(job.spec, prompts[job.source], prompts[job.target]))
        pairs[k] = p
        upto[job.source] = max(upto.get(job.source, 0), max(s for _, ss in p for s in ss) + 1)
        layers.update(job.spec.layers)
    n_layers = len(decoder_layers(engine.model))
    if any(layer >= n_layers for layer in layers):
        raise PatchError(f"layers {sorted(layers)} out of range: the model has {n_layers} decoder layers")
    sources = sorted(upto)
    cache = source_states(engine.model, [prompts[s].ids for s in sources], layers, [upto[s] for s in sources],
                          engine.batch_size)
    where = {s: i for i, s in enumerate(sources)}
    rows = []
    for k, job in enumerate(jobs):
        patches = tuple((layer, pairs[k], where[job.source]) for layer in job.spec.layers) if k in pairs else ()
        rows.append(_Row(prompts[job.target].ids, patches))
    order = sorted(range(len(rows)), key=lambda k: len(rows[k].ids))
    patcher = _Patcher(engine.model, [rows[k] for k in order], cache)
    with _patching(engine, patcher):
        scores = engine.score([list(rows[k].ids) for k in order], _logprob_trie(trie))
    out: list = [None] * len(rows)
    for k, s in zip(order, scores):
        out[k] = s
    return out


def patched_scores(engine, targets: Sequence, sources: Sequence, spec: PatchSpec | Sequence[PatchSpec],
                   trie: AnswerTrie, chat_format: str | None = None) -> list[PatchScores]:
    """Scores of each target patched from the source at the same index: one spec for all, or one per target.
    Targets and sources are PatchPrompts or behavioral.suites.intergroup.prompts.Prompt objects (rendered in `chat_format`)."""
    if len(targets) != len(sources):
        raise PatchError(f"{len(targets)} targets but {len(sources)} sources; expected one source per target")
    specs = [spec] * len(targets) if isinstance(spec, PatchSpec) else list(spec)
    if len(specs) != len(targets):
        raise PatchError(f"{len(specs)} specs for {len(targets)} targets; expected one spec, or one per target")
    items = _as_patch_prompts(engine.tokenizer, [*targets, *sources], chat_format)
    n = len(targets)
    return run_jobs(engine, items, [Job(i, n + i, s) for i, s in enumerate(specs)], trie)


# --- sweeps -------------------------------------------------------------------------------------------------------

METRICS = ("expected", "expected_clean", "expected_source", "delta_expected", "greedy_clean", "greedy",
           "logp_greedy_clean", "logp_greedy", "delta_logp_greedy", "frac_closed", "numeric_mass")
SWEEP_COLUMNS = ("prompt", "layer", "positions", *METRICS)  # evaluate adds "layers" and the meta columns


def _unique(prompts: Sequence[PatchPrompt]) -> tuple[list[PatchPrompt], list[int]]:
    """Distinct prompts (by ids) and the index of each input among them."""
    first: dict[tuple[int, ...], PatchPrompt] = {}
    for p in prompts:
        first.setdefault(p.ids, p)
    index = {ids: i for i, ids in enumerate(first)}
    return list(first.values()), [index[p.ids] for p in prompts]


def _metrics(clean: PatchScores, patched: PatchScores, source: PatchScores | None) -> dict:
    gap = (source.expected - clean.expected) if source is not None else math.nan
    delta = patched.expected - clean.expected
    lp_clean = clean.logp(clean.greedy)
    lp = patched.logp(clean.greedy)
    return {
        "expected": patched.expected, "expected_clean": clean.expected,
        "expected_source": source.expected if source is not None else math.nan, "delta_expected": delta,
        "greedy_clean": clean.greedy, "greedy": patched.greedy, "logp_greedy_clean": lp_clean, "logp_greedy": lp,
        "delta_logp_greedy": lp - lp_clean, "frac_closed": delta / gap if abs(gap) > 1e-9 else math.nan,
        "numeric_mass": patched.numeric_mass,
    }


def evaluate(engine, targets: Sequence, sources: Sequence, specs: Sequence[Sequence[PatchSpec]], trie: AnswerTrie,
             meta: Sequence[Mapping] | None = None, chat_format: str | None = None) -> pd.DataFrame:
    """One row per (target i, spec in specs[i]) patched from sources[i]: prompt, layer (the deepest patched layer),
    layers (all of them, comma-separated), positions, meta[i]'s columns, then the metrics (see `sweep`). Clean targets
    and clean sources are scored in the same engine call as the patched ones."""
    if not len(targets) == len(sources) == len(specs):
        raise PatchError(f"{len(targets)} targets, {len(sources)} sources and {len(specs)} spec lists; expected "
                         "one source and one list of specs per target")
    items = _as_patch_prompts(engine.tokenizer, [*targets, *sources], chat_format)
    distinct, idx = _unique(items)
    n = len(targets)
    clean_jobs = sorted(set(idx))
    jobs = [Job(i) for i in clean_jobs]
    wanted = [(i, spec) for i in range(n) for spec in specs[i]]
    jobs += [Job(idx[i], idx[n + i], spec) for i, spec in wanted]
    scores = run_jobs(engine, distinct, jobs, trie)
    clean = dict(zip(clean_jobs, scores[:len(clean_jobs)]))
    rows = []
    for (i, spec), s in zip(wanted, scores[len(clean_jobs):]):
        row = {"prompt": i, "layer": spec.layers[-1] if spec.layers else None,
               "layers": ",".join(map(str, spec.layers)), "positions": spec.label}
        row |= dict(meta[i]) if meta is not None else {}
        row |= _metrics(clean[idx[i]], s, clean[idx[n + i]])
        rows.append(row)
    extra = [k for k in (meta[0] if meta else {}) if k not in SWEEP_COLUMNS]
    return pd.DataFrame(rows, columns=[*SWEEP_COLUMNS[:3], "layers", *extra, *SWEEP_COLUMNS[3:]])


def sweep(engine, targets: Sequence, sources: Sequence, layers: Iterable[int], trie: AnswerTrie,
          groups: Sequence[str] = DEFAULT_GROUPS, meta: Sequence[Mapping] | None = None,
          chat_format: str | None = None) -> pd.DataFrame:
    """Layer × position-group sweep: each target patched from its source at ONE layer and one group at a time.

    Columns (SWEEP_COLUMNS, then meta's): prompt (index into targets), layer, positions (group label), expected
    (patched expected intensity), expected_clean, expected_source (both unpatched), delta_expected, greedy_clean
    (the target's unpatched greedy answer), greedy (patched), logp_greedy_clean / logp_greedy (log-probability of
    greedy_clean's token path, its end included, before / after patching), delta_logp_greedy, frac_closed
    (delta_expected / (expected_source - expected_clean): the fraction of the source-target difference closed,
    e.g. the in-group/out-group difference when the target is an in-group prompt and the source an out-group one;
    NaN where that difference is below 1e-9), numeric_mass (patched).
    """
    specs = [PatchSpec.parse(g, (layer,)) for layer in layers for g in groups]
    return evaluate(engine, targets, sources, [specs] * len(targets), trie, meta, chat_format)


def summarize(frame: pd.DataFrame, by: Sequence[str] = ("layer", "positions")) -> pd.DataFrame:
    """Per group: mean delta_expected and delta_logp_greedy, frac_closed as a ratio of sums (sum of deltas over the
    sum of source-target differences, stable where single differences are near zero), and n."""
    gap = frame["expected_source"] - frame["expected_clean"]
    work = frame.assign(_gap=gap)
    out = work.groupby(list(by), sort=False).agg(
        delta_expected=("delta_expected", "mean"), delta_logp_greedy=("delta_logp_greedy", "mean"),
        _delta_sum=("delta_expected", "sum"), _gap_sum=("_gap", "sum"), n=("delta_expected", "size"),
    ).reset_index()
    ok = out["_gap_sum"].abs() > 1e-9
    out["frac_closed"] = (out["_delta_sum"] / out["_gap_sum"].where(ok)).where(ok)
    return out.drop(columns=["_delta_sum", "_gap_sum"])


# --- the headline: which layers carry the gap ---------------------------------------------------------------------

GAP_COLUMNS = ("mode", "layer", "positions", "delta_unpatched", "delta_patched", "delta_change", "delta_removed",
               "p_unpatched", "p_patched", "null_ci_low", "null_ci_high", "gap_raw_unpatched", "gap_raw_patched",
               "mean_expected", "mean_delta_expected", "n_prompts")
N_PERMUTATIONS = 2000


def swap_source(category: Category, perceiver: str, experiencer: str) -> str:
    """The persona swapped in for cell (perceiver, experiencer): the experiencer itself (in-group) where the cell is
    out-group; where it is in-group, the first identity after the perceiver (cyclically, in Table 1 order) outside
    the experiencer's group."""
    group = category.group_of
    if group[perceiver] != group[experiencer]:
        return experiencer
    names = category.identities
    start = names.index(perceiver)
    for k in range(1, len(names) + 1):
        other = names[(start + k) % len(names)]
        if group[other] != group[experiencer]:
            return other
    raise PatchError(f"category {category.name!r} has a single group: no out-group persona to swap in")


def patched_gap_prompts(engine, category: str | Category, setting: str, events: Sequence[Event],
                        layers: Iterable[int], positions: str = SYSTEM, modes: Sequence[str] = MODES,
                        chat_format: str | None = None) -> pd.DataFrame:
    """Per-prompt rows of the headline experiment, for every perceiver × experiencer (no "a person") × event:
    mode ``person`` patches the persona with "a person" (same experiencer and event), mode ``swap`` with
    ``swap_source`` (in-group <-> out-group), at each layer alone, position group `positions`.
    Columns: mode, perceiver, experiencer, event_id, source_perceiver and the sweep columns."""
    category = get_category(category) if isinstance(category, str) else category
    for mode in modes:
        if mode not in MODES:
            raise PatchError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    chat_format = chat_format or chat_format_of(engine.tokenizer)
    layers = list(layers)
    targets, sources, specs, meta = [], [], [], []
    for mode in modes:
        for p in category.identities:
            for x in category.identities:
                a = UNSPECIFIED if mode == "person" else swap_source(category, p, x)
                for e in events:
                    targets.append(build(engine.tokenizer, setting, p, x, e, chat_format))
                    sources.append(build(engine.tokenizer, setting, a, x, e, chat_format))
                    specs.append([PatchSpec.parse(positions, (layer,)) for layer in layers])
                    meta.append({"mode": mode, "perceiver": p, "experiencer": x, "event_id": e.event_id,
                                 "source_perceiver": a})
    return evaluate(engine, targets, sources, specs, get_trie(engine.tokenizer, setting), meta, chat_format)


_TRIES: dict = {}


def get_trie(tokenizer, setting: str) -> AnswerTrie:
    """The answer trie of `setting`'s scale for `tokenizer` (cached)."""
    key = (id(tokenizer), get_setting(setting).max_rating)
    if key not in _TRIES:
        _TRIES[key] = (tokenizer, AnswerTrie.for_scale(tokenizer, key[1]))
    return _TRIES[key][1]


def _matrix(frame: pd.DataFrame, category: Category, column: str) -> np.ndarray:
    """M0[p, x]: mean of `column` over events, perceivers and experiencers without "a person" (Table 1 order)."""
    names = list(category.identities)
    M0 = frame.pivot_table(index="perceiver", columns="experiencer", values=column, aggfunc="mean")
    return M0.reindex(index=names, columns=names).to_numpy(dtype=float)


def _gap_stats(M0: np.ndarray, same: np.ndarray) -> tuple[float, float, float, float, float]:
    """δ (z-scored), its one-sided permutation p and null 95% interval, and the raw in-group minus out-group
    difference of M0 in intensity points; NaN where undefined (all cells equal, a cell missing)."""
    raw = float(M0[same].mean() - M0[~same].mean()) if np.isfinite(M0).all() else math.nan
    try:
        M = zscore(M0)
    except ValueError:
        return math.nan, math.nan, math.nan, math.nan, raw
    test = permutation_test(M, same, N_PERMUTATIONS, seed=0)
    return empathy_gap(M, same), test.p_value, test.ci_low, test.ci_high, raw


def gap_table(frame: pd.DataFrame, category: str | Category) -> pd.DataFrame:
    """δ per (mode, layer) from patched_gap_prompts rows: M0[p, x] = mean expected intensity over events, z-scored
    without "a person" (behavioral.suites.intergroup.stats), δ_patched from the patched matrix beside δ_unpatched from the clean one.

    delta_removed = 1 - δ_patched / δ_unpatched (1: the gap is gone, 2: reversed); p_unpatched / p_patched: one-sided
    permutation p-values (rows and columns permuted, N_PERMUTATIONS, seed 0) of each δ; null_ci_low/high: the 95%
    interval of the unpatched matrix's permutation null (δ values that arise with no in/out-group structure);
    gap_raw_*: mean in-group minus mean out-group cell of M0 in intensity points (not z-scored, so not inflated when
    patching shrinks the matrix's spread)."""
    category = get_category(category) if isinstance(category, str) else category
    same = category.in_group()
    rows = []
    for (mode, layer, positions), part in frame.groupby(["mode", "layer", "positions"], sort=False):
        d0, p0, lo, hi, r0 = _gap_stats(_matrix(part, category, "expected_clean"), same)
        d1, p1, _, _, r1 = _gap_stats(_matrix(part, category, "expected"), same)
        rows.append({"mode": mode, "layer": layer, "positions": positions, "delta_unpatched": d0,
                     "delta_patched": d1, "delta_change": d1 - d0,
                     "delta_removed": 1 - d1 / d0 if d0 else math.nan, "p_unpatched": p0, "p_patched": p1,
                     "null_ci_low": lo, "null_ci_high": hi, "gap_raw_unpatched": r0, "gap_raw_patched": r1,
                     "mean_expected": part["expected"].mean(), "mean_delta_expected": part["delta_expected"].mean(),
                     "n_prompts": len(part)})
    return pd.DataFrame(rows, columns=list(GAP_COLUMNS))


def patched_gap(engine, category: str | Category, setting: str, events: Sequence[Event], layers: Iterable[int],
                positions: str = SYSTEM, modes: Sequence[str] = MODES, chat_format: str | None = None) -> pd.DataFrame:
    """The headline: for each layer, patch every perceiver's persona with "a person" (and, separately, swap in-group
    and out-group personas), rebuild M0 and recompute δ. Columns GAP_COLUMNS: one row per (mode, layer)."""
    frame = patched_gap_prompts(engine, category, setting, events, layers, positions, modes, chat_format)
    return gap_table(frame, category)


# --- figures ------------------------------------------------------------------------------------------------------

def _layer_label(layer) -> str:
    return "embed" if layer == EMBED else str(layer)


def plot_heatmap(summary: pd.DataFrame, out_dir: str | Path, stem: str = "patching_heatmap",
                 value: str = "frac_closed", title: str | None = None) -> list[Path]:
    """Layer (rows) × position group (columns) heatmap of `value` from `summarize`; saved as PNG and PDF."""
    from matplotlib.figure import Figure

    from behavioral.suites.intergroup.figures import save_figure

    grid = summary.pivot_table(index="layer", columns="positions", values=value, aggfunc="mean", sort=False)
    grid = grid.reindex(columns=list(dict.fromkeys(summary["positions"])))
    grid = grid.sort_index()
    fig = Figure(figsize=(2.4 + 1.1 * grid.shape[1], 2.2 + 0.3 * grid.shape[0]))
    ax = fig.add_subplot()
    data = grid.to_numpy(dtype=float)
    finite = np.abs(data[np.isfinite(data)])
    lim = float(finite.max()) if finite.size else 1.0
    im = ax.imshow(data, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=30, ha="right")
    ax.set_yticks(range(grid.shape[0]), [_layer_label(v) for v in grid.index])
    ax.set_xlabel("position group")
    ax.set_ylabel("layer")
    if grid.shape[0] * grid.shape[1] <= 200:
        for (i, j), v in np.ndenumerate(data):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(im, ax=ax, label=value)
    ax.set_title(title or f"patching: {value}")
    fig.tight_layout()
    return save_figure(fig, Path(out_dir), stem)


def plot_gap_by_layer(table: pd.DataFrame, out_dir: str | Path, stem: str = "delta_by_layer",
                      title: str | None = None) -> list[Path]:
    """δ_patched against layer, one line per mode, with δ_unpatched dashed; saved as PNG and PDF."""
    from matplotlib.figure import Figure

    from behavioral.suites.intergroup.figures import save_figure

    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    labels = {"person": 'persona ← "a person"', "swap": "in-group ↔ out-group persona"}
    for mode, part in table.groupby("mode", sort=False):
        part = part.sort_values("layer")
        ax.plot(part["layer"], part["delta_patched"], marker="o", label=labels.get(mode, mode))
    if len(table):
        first = table.iloc[0]
        ax.axhline(float(first["delta_unpatched"]), color="k", ls="--", lw=1, label="δ unpatched")
        if np.isfinite(first["null_ci_low"]):
            ax.axhspan(float(first["null_ci_low"]), float(first["null_ci_high"]), color="grey", alpha=0.15,
                       label="95% permutation null (unpatched)")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("patched layer (resid_post)")
    ax.set_ylabel("δ (patched matrix)")
    ax.legend(fontsize=8)
    ax.set_title(title or "empathy gap δ after patching the persona at one layer")
    fig.tight_layout()
    return save_figure(fig, Path(out_dir), stem)


__all__ = [
    "EMBED", "GROUPS", "MODES", "PatchError", "PatchPrompt", "PatchScores", "PatchSpec", "SourceStates", "Job",
    "align", "answer_logprobs", "build", "chat_format_of", "encode", "evaluate", "gap_table", "get_trie",
    "patched_gap", "patched_gap_prompts", "patched_scores", "plot_gap_by_layer", "plot_heatmap", "run_jobs",
    "source_states", "summarize", "swap_source", "sweep",
]
