"""A suite run: check everything, then stream work units through the engine into a resumable run directory."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from behavioral import chat, models, prompts
from behavioral.answer_trie import AnswerTrie
from behavioral.answers import answer_decided, parse_intensity
from behavioral.corpus import CorpusError, Event, corpus_hash, embedded_events, load_events, sample_events
from behavioral.distributed import Place, barrier, device_for, place, start
from behavioral.engine import Engine
from behavioral.groups import CATEGORIES, get_category
from behavioral.provenance import provenance
from behavioral.rewrite import CACHE, ensure_third_person
from behavioral.settings import SETTING_NAMES, get_setting
from behavioral.store import (
    MANIFEST, RowLog, RunDirError, RunLock, finished_units, is_lock_file, read_manifest, seal_logs,
    seal_unlocked_logs, write_json_atomic,
)
from behavioral.work import WorkUnit, work_units

MODES = ("generate", "score", "both")
CAPTURE_KINDS = ("persona", "experiencer", "final")
EMBEDDED_EVENTS = "embedded"


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides a run's rows. `batch_size` and `device` decide how fast they come, and nothing else
    beyond float rounding: batches group prompts differently, so score-mode probabilities may differ in the last
    digits (measured up to 6e-7 in fp32 on CPU; answers identical in every fp32 comparison, while in bf16 a near-tie
    between two answers can flip)."""

    model: str
    categories: tuple[str, ...] = tuple(CATEGORIES)
    settings: tuple[str, ...] = SETTING_NAMES
    events: str | None = None
    limit_events: int | None = None
    seed: int = 0
    mode: str = "generate"
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16
    max_new_tokens: int = 128
    unit_size: int = 32
    trust_remote_code: bool = False
    rewrite_model: str | None = None
    capture: tuple[str, ...] = ()
    layers: str = "all"
    per_cell_samples: int = 0

    def validate(self) -> None:
        """Raise ValueError naming the first unknown category, setting, mode, device or bad number."""
        for name in self.categories:
            get_category(name)
        for name in self.settings:
            get_setting(name)
        if self.mode not in MODES:
            raise ValueError(f"unknown --mode {self.mode!r}; expected one of {', '.join(MODES)}")
        models.check_device(self.device)
        if self.limit_events is not None and self.limit_events < 1:
            raise ValueError(f"--limit-events must be a positive number of events, got {self.limit_events}")
        for name in self.capture:
            if name not in CAPTURE_KINDS:
                raise ValueError(f"unknown --capture {name!r}; expected a comma list of {', '.join(CAPTURE_KINDS)}")
        if self.per_cell_samples < 0:
            raise ValueError(f"--per-cell-samples must be at least 0, got {self.per_cell_samples}")
        for name in ("batch_size", "max_new_tokens", "unit_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")


def load_corpus(config: RunConfig) -> tuple[list[Event], str]:
    """The run's events (sampled as asked) and the hash of the corpus they were drawn from."""
    events = load_events(config.events) if config.events else embedded_events()
    sampled = sample_events(events, config.limit_events, config.seed)
    if not sampled:
        raise CorpusError(f"{config.events or EMBEDDED_EVENTS}: no events left after sampling")
    return sampled, corpus_hash(events)


def prepare_out_dir(out: Path) -> bool:
    """Check `out` can hold this run; True when it already holds one (to resume)."""
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--out {out}: exists and is not a directory")
    if (out / MANIFEST).is_file():
        return True
    if out.exists() and any(p.name != CACHE and not is_lock_file(p) for p in out.iterdir()):
        raise RunDirError(f"--out {out}: not empty and holds no {MANIFEST}; expected a new or an earlier run directory")
    parent = out if out.exists() else next(p for p in out.absolute().parents if p.exists())
    if not os.access(parent, os.W_OK):
        raise RunDirError(f"--out {out}: {parent} is not writable")
    return False


def _local(path: str | None) -> str | None:
    """An existing local path made absolute (so `tiny/`, `./tiny` and `tiny` are one model); anything else as given."""
    return str(Path(path).resolve()) if path and Path(path).exists() else path


def _identity(config: RunConfig, model_info: dict, corpus: str) -> dict:
    """The manifest's `config` as known before events are rewritten: what must match to resume a run directory."""
    keep = ("model", "categories", "settings", "events", "limit_events", "seed", "mode", "max_new_tokens",
            "unit_size", "rewrite_model", "capture", "layers", "per_cell_samples")
    identity = {k: v for k, v in asdict(config).items() if k in keep}
    for key in ("model", "events", "rewrite_model"):
        identity[key] = _local(identity[key])
    identity["categories"] = list(config.categories)
    identity["settings"] = list(config.settings)
    identity["capture"] = list(config.capture)
    identity.update(
        model_hash=model_info["model_hash"], revision=model_info["revision"], dtype=model_info["dtype"],
        corpus_hash=corpus,
    )
    return identity


def check_resumable(out: Path, identity: dict, partial: bool = False) -> None:
    """Refuse a run directory whose stored configuration differs (in the keys of `identity` only, if partial)."""
    stored = read_manifest(out)["config"]
    keys = set(identity) if partial else set(stored) | set(identity)
    diffs = [f"{k}: stored {stored.get(k)!r}, now {identity.get(k)!r}"
             for k in sorted(keys) if stored.get(k) != identity.get(k)]
    if diffs:
        raise RunDirError(f"{out} was made with a different configuration; use a new --out. Differences: "
                          + "; ".join(diffs))


class Suite:
    """One loaded model and its rendering state, turning work units into result rows."""

    def __init__(self, model, tokenizer, config: RunConfig):
        self.tokenizer = tokenizer
        self.config = config
        self.engine = Engine(model, tokenizer, config.batch_size, config.max_new_tokens)
        probe = prompts.build(SETTING_NAMES[0], "a person", "a person", "joy", "I won.")
        self.chat_format = chat.detect_format(tokenizer, probe)
        self.tries = {s: AnswerTrie.for_scale(tokenizer, get_setting(s).max_rating) for s in config.settings}
        self.context = getattr(model.config, "max_position_embeddings", None)
        self.final_states: torch.Tensor | None = None

    def tokens(self, setting: str, perceiver: str, experiencer: str, event: Event) -> list[int]:
        """Token ids of one rendered prompt."""
        narrative = event.narrative(get_setting(setting).narrative_form)
        prompt = prompts.build(setting, perceiver, experiencer, event.emotion, narrative)
        text, _ = chat.render(self.tokenizer, prompt, self.chat_format)
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def check_lengths(self, events: list[Event]) -> None:
        """Fail before any work if the longest prompt of some event would not fit the model's context."""
        if self.context is None:
            return
        for setting in self.config.settings:
            answer_room = self.config.max_new_tokens if self.config.mode != "score" else 0
            answer_room = max(answer_room, int(self.tries[setting].depth.max()))
            for name in self.config.categories:
                identities = get_category(name).with_unspecified
                longest = max(identities, key=lambda i: len(self.tokens(setting, i, i, events[0])))
                for event in events:
                    n = len(self.tokens(setting, longest, longest, event)) + answer_room
                    if n > self.context:
                        raise ValueError(
                            f"event {event.event_id!r} in setting {setting} makes a prompt of {n} tokens "
                            f"(answer included), longer than the model's context of {self.context}"
                        )

    def rows(self, units: list[WorkUnit]) -> list[dict]:
        """Result rows of `units`, one per prompt, in unit then event order; with the engine's tracer set,
        `self.final_states` holds their final-token states [prompts, hooks, d] afterwards."""
        items = [(u, e) for u in units for e in u.events]
        ids = [self.tokens(u.setting, u.perceiver, u.experiencer, e) for u, e in items]
        mode = self.config.mode
        responses: list = [None] * len(ids)
        if mode != "score":
            decided = {s: partial(answer_decided, max_rating=get_setting(s).max_rating) for s in self.config.settings}
            responses = self.engine.generate(ids, until=[decided[u.setting] for u, _ in items])
        self.final_states = self.engine.final_states if mode != "score" else None
        scores: list = [None] * len(ids)
        if mode != "generate":
            for setting in dict.fromkeys(u.setting for u in units):
                idx = [i for i, (u, _) in enumerate(items) if u.setting == setting]
                for i, s in zip(idx, self.engine.score([ids[i] for i in idx], self.tries[setting])):
                    scores[i] = s
                if mode == "score" and self.engine.final_states is not None:
                    if self.final_states is None:
                        self.final_states = torch.empty(len(ids), *self.engine.final_states.shape[1:])
                    self.final_states[idx] = self.engine.final_states
        rows = []
        for (unit, event), response, score in zip(items, responses, scores):
            if response is not None:
                value = parse_intensity(response.text, get_setting(unit.setting).max_rating)
                intensity, refused = (math.nan, True) if value is None else (float(value), False)
            else:
                intensity, refused = float(score.greedy), False
            rows.append({
                "unit_id": unit.unit_id, "setting": unit.setting, "category": unit.category,
                "perceiver": unit.perceiver, "experiencer": unit.experiencer, "event_id": event.event_id,
                "emotion": event.emotion, "response": None if response is None else response.text, "intensity": intensity,
                "refused": refused, "truncated": None if response is None else response.truncated,
                "score_answer": float(score.greedy) if score else math.nan,
                "expected_intensity": score.expected if score else math.nan,
                "numeric_mass": score.numeric_mass if score else math.nan,
            })
        return rows


def unit_batches(units, prompts_per_batch: int):
    """Group consecutive units into batches of about `prompts_per_batch` prompts."""
    batch: list[WorkUnit] = []
    size = 0
    for unit in units:
        batch.append(unit)
        size += len(unit.events)
        if size >= prompts_per_batch:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def run(config: RunConfig, out: str | Path, where: Place | None = None, progress: bool = True) -> Path:
    """Run (or resume) this process's share of the suite into `out`; every check happens before any row is written.

    Under torchrun or accelerate, each rank takes every world_size-th work unit and writes its own part files;
    rank 0 checks the run directory, writes the manifest and any T2 rewrites before the others go on. Each rank
    holds a lock on its files from before its first write to its end, so a second process started on the same
    run directory and rank fails at once instead of losing or duplicating rows.
    """
    out = Path(out)
    where = where or place()
    config.validate()
    events, corpus = load_corpus(config)
    start(where)
    if where.is_main:
        prepare_out_dir(out)  # fail fast, before the model loads
    device = device_for(config.device, where)
    model, tokenizer, model_info = models.load(config.model, device, config.dtype, config.trust_remote_code)
    identity = _identity(config, model_info, corpus)
    with RunLock(out, where.rank):
        resuming = prepare_out_dir(out) if where.is_main else True  # again: another process may have finished
        if where.is_main and resuming:
            check_resumable(out, identity, partial=True)  # before any rewriting work
        seal_logs(out, where.rank)  # rows a killed process of this rank logged
        if any(get_setting(s).narrative_form == "third_person" for s in config.settings):
            if where.is_main:
                events = ensure_third_person(events, config, out, model, tokenizer)
            barrier(where)
            events = ensure_third_person(events, config, out, model, tokenizer)
        suite = Suite(model, tokenizer, config)
        suite.check_lengths(events)
        recorder = _recorder(config, suite, out, where) if config.capture else None
        identity |= {"events_hash": corpus_hash(events), "n_events": len(events), "chat_format": suite.chat_format}
        if where.is_main and not resuming:
            origin = provenance() | {"device": model_info["device"], "batch_size": config.batch_size,
                                     "world_size": where.world_size}
            write_json_atomic(out / MANIFEST, {"config": identity, "model": model_info, "provenance": origin})
        barrier(where)
        check_resumable(out, identity)
        _work(config, suite, recorder, events, out, where, progress)
        seal_unlocked_logs(out, where.rank)  # logs of ranks of an earlier, killed run that no process holds
    return out


def _work(config: RunConfig, suite: Suite, recorder, events: list[Event], out: Path, where: Place,
          progress: bool) -> None:
    """Stream this rank's unfinished work units through the suite into its row log (and the recorder)."""
    done = finished_units(out)

    def mine():
        return work_units(config.settings, config.categories, events, config.unit_size, where.rank, where.world_size)

    if recorder is not None:
        if where.is_main:
            recorder.identity_pass(config.settings, config.categories, events[0])
        barrier(where)
        recorder.plan(list(mine()), out)

    def todo():
        return (u for u in mine() if u.unit_id not in done or (recorder is not None and recorder.needs(u)))

    event_ids = [e.event_id for e in events]
    total = sum(len(u.events) for u in todo())
    label = f"{config.model} {config.mode}" + (f" rank {where.rank}" if where.world_size > 1 else "")
    with tqdm(total=total, unit="prompt", disable=not progress, desc=label) as bar, RowLog(out, where.rank) as log:
        for batch in unit_batches(todo(), config.batch_size):
            rows = suite.rows(batch)
            fresh = [r for r in rows if r["unit_id"] not in done]
            if fresh:
                log.write(fresh)
            if recorder is not None and suite.final_states is not None:
                recorder.add(batch, suite.final_states, event_ids)
            bar.update(len(rows))
    if recorder is not None:
        recorder.flush()


def _recorder(config: RunConfig, suite: "Suite", out: Path, where: Place):
    """The activation recorder of a capture run (the one place a run reaches into `activations`)."""
    from activations.capture import ResidualTrace, decoder_layers, parse_layers
    from activations.recorder import Recorder

    model = suite.engine.model
    layers = parse_layers(config.layers, len(decoder_layers(model)))
    recorder = Recorder(model, suite.tokenizer, suite.chat_format, out, config.capture, layers,
                        config.per_cell_samples, config.seed, config.batch_size, where.rank)
    if "final" in recorder.kinds:
        suite.engine.tracer = lambda positions: ResidualTrace(model, layers, positions=positions)
    return recorder
