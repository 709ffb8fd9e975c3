"""The patched forward: score target prompts while ResidualHooks overwrite chosen positions with source values.

Only prompt positions are ever patched: the answer-trie tokens that score mode appends read the patched prompt through
attention. The targets run through ``Engine.score`` inside ``engine.hooked(intervention=..., share_prefix=False)``
(every prompt token in the forward; the whole answer tree read, as every answer's log-probability is reported; the
engine's earlier settings come back afterwards). Batch rows are matched to the
plan by order (prompts go to the engine sorted by length, which its stable length sort keeps); every batch's token ids
are checked against the plan, so a change in the engine's ordering fails loudly instead of misattributing.

Cost: source values come from one forward per distinct source prefix (``interp.patching.sources``). Every job (clean
targets, clean sources, patched prompts) then goes through ONE ``Engine.score`` call, ``batch_size`` rows per forward
(source values are looked up per batch, never held for all prompts). A one-group layer sweep of N prompts over L
layers therefore costs at most N + ceil(N (L + 2) / batch_size) forwards: at most (L + 1) N whenever batch_size >= 3.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import torch

from activations.capture import ResidualHooks, n_layers_of, table_layer
from behavioral.inference.answer_space import AnswerTrie, Scores
from behavioral.inference.lazy_tree import AnswerTree
from behavioral.runner.progress import ForwardBar
from interp.patching.sources import SourceStates, prefix_batches, prefixes, source_states
from interp.patching.spec import PatchError, PatchPrompt, PatchSpec, align

Pairs = tuple[tuple[int, tuple[int, ...]], ...]  # (target position, source positions) as `align` gives them


@dataclass(frozen=True)
class PatchScores(Scores):
    """Scores plus the log-probability of every answer (path tokens and the number ending there), in ``values``
    order; ``answer_logp[values.index(greedy)]`` is the greedy answer's."""

    values: tuple = ()
    answer_logp: tuple[float, ...] = ()

    def logp(self, answer) -> float:
        """The model's log-probability of writing `answer` (and ending it there)."""
        return self.answer_logp[self.values.index(answer)]


@dataclass(frozen=True)
class _LogProbTrie(AnswerTrie):
    """The same trie, whose ``read`` also returns every answer's log-probability (PatchScores)."""

    def read(self, logits: torch.Tensor) -> list[PatchScores]:
        values, logp = self.answer_logprobs(logits)
        rows = logp.cpu().tolist()
        return [PatchScores(**{f.name: getattr(s, f.name) for f in fields(Scores)}, values=tuple(values),
                            answer_logp=tuple(r)) for s, r in zip(super().read(logits), rows)]


def _logprob_trie(trie: AnswerTrie) -> _LogProbTrie:
    if isinstance(trie, _LogProbTrie):
        return trie
    return _LogProbTrie(**{f.name: getattr(trie, f.name) for f in fields(AnswerTrie)})


@dataclass(frozen=True)
class Job:
    """Score prompt `target` of a list, patched from prompt `source` by `spec`; spec None (or no layers): clean."""

    target: int
    source: int | None = None
    spec: PatchSpec | None = None


@dataclass(frozen=True)
class _Row:
    """One prompt of the engine call: its ids and its patches (hook name, aligned pairs, slot of the source in the
    cache); the values are looked up per batch, so only one batch's worth exists at a time."""

    ids: tuple[int, ...]
    patches: tuple[tuple[str, Pairs, int], ...] = ()


def _values(states: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """[n, d]: for each pair, the source state (or mean of states) it receives; states [T, d]."""
    if all(len(s) == 1 for _, s in pairs):
        return states[torch.tensor([s[0] for _, s in pairs], device=states.device)]
    return torch.stack([states[list(s)].float().mean(0) for _, s in pairs]).to(states.dtype)


class _Patcher:
    """The engine intervention of one engine call: rows arrive in the order given (sorted by length, which the
    engine's stable length sort keeps), so each batch takes the next rows; a batch that raises (CUDA OOM, retried in
    halves) does not advance. Every row's ids are checked against the batch."""

    def __init__(self, model, rows: Sequence[_Row], cache: SourceStates, on_forward: Callable[[], None]):
        self.model, self.rows, self.cache, self.on_forward = model, rows, cache, on_forward
        self.offset = 0

    def _edits(self, batch, rows: Sequence[_Row]) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per hook name: (batch rows, forward columns, values) to write."""
        # col[b, p]: the column of the forward holding position p of row b's prompt (-1: not in this forward).
        r, j = batch.mask.nonzero(as_tuple=True)
        col = torch.full((len(rows), int(batch.positions.max()) + 1), -1, dtype=torch.long, device=batch.ids.device)
        col[r, batch.positions[r, j]] = j
        parts: dict[str, tuple[list, list, list]] = {}
        for b, row in enumerate(rows):
            for name, pairs, slot in row.patches:
                cols = col[b, torch.tensor([t for t, _ in pairs], device=col.device)]
                if bool((cols < 0).any()):
                    raise PatchError("a patched position is not in the batch's first forward (share_prefix on?)")
                rs, cs, vs = parts.setdefault(name, ([], [], []))
                rs.append(torch.full_like(cols, b))
                cs.append(cols)
                vs.append(_values(self.cache.get(slot, name), pairs))
        return {name: (torch.cat(rs), torch.cat(cs), torch.cat(vs)) for name, (rs, cs, vs) in parts.items()}

    @contextlib.contextmanager
    def __call__(self, batch):
        n = batch.ids.shape[0]
        rows = self.rows[self.offset:self.offset + n]
        ids, mask = batch.ids.cpu(), batch.mask.cpu()
        if len(rows) != n or any(ids[b][mask[b]].tolist() != list(row.ids) for b, row in enumerate(rows)):
            raise PatchError("engine batch rows differ from the patch plan: expected the engine to keep the order of "
                             "length-sorted prompts and to put every prompt token in the forward (share_prefix off)")
        edits = self._edits(batch, rows)

        def write(name: str, hidden: torch.Tensor) -> torch.Tensor:
            rs, cs, values = (t.to(hidden.device) for t in edits[name])  # a split model's layers sit on several devices
            hidden = hidden.clone()
            hidden[rs, cs] = values.to(hidden.dtype)
            return hidden

        with ResidualHooks(self.model, list(edits), edit=write, retain=False):
            yield
        self.offset += n  # only reached when the forward did not raise
        self.on_forward()


def run_jobs(engine, prompts: Sequence[PatchPrompt], jobs: Sequence[Job], trie: AnswerTrie,
             progress: str | None = None) -> list[PatchScores]:
    """Scores of every job: source states captured once per distinct source prefix, then one engine.score call.
    With `progress` (a label), the planned forwards, an estimate after the first scoring forward, and a bar."""
    jobs = list(jobs)
    n_layers = n_layers_of(engine.model)
    hooks = {k: job.spec.hooks(n_layers) for k, job in enumerate(jobs) if job.spec is not None and job.spec.layers}
    pairs: dict[int, Pairs] = {}
    upto: dict[int, int] = {}
    for k in hooks:
        job = jobs[k]
        if job.source is None:
            raise PatchError(f"job {k} patches layers {job.spec.layers} but names no source prompt")
        p = pairs[k] = tuple(align(job.spec, prompts[job.source], prompts[job.target]))
        upto[job.source] = max(upto.get(job.source, 0), max(s for _, ss in p for s in ss) + 1)
    layers = sorted({name for names in hooks.values() for name in names}, key=table_layer)
    sources = sorted(upto)
    where = {s: i for i, s in enumerate(sources)}
    rows = [_Row(prompts[job.target].ids,
                 tuple((name, pairs[k], where[job.source]) for name in hooks[k]) if k in pairs else ())
            for k, job in enumerate(jobs)]
    order = sorted(range(len(rows)), key=lambda k: len(rows[k].ids))
    source_ids = [prompts[s].ids for s in sources]
    cut = [upto[s] for s in sources]
    setup = len(prefix_batches(prefixes(source_ids, cut), engine.batch_size))
    scoring = math.ceil(len(rows) / engine.batch_size)
    what = f"source prefixes, then {len(rows)} prompts scored {engine.batch_size} a forward"
    with ForwardBar(progress or "patching", setup, scoring, what, enabled=progress is not None) as bar:
        cache = source_states(engine.model, source_ids, layers, cut, engine.batch_size, on_forward=bar.tick)
        patcher = _Patcher(engine.model, [rows[k] for k in order], cache, on_forward=bar.tick)
        with engine.hooked(intervention=patcher, share_prefix=False, answer_tree=AnswerTree("full")):
            scores = engine.score([list(rows[k].ids) for k in order], _logprob_trie(trie))
    out: list = [None] * len(rows)
    for k, s in zip(order, scores):
        out[k] = s
    return out


def patched_scores(engine, targets: Sequence[PatchPrompt], sources: Sequence[PatchPrompt],
                   spec: PatchSpec | Sequence[PatchSpec], trie: AnswerTrie) -> list[PatchScores]:
    """Scores of each target patched from the source at the same index: one spec for all, or one per target."""
    if len(targets) != len(sources):
        raise PatchError(f"{len(targets)} targets but {len(sources)} sources; expected one source per target")
    specs = [spec] * len(targets) if isinstance(spec, PatchSpec) else list(spec)
    if len(specs) != len(targets):
        raise PatchError(f"{len(specs)} specs for {len(targets)} targets; expected one spec, or one per target")
    n = len(targets)
    return run_jobs(engine, [*targets, *sources], [Job(i, n + i, s) for i, s in enumerate(specs)], trie)
