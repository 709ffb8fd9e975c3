"""A suite run: check everything, then stream work units through the engine into a resumable run directory."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import accumulate
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from activations.capture import decoder_layers, parse_layers
from activations.recorder import Recorder
from activations.store import FOLDER as ACTIVATIONS
from behavioral.inference import chat
from behavioral.inference import models
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie, Scores
from behavioral.core.distributed import Place, barrier, place, start
from behavioral.inference.backend import BACKENDS
from behavioral.inference.engine import Generation, Sampling, stream_seed
from behavioral.rundir.manifest import (
    MANIFEST, AnswerSet, Manifest, RunDirError, new_run_id, read_manifest, write_manifest,
)
from behavioral.rundir.provenance import provenance
from behavioral.rundir.parts import (
    RESULTS, RowLog, check_parts, finished_units, result_schema, seal_logs, seal_unlocked_logs,
)
from behavioral.suite.protocol import Item, Suite
from behavioral.suite.registry import get_suite
from behavioral.runner.config import RunConfig, check_resumable, run_identity
from behavioral.runner.plan import plan, survey
from behavioral.rundir.lock import RunLock, is_lock_file
from behavioral.suite.work import WorkUnit, unit_batches, work_units

# Work units go to the engine in pools of this many batches: it sorts a pool's rows by what is left after their
# cached prefix, so batches pad little, and computes each of the pool's prefixes once (a pool of one batch pads every
# row to the longest); a kill loses at most one pool, whose units rerun on resume.
POOL_BATCHES = 4
STORE_PROBS_UP_TO = 32  # answer sets this small keep every label's probability on each row (any set with store_probs)


def prepare_out_dir(out: Path, caches: Sequence[str] = ()) -> bool:
    """Check `out` can hold this run (new, or holding only the suite's `caches`); True when it already holds one
    (to resume). Neither `out` nor anything the run writes in it may be a symbolic link (a shared folder could
    carry the writes elsewhere)."""
    links = [p for p in (out, *(out / name for name in (MANIFEST, RESULTS, ACTIVATIONS, *caches))) if p.is_symlink()]
    if links:
        raise RunDirError(f"--out {out}: {'is' if links[0] == out else f'holds {links[0].name} as'} a symbolic link, "
                          "which would carry the run's writes elsewhere; expected a run directory of its own files")
    odd = [name for name in caches if os.path.lexists(out / name) and not (out / name).is_file()]
    if odd:  # a FIFO would hang the cache's read and write
        raise RunDirError(f"--out {out}: its {odd[0]} is not a regular file; expected the cache a run writes there")
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--out {out}: exists and is not a directory")
    if os.path.lexists(out / MANIFEST):
        check_parts(out)  # a damaged manifest, or a damaged or foreign part, is named before the model loads
        return True
    if out.exists() and any(p.name not in caches and not is_lock_file(p) for p in out.iterdir()):
        raise RunDirError(f"--out {out}: not empty and holds no {MANIFEST}; expected a new or an earlier run directory")
    parent = out if out.exists() else next(p for p in out.absolute().parents if p.exists())
    if not os.access(parent, os.W_OK):
        raise RunDirError(f"--out {out}: {parent} is not writable")
    return False


class Rendering:
    """A run's prompts as its tokenizer renders them (the chat format `--prompt-format` asks for, refused where the
    tokenizer has no chat template) and their answer tries, checked against a context of `context` tokens (None:
    unknown): what a run checks of its prompts before its model loads, and the Runner after."""

    def __init__(self, tokenizer, config: RunConfig, context: int | None):
        self.tokenizer = tokenizer
        self.config = config
        self.chat_format = chat.detect_format(tokenizer, config.prompt_format)
        self.context = context
        self._tries: dict[AnswerSpec, AnswerTrie] = {}

    def trie(self, spec: AnswerSpec) -> AnswerTrie:
        """The answer trie of `spec` for this tokenizer, built once."""
        if spec not in self._tries:
            self._tries[spec] = AnswerTrie.build(self.tokenizer, spec)
        return self._tries[spec]

    def answer_sets(self, specs: Sequence[AnswerSpec]) -> tuple[AnswerSet, ...] | None:
        """What the run's scores range over, per answer set its items score (`survey`; None where the run scores
        nothing): each set's labels, its tree's nodes and its values' range (manifest.AnswerSet)."""
        if self.config.mode == "generate" or not specs:
            return None
        found = {AnswerSet(len(spec.labels), len(self.trie(spec)), min(spec.values) if spec.values else None,
                           max(spec.values) if spec.values else None) for spec in specs}
        return tuple(sorted(found, key=lambda a: (a.labels, a.nodes)))

    def tokens(self, item: Item) -> list[int]:
        """Token ids of one item's rendered prompt."""
        return chat.encode(self.tokenizer, item.prompt(), self.chat_format)

    def generates(self, item: Item) -> bool:
        """True where `item`'s reply is decoded: every item outside score mode, open-ended items (no answer set)
        in it too."""
        return self.config.mode != "score" or item.answers is None

    def check_lengths(self, items) -> None:
        """Fail before any work if some prompt (answer included) would not fit the model's context."""
        if self.context is None:
            return
        for item in items:
            trie = None if item.answers is None else self.trie(item.answers)
            room = max(self.config.max_new_tokens if self.generates(item) else 0,
                       0 if trie is None else len(trie.prefill) + int(trie.depth.max()))
            n = len(self.tokens(item)) + room
            if n > self.context:
                raise ValueError(f"item {item.item_id!r} makes a prompt of {n} tokens (answer included), longer than "
                                 f"the model's context of {self.context}")


class Runner(Rendering):
    """One loaded model and its rendering, turning a suite's work units into result rows."""

    def __init__(self, model, tokenizer, config: RunConfig, suite: Suite):
        super().__init__(tokenizer, config, getattr(model.config, "max_position_embeddings", None))
        self.suite = suite
        self.engine = BACKENDS[config.backend].start(model, tokenizer, config)
        self.sampling = Sampling(config.temperature, config.top_p)

    def _requests(self, items: Sequence[Item], requests: Sequence[tuple[int, int]]) -> dict:
        """The early-stop predicates and, when sampling, the random streams of (item index, sample) requests."""
        seeds = None if self.sampling.greedy else \
            [stream_seed(self.config.seed, items[i].item_id, s) for i, s in requests]
        return {"until": [getattr(items[i], "decided", None) for i, _ in requests], "seeds": seeds}

    def rows(self, units: Sequence[WorkUnit]) -> tuple[list[dict], list[torch.Tensor] | None]:
        """Result rows of `units` (unit, item, then sample order), and with a tracer active the final-token state
        [hooks, d] of each item's prompt (unit then item order)."""
        items = [item for u in units for item in u.items]
        unit_of = [u.unit_id for u in units for _ in u.items]
        ids = [self.tokens(item) for item in items]
        mode, n = self.config.mode, self.config.samples
        generated: list[list[Generation | None]] = [[None] * n for _ in items]
        scored: list[Scores | None] = [None] * len(items)
        specs = dict.fromkeys(item.answers for item in items if item.answers is not None)
        if mode == "both" and n == 1:  # one reply per item: its prompt forward scores it too
            for spec in (spec for spec in specs if not self.trie(spec).prefill):
                idx = [i for i, item in enumerate(items) if item.answers == spec]
                out = self.engine.generate_and_score([ids[i] for i in idx], self.trie(spec), sampling=self.sampling,
                                                     **self._requests(items, [(i, 0) for i in idx]))
                for i, g in zip(idx, out):
                    generated[i][0], scored[i] = g, g.scores
        requests = [(i, s) for i, item in enumerate(items) if self.generates(item) and scored[i] is None
                    for s in range(n)]
        if requests:
            out = self.engine.generate([ids[i] for i, _ in requests], sampling=self.sampling,
                                       **self._requests(items, requests))
            for (i, s), g in zip(requests, out):
                generated[i][s] = g
        if mode != "generate":
            for spec in specs:
                idx = [i for i, item in enumerate(items) if item.answers == spec and scored[i] is None]
                for i, score in zip(idx, self.engine.score([ids[i] for i in idx], self.trie(spec))):
                    scored[i] = score
        # each prompt's final-token state from its first forward: its scoring in score mode (an open-ended item
        # of a score run is generated), else its first reply
        first = [scored[i] if mode == "score" and scored[i] is not None else generated[i][0] for i in range(len(items))]
        states = [f.state for f in first] if all(f is not None and f.state is not None for f in first) else None
        means = dict(zip(accumulate((len(u.items) for u in units), initial=0), unit_means(units, scored)))
        rows = [result_row(unit_of[i], item, s, generated[i][s], scored[i], self.config.store_probs,
                           means.get(i) if s == 0 else None)
                for i, item in enumerate(items) for s in range(n)]
        return rows, states


def unit_means(units: Sequence[WorkUnit], scored: Sequence[Scores | None]) -> list[list[float] | None]:
    """Per unit, the mean of its items' `probs` (`scored` in unit then item order) where every item was scored
    against one answer set, else None."""
    means, start = [], 0
    for unit in units:
        scores = scored[start:start + len(unit.items)]
        start += len(unit.items)
        shared = len({item.answers for item in unit.items}) == 1 and all(s is not None for s in scores)
        means.append(np.mean([s.probs for s in scores], axis=0).tolist() if shared else None)
    return means


def _label(spec: AnswerSpec, name):
    """The label of `spec` called `name`."""
    return spec.labels[spec.names.index(name)]


def result_row(unit_id: str, item: Item, sample: int, generation: Generation | None, score: Scores | None,
               store_probs: bool = False, unit_probs: Sequence[float] | None = None) -> dict:
    """One result row: the core columns, then the item's fields. Without a generated reply, the answer is the
    label greedy decoding reaches inside the answer set. The row keeps its label probabilities for answer sets of up
    to STORE_PROBS_UP_TO labels, or any with `store_probs`; `unit_probs` is its unit's mean (first row only)."""
    if generation is not None:
        answer = item.parse(generation.text)
        label, value, refused = answer.label, answer.value, answer.refused
    else:
        label = score.greedy
        value, refused = _label(item.answers, label).value, False
    greedy = None if score is None else _label(item.answers, score.greedy)
    keep = score is not None and (store_probs or len(item.answers.labels) <= STORE_PROBS_UP_TO)
    return {
        "unit_id": unit_id, "item_id": item.item_id, "sample": sample,
        "response": None if generation is None else generation.text,
        "answer": None if label is None else str(label),
        "value": math.nan if value is None else float(value),
        "refused": refused,
        "truncated": None if generation is None else generation.truncated,
        "score_answer": None if greedy is None else str(greedy.name),
        "score_value": math.nan if greedy is None or greedy.value is None else float(greedy.value),
        "expected": math.nan if score is None or score.expected is None else score.expected,
        "valid_mass": math.nan if score is None else score.valid_mass,
        "start_mass": math.nan if score is None else score.start_mass,
        "probs": list(score.probs) if keep else None,
        "unit_probs": None if unit_probs is None else list(unit_probs),
        "tree_nodes": None if score is None else score.nodes,
        "expected_bound": math.nan if score is None or score.expected_bound is None else score.expected_bound,
        "probs_bound": math.nan if score is None else score.probs_bound,
        "entropy_bound": math.nan if score is None else score.entropy_bound,
        **item.fields,
    }


def run(config: RunConfig, out: str | Path, where: Place | None = None, progress: bool = True,
        loaded: tuple | None = None, label: str | None = None) -> Path:
    """Run (or resume) this process's share of a suite into `out`; every check happens before any row is written.

    `loaded` = (model, tokenizer, info) runs an already loaded model (e.g. a steered one, whose `info` says so; with
    backend vllm, what its backend's load gave) instead of loading `config.model`. Under torchrun or accelerate, each
    rank takes every world_size-th work unit and writes its own part files; rank 0 checks the run directory, writes
    the manifest and prepares the data (e.g. rewrites) before the others go on. Each rank holds a lock on its files
    from before its first write to its end, so a second process started on the same run directory and rank fails at
    once instead of losing or duplicating rows. `label` names the run on its progress bar (default: suite, model,
    mode; a sweep's: model/suite--setting).

    >>> from behavioral import run
    >>> run_dir = run(config, "runs/religion", progress=False, loaded=model.loaded)
    >>> sorted(p.name for p in run_dir.iterdir())
    ['activations', 'manifest.json', 'results']
    """
    out = Path(out)
    where = where or place()
    suite = get_suite(config.suite)
    config.validate(suite)
    data = suite.dataset(config)
    start(where)
    resumes = where.is_main and prepare_out_dir(out, suite.caches)  # fail fast, before the model loads
    with RunLock(out, where.rank):  # also before the model loads: a second process on this rank fails at once
        if loaded is None:
            with models.shared_parse(config.model):
                lengths_checked = check_before_loading(config, suite, data, out, where, resumes)
                loaded = load_model(config, where)
        else:
            lengths_checked = False
        model, tokenizer, model_info = loaded
        if config.capture:
            _check_capture_layers(config, model)
        identity = run_identity(config, model_info)
        resuming = prepare_out_dir(out, suite.caches) if where.is_main else True  # again: another may have finished
        if where.is_main and resuming:
            check_resumable(out, identity, partial=True)  # before the suite's own preparation
        seal_logs(out, where.rank)  # rows a killed process of this rank logged
        writer = BACKENDS[config.backend].writer(model)  # data the model writes (rewrites) need the engine
        if where.is_main:
            data = suite.prepare(data, config, writer, tokenizer, out)
        barrier(where)
        if not where.is_main:
            data = suite.prepare(data, config, writer, tokenizer, out)
        runner = Runner(model, tokenizer, config, suite)
        if not lengths_checked:
            runner.check_lengths(suite.length_probes(data, lambda item: len(runner.tokens(item))))
        identity |= suite.facts(data) | {"chat_format": runner.chat_format}
        if where.is_main and not resuming:
            origin = provenance() | {"device": model_info["device"], "batch_size": config.batch_size,
                                     "world_size": where.world_size, "backend": config.backend} \
                | BACKENDS[config.backend].origin(config, model_info)
            groups, specs = survey(suite, data)
            write_manifest(out, Manifest(identity, model_info, origin, plan(config, groups), new_run_id(),
                                         answers=runner.answer_sets(specs)))
        elif where.is_main:
            check_resumable(out, identity)
            stored = read_manifest(out)
            unscored = stored.answers is None and config.mode != "generate"
            if stored.plan is None or stored.plan.groups is None or unscored:
                # made before manifests recorded a plan naming its units, or the answer sets its scores range over
                groups, specs = survey(suite, data)
                write_manifest(out, replace(stored, plan=plan(config, groups), answers=runner.answer_sets(specs)))
        barrier(where)
        check_resumable(out, identity)
        seal_unlocked_logs(out, where.rank)  # logs of ranks of an earlier, killed run that no process holds
        _work(config, suite, runner, data, out, where, read_manifest(out).run_id, progress, label)
        seal_unlocked_logs(out, where.rank)
    return out


def check_before_loading(config: RunConfig, suite: Suite, data, out: Path, where: Place, resumes: bool) -> bool:
    """Refuse, before the weights load, what the model's config, the run directory and the tokenizer can answer:
    --layers naming blocks the model lacks; on the main process a resume whose settings, options or data differ from
    those recorded (`known_identity`; the data where the suite prepares them without the model); with the engine,
    --prompt-format chat without a chat template and a prompt longer than the model's context. True where the
    prompts' lengths were checked (else they are once the model loads)."""
    found = models.read_config(config.model, config.trust_remote_code)
    if config.capture and found.n_layers is not None:
        parse_layers(config.layers, found.n_layers)
    known = None
    if where.is_main:
        try:  # the data as the run will read them, where the suite prepares them from the run directory alone
            known = suite.prepare(data, config, None, None, out)
        except ValueError:  # they need the model (rewrites the engine writes): compared once it loads
            known = None
    if resumes:
        facts = {} if known is None else json.loads(json.dumps(suite.facts(known)))
        check_resumable(out, known_identity(config, read_manifest(out), where) | facts, partial=True)
    lengths = known is not None and found.context is not None
    if not BACKENDS[config.backend].renders_before_loading or not (lengths or config.prompt_format == "chat"):
        return False  # vLLM renders, and bounds the context by its own arguments, once it loads
    rendering = Rendering(models.load_tokenizer(config.model, config.trust_remote_code), config, found.context)
    if lengths:
        rendering.check_lengths(suite.length_probes(known, lambda item: len(rendering.tokens(item))))
    return lengths


def known_identity(config: RunConfig, stored: Manifest, where: Place) -> dict:
    """The run identity of `config` as known before its model loads: the model's hash and revision as the run
    directory recorded them (compared once it loads), its dtype as this process's device resolves it."""
    device = BACKENDS[config.backend].device(config, where)
    dtype = str(models.resolve_dtype(config.dtype, device)).removeprefix("torch.")
    return run_identity(config, {"model_hash": stored.model.get("model_hash"), "revision": stored.model.get("revision"),
                                 "dtype": dtype})


def load_model(config: RunConfig, where: Place, load: Callable[..., tuple] = models.load) -> tuple:
    """(model, tokenizer, info) of the run's model, loaded for its backend (the engine's by `load`, models.load's
    signature), on this process's device."""
    return BACKENDS[config.backend].load(config, where, load)


def _work(config: RunConfig, suite: Suite, runner: Runner, data, out: Path, where: Place, run_id: str | None,
          progress: bool, label: str | None = None) -> None:
    """Stream this rank's unfinished work units through the runner into its row log (and the recorder), every part
    stamped with the run's identity."""
    done = finished_units(out)

    def mine():
        return work_units(suite.groups(data), config.unit_size, where.rank, where.world_size)

    recorder = _recorder(config, suite, runner, out, where, run_id) if config.capture else None
    if recorder is not None:
        recorder.plan(mine())

    def todo():
        return (u for u in mine() if u.unit_id not in done or (recorder is not None and recorder.needs(u)))

    total = sum(len(u.items) for u in todo()) * config.samples
    label = (label or f"{suite.name} {config.model} {config.mode}") + \
        (f" rank {where.rank}" if where.world_size > 1 else "")
    schema = result_schema(suite.fields, run_id)
    finished = False
    try:
        with tqdm(total=total, unit="prompt", disable=not progress, desc=label) as bar, \
                RowLog(out, schema, where.rank, read_manifest(out).seals is not None) as log, \
                runner.engine.hooked(tracer=recorder and recorder.tracer):
            for batch in unit_batches(todo(), POOL_BATCHES * config.batch_size):
                rows, states = runner.rows(batch)
                fresh = [r for r in rows if r["unit_id"] not in done]
                if fresh:
                    log.write(fresh)
                if recorder is not None:
                    recorder.add(batch, states)
                bar.update(len(rows))
        finished = True
    finally:
        if recorder is not None:  # the shards queued before a failure are still written
            recorder.close(flush=finished)


def _check_capture_layers(config: RunConfig, model) -> None:
    """Fail before anything is written if --layers names a layer the model lacks."""
    parse_layers(config.layers, len(decoder_layers(model)))


def _recorder(config: RunConfig, suite: Suite, runner: Runner, out: Path, where: Place, run_id: str | None):
    """The activation recorder of a capture run."""
    return Recorder(runner.engine.model, runner.tokenizer, runner.chat_format, out, suite.capture, config.capture,
                    config.layers, config.per_cell_samples, config.seed, config.batch_size, where.rank, run_id)
