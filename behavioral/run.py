"""A suite run: check everything, then stream work units through the engine into a resumable run directory."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from activations.capture import check_layer_spec, decoder_layers, parse_layers
from activations.recorder import Recorder
from behavioral import chat, models, vllm_backend
from behavioral.answer_space import AnswerSpec, AnswerTrie, Scores
from behavioral.distributed import Place, barrier, device_for, place, start
from behavioral.engine import Engine, Generation, Sampling, stream_seed
from behavioral.lazy_tree import AnswerTree, check_tolerance
from behavioral.manifest import (
    MANIFEST, MODES, SCHEMA_VERSION, TREE_TOLERANCE, TREES, Manifest, Plan, RunDirError, new_run_id, options_of,
    read_manifest, write_manifest,
)
from behavioral.options import quoted
from behavioral.provenance import provenance
from behavioral.store import (
    RowLog, RunLock, check_parts, finished_units, is_lock_file, result_schema, seal_logs, seal_unlocked_logs,
)
from behavioral.suite import Item, Suite, local_path
from behavioral.registry import get_suite
from behavioral.work import WorkUnit, unit_batches, work_units

# The decoding settings' defaults; a suite replaces some with its own (Suite.run_defaults, e.g. its authors').
RUN_DEFAULTS = {"mode": "generate", "seed": 0, "temperature": 0.0, "top_p": 1.0, "samples": 1, "max_new_tokens": 128,
                "prompt_format": "auto"}
# Work units go to the engine in pools of this many batches: it sorts a pool's rows by what is left after their
# cached prefix, so batches pad little, and computes each of the pool's prefixes once (a pool of one batch pads every
# row to the longest); a kill loses at most one pool, whose units rerun on resume.
POOL_BATCHES = 4
STORE_PROBS_UP_TO = 32  # answer sets this small keep every label's probability on each row (any set with store_probs)
BACKENDS = ("engine", "vllm")  # what runs the model: this toolkit's engine, or vLLM (behavioral.vllm_backend)


def run_defaults(suite: Suite) -> dict[str, Any]:
    """The decoding settings' defaults for `suite`: the generic ones, replaced by the suite's own."""
    return RUN_DEFAULTS | dict(suite.run_defaults)


Check = Callable[[Any, str], None]  # raises ValueError naming the value `name` (a flag, or a sweep file's key)


def _one_of(known: Sequence[str]) -> Check:
    """A check that a value is one of `known`."""
    def check(value: Any, name: str) -> None:
        if value not in known:
            raise ValueError(f"{name} is {quoted(value)}; expected one of {', '.join(known)}")
    return check


def _at_least(low: int) -> Check:
    """A check that a number is at least `low`."""
    def check(value: Any, name: str) -> None:
        if not value >= low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
    return check


def _temperature(value: float, name: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be at least 0 and finite, got {value}")


def _top_p(value: float, name: str) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{name} must lie in (0, 1], got {value}")


# Each run setting's own check of its value; RunConfig.problems adds what the settings' combination and the suite
# decide (the capture kinds).
SETTING_CHECKS: dict[str, Check] = {
    "model": models.check_length, "mode": _one_of(MODES), "seed": _at_least(0), "temperature": _temperature,
    "top_p": _top_p, "samples": _at_least(1), "max_new_tokens": _at_least(1),
    "prompt_format": _one_of(tuple(chat.REQUESTS)), "device": models.check_device,
    "dtype": _one_of(("auto", *models.DTYPES)), "batch_size": _at_least(1), "unit_size": _at_least(1),
    "layers": check_layer_spec, "per_cell_samples": _at_least(0), "backend": _one_of(BACKENDS),
    "answer_tree": _one_of(TREES), "tree_tolerance": check_tolerance,
}


def check_setting(field: str, value: Any, name: str) -> None:
    """Raise ValueError naming `name` where `value` (of the field's type) is not one RunConfig's `field` may take."""
    if field in SETTING_CHECKS:
        SETTING_CHECKS[field](value, name)


def flag(field: str) -> str:
    """The `empathy-gap run` flag of a RunConfig field."""
    return f"--{field.replace('_', '-')}"


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides a run's rows. `batch_size` and `device` decide how fast they come, and nothing else
    beyond float rounding: batches group prompts differently, so score-mode probabilities may differ in the last
    digits (measured up to 6e-7 in fp32 on CPU; answers identical in every fp32 comparison, while in bf16 a near-tie
    between two answers can flip). `backend` decides who computes them: vLLM's greedy replies are the engine's and
    its scores equal them to float rounding, so it is part of a run's identity only where replies are sampled (each
    backend draws its own); `vllm_args` (vLLM's engine arguments) decide how fast.

    A decoding setting left None takes the suite's default (`run_defaults`), so a script that builds a RunConfig
    runs the protocol the CLI runs; `samples` takes the suite's only where replies are sampled (a temperature above
    0 outside score mode), else 1."""

    suite: str
    model: str
    options: Any = None  # the suite's options (a frozen dataclass, see Suite.options)
    mode: str | None = None  # generate, score or both
    seed: int | None = None
    temperature: float | None = None  # 0: greedy decoding
    top_p: float | None = None
    samples: int | None = None  # generated samples per item
    max_new_tokens: int | None = None
    prompt_format: str | None = None  # auto (chat where the tokenizer has a template), chat or plain
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16
    unit_size: int = 32
    trust_remote_code: bool = False
    capture: tuple[str, ...] = ()
    layers: str = "all"
    per_cell_samples: int = 0
    store_probs: bool = False  # every row keeps its label probabilities, whatever the answer set's size
    answer_tree: str = "lazy"  # score and both modes: lazy (nodes read as needed, bounds per row) or full (exact)
    tree_tolerance: float = TREE_TOLERANCE  # lazy: the most a reported expected value or probability may differ
    backend: str = "engine"  # engine, or vllm: the same rows (greedy), decoded and scored by vLLM
    vllm_args: tuple[tuple[str, Any], ...] = ()  # vLLM's engine arguments as (key, value), e.g. tensor_parallel_size

    def __post_init__(self):
        defaults = run_defaults(get_suite(self.suite))
        for name in ("mode", "seed", "temperature", "top_p", "max_new_tokens", "prompt_format"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, defaults[name])
        if self.samples is None:
            sampled = self.mode != "score" and self.temperature > 0
            object.__setattr__(self, "samples", defaults["samples"] if sampled else 1)

    @classmethod
    def from_run_dir(cls, run_dir: str | Path, **changes) -> "RunConfig":
        """The configuration a run directory was made with (its manifest), with `changes` applied. Speed settings
        (device, batch size) are not stored: they come back as the defaults unless changed. `trust_remote_code` is
        never read from a manifest (a shared run directory must not make its reader execute a model folder's code):
        only the caller's own `changes` turn it on."""
        manifest = read_manifest(run_dir)
        stored = manifest.config
        known = {f.name for f in fields(cls)} - {"trust_remote_code"}
        kept = {k: v for k, v in stored.items() if k in known}
        options = options_of(manifest, get_suite(manifest.suite).Options, Path(run_dir) / MANIFEST)
        return replace(cls(**kept | {"options": options, "capture": tuple(stored.get("capture", ()))}), **changes)

    def validate(self, suite: Suite, named: Callable[[str], str] = flag) -> None:
        """Raise ValueError naming the first of the configuration's `problems` (a bad value or combination)."""
        found = self.problems(suite, named)
        if found:
            raise ValueError(found[0])

    def problems(self, suite: Suite, named: Callable[[str], str] = flag) -> list[str]:
        """What is wrong with this configuration for `suite`, a line each: each setting's value (SETTING_CHECKS), then
        their combinations and the capture kinds; `named` names a field as the user gave it (default: its flag)."""
        found = []
        for field in SETTING_CHECKS:
            try:
                check_setting(field, getattr(self, field), named(field))
            except ValueError as err:
                found.append(str(err))
        if self.samples > 1 and (self.mode == "score" or self.temperature == 0):
            found.append(f"{named('samples')} {self.samples} needs generated replies with {named('temperature')} "
                         "above 0; greedy decoding and score mode give one answer per item")
        if self.store_probs and self.mode == "generate":
            found.append(f"{named('store_probs')} keeps answer-set probabilities, which only {named('mode')} score "
                         "or both computes")
        kinds = suite.capture.kinds if suite.capture else ()
        found += [f"unknown {named('capture')} {quoted(name)} for suite {suite.name!r}; expected a comma list of "
                  f"{', '.join(kinds) or 'nothing (this suite cannot capture)'}" for name in self.capture
                  if name not in kinds]
        return found + vllm_backend.problems(self, named)


def prepare_out_dir(out: Path, caches: Sequence[str] = ()) -> bool:
    """Check `out` can hold this run (new, or holding only the suite's `caches`); True when it already holds one
    (to resume)."""
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


IDENTITY = ("suite", "model", "mode", "seed", "temperature", "top_p", "samples", "max_new_tokens", "prompt_format",
            "unit_size", "capture", "layers", "per_cell_samples", "store_probs")
# identity settings newer than some manifests (flat keys): the value those runs ran with, where the run has the key
ADDED = {"store_probs": False, "options.exclude_events": [], "backend": "engine", "answer_tree": "full"}


def run_identity(config: RunConfig, model_info: dict) -> dict:
    """The manifest's `config` as known before the suite prepares its data: what must match to resume."""
    identity = {k: v for k, v in asdict(config).items() if k in IDENTITY}
    identity.update(model=local_path(config.model), capture=list(config.capture), schema=SCHEMA_VERSION,
                    options=_jsonable(config.options), model_hash=model_info["model_hash"],
                    revision=model_info["revision"], dtype=model_info["dtype"])
    if config.mode != "generate":  # how the answer tree was read decides the scores, within the rows' bounds
        identity["answer_tree"] = config.answer_tree
        if config.answer_tree == "lazy":
            identity["tree_tolerance"] = config.tree_tolerance
    if config.mode != "score" and config.temperature > 0:  # sampled replies: each backend draws its own samples
        identity["backend"] = config.backend
    return identity


def _jsonable(options: Any) -> Any:
    """Suite options as JSON (tuples become lists, so a stored manifest compares equal)."""
    if options is None:
        return None
    data = asdict(options) if is_dataclass(options) else dict(options)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def _flat(config: dict, prefix: str = "") -> dict:
    """Nested settings as one level, `options.limit_events`, so a difference names the setting itself."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[prefix + key] = value
    return flat


def check_resumable(out: Path, identity: dict, partial: bool = False) -> None:
    """Refuse a run directory whose stored configuration differs (in the keys of `identity` only, if partial)."""
    stored, identity = _flat(read_manifest(out).config), _flat(identity)
    stored = {k: v for k, v in ADDED.items() if k in identity} | stored
    keys = set(identity) if partial else set(stored) | set(identity)
    diffs = [f"{k}: stored {stored.get(k)!r}, now {identity.get(k)!r}"
             for k in sorted(keys) if stored.get(k) != identity.get(k)]
    if diffs:
        raise RunDirError(f"{out} was made with a different configuration; use a new --out. Differences: "
                          + "; ".join(diffs))


class Runner:
    """One loaded model and its rendering state, turning a suite's work units into result rows."""

    def __init__(self, model, tokenizer, config: RunConfig, suite: Suite):
        self.tokenizer = tokenizer
        self.config = config
        self.suite = suite
        self.engine = vllm_backend.VllmEngine(model, tokenizer, config.max_new_tokens) if config.backend == "vllm" \
            else Engine(model, tokenizer, config.batch_size, config.max_new_tokens,
                        answer_tree=AnswerTree(config.answer_tree, config.tree_tolerance))
        self.chat_format = chat.detect_format(tokenizer, config.prompt_format)
        self.sampling = Sampling(config.temperature, config.top_p)
        self.context = getattr(model.config, "max_position_embeddings", None)
        self._tries: dict[AnswerSpec, AnswerTrie] = {}

    def trie(self, spec: AnswerSpec) -> AnswerTrie:
        """The answer trie of `spec` for this tokenizer, built once."""
        if spec not in self._tries:
            self._tries[spec] = AnswerTrie.build(self.tokenizer, spec)
        return self._tries[spec]

    def tokens(self, item: Item) -> list[int]:
        """Token ids of one item's rendered prompt."""
        return chat.encode(self.tokenizer, item.prompt(), self.chat_format)

    def generates(self, item: Item) -> bool:
        """True where `item`'s reply is decoded: every item outside score mode, open-ended items (no answer set)
        in it too."""
        return self.config.mode != "score" or item.answers is None

    def _requests(self, items: Sequence[Item], requests: Sequence[tuple[int, int]]) -> dict:
        """The early-stop predicates and, when sampling, the random streams of (item index, sample) requests."""
        seeds = None if self.sampling.greedy else \
            [stream_seed(self.config.seed, items[i].item_id, s) for i, s in requests]
        return {"until": [getattr(items[i], "decided", None) for i, _ in requests], "seeds": seeds}

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
        loaded: tuple | None = None) -> Path:
    """Run (or resume) this process's share of a suite into `out`; every check happens before any row is written.

    `loaded` = (model, tokenizer, info) runs an already loaded model (e.g. a steered one, whose `info` says so; with
    backend vllm, what vllm_backend.load gave) instead of loading `config.model`. Under torchrun or accelerate, each
    rank takes every world_size-th work unit and writes its own part files; rank 0 checks the run directory, writes
    the manifest and prepares the data (e.g. rewrites) before the others go on. Each rank holds a lock on its files
    from before its first write to its end, so a second process started on the same run directory and rank fails at
    once instead of losing or duplicating rows.
    """
    out = Path(out)
    where = where or place()
    suite = get_suite(config.suite)
    config.validate(suite)
    data = suite.dataset(config)
    start(where)
    if where.is_main:
        prepare_out_dir(out, suite.caches)  # fail fast, before the model loads
    with RunLock(out, where.rank):  # also before the model loads: a second process on this rank fails at once
        loaded = loaded or load_model(config, where)
        model, tokenizer, model_info = loaded
        if config.capture:
            _check_capture_layers(config, model)
        identity = run_identity(config, model_info)
        resuming = prepare_out_dir(out, suite.caches) if where.is_main else True  # again: another may have finished
        if where.is_main and resuming:
            check_resumable(out, identity, partial=True)  # before the suite's own preparation
        seal_logs(out, where.rank)  # rows a killed process of this rank logged
        writer = None if config.backend == "vllm" else model  # data the model writes (rewrites) need the engine
        if where.is_main:
            data = suite.prepare(data, config, writer, tokenizer, out)
        barrier(where)
        if not where.is_main:
            data = suite.prepare(data, config, writer, tokenizer, out)
        runner = Runner(model, tokenizer, config, suite)
        runner.check_lengths(suite.length_probes(data, lambda item: len(runner.tokens(item))))
        identity |= suite.facts(data) | {"chat_format": runner.chat_format}
        if where.is_main and not resuming:
            origin = provenance() | {"device": model_info["device"], "batch_size": config.batch_size,
                                     "world_size": where.world_size, "backend": config.backend}
            if config.backend == "vllm":
                origin |= {"vllm_version": model_info["vllm_version"], "vllm_args": dict(config.vllm_args)}
            write_manifest(out, Manifest(identity, model_info, origin, plan(config, suite, data), new_run_id()))
        elif where.is_main and (stored := read_manifest(out)).plan is None:  # made before runs recorded a plan
            write_manifest(out, replace(stored, plan=plan(config, suite, data)))
        barrier(where)
        check_resumable(out, identity)
        _work(config, suite, runner, data, out, where, read_manifest(out).run_id, progress)
        seal_unlocked_logs(out, where.rank)  # logs of ranks of an earlier, killed run that no process holds
    return out


def load_model(config: RunConfig, where: Place, load: Callable[..., tuple] = models.load) -> tuple:
    """(model, tokenizer, info) of the run's model, loaded for its backend: vLLM's (behavioral.vllm_backend.load), or
    the engine's by `load` (models.load's signature), on this process's device."""
    if config.backend == "vllm":
        return vllm_backend.load(config.model, config.dtype, config.trust_remote_code, config.vllm_args, where)
    return load(config.model, device_for(config.device, where), config.dtype, config.trust_remote_code)


def plan(config: RunConfig, suite: Suite, data) -> Plan:
    """The work units and result rows of the whole run (every rank's), which analyses check it holds."""
    sizes = [len(unit.items) for unit in work_units(suite.groups(data), config.unit_size)]
    return Plan(len(sizes), sum(sizes) * config.samples)


def derived_plan(run_dir: str | Path, manifest: Manifest) -> Plan:
    """The plan of a run whose manifest records none (made before plans were recorded), from its configuration and
    data without the model: the suite's data read and prepared from what the run directory caches, checked to be
    the data the run recorded. A ValueError says why it cannot be derived (data gone or changed, a cache missing)."""
    config = RunConfig.from_run_dir(run_dir)
    suite = get_suite(config.suite)
    data = suite.prepare(suite.dataset(config), config, None, None, Path(run_dir))
    facts = json.loads(json.dumps(suite.facts(data)))
    changed = [f"{k} recorded {manifest.config.get(k)!r}, now {v!r}" for k, v in facts.items()
               if manifest.config.get(k) != v]
    if changed:
        raise ValueError(f"its data are not those the run recorded ({'; '.join(changed)})")
    return plan(config, suite, data)


def _work(config: RunConfig, suite: Suite, runner: Runner, data, out: Path, where: Place, run_id: str | None,
          progress: bool) -> None:
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
    label = f"{suite.name} {config.model} {config.mode}" + (f" rank {where.rank}" if where.world_size > 1 else "")
    schema = result_schema(suite.fields, run_id)
    finished = False
    try:
        with tqdm(total=total, unit="prompt", disable=not progress, desc=label) as bar, \
                RowLog(out, schema, where.rank) as log, runner.engine.hooked(tracer=recorder and recorder.tracer):
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
