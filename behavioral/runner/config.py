"""A run's configuration: every setting that decides its rows (RunConfig), each setting's check, the suite's
defaults applied, and the identity a resume must match. Nothing here loads a model or imports torch, so the command
line and a sweep file's every run are checked before the engine is imported."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from activations.layer_spec import check_layer_spec
from behavioral.inference import chat
from behavioral.inference.vllm import args as vllm_args
from behavioral.rundir.manifest import (
    MANIFEST, MODES, SCHEMA_VERSION, TREE_TOLERANCE, TREES, RunDirError, check_tolerance, options_of, read_manifest,
)
from behavioral.inference.model_source import DTYPES, check_device, check_length
from behavioral.core.options import SEED_MAX, SIZE_MAX, check_number, quoted
from behavioral.suite.registry import get_declaration
from behavioral.suite.protocol import SuiteDeclaration, local_path

# The decoding settings' defaults; a suite replaces some with its own (Suite.run_defaults, e.g. its authors').
RUN_DEFAULTS = {"mode": "generate", "seed": 0, "temperature": 0.0, "top_p": 1.0, "samples": 1, "max_new_tokens": 128,
                "prompt_format": "auto"}
BACKENDS = ("engine", "vllm")  # what runs the model: this toolkit's engine, or vLLM (behavioral.inference.vllm.engine)


def run_defaults(suite: SuiteDeclaration) -> dict[str, Any]:
    """The decoding settings' defaults for `suite`: the generic ones, replaced by the suite's own."""
    return RUN_DEFAULTS | dict(suite.run_defaults)


Check = Callable[[Any, str], None]  # raises ValueError naming the value `name` (a flag, or a sweep file's key)


def _one_of(known: Sequence[str]) -> Check:
    """A check that a value is one of `known`."""
    def check(value: Any, name: str) -> None:
        if value not in known:
            raise ValueError(f"{name} is {quoted(value)}; expected one of {', '.join(known)}")
    return check


def _between(low: int, high: int = SIZE_MAX) -> Check:
    """A check that a whole number lies in `low`..`high` (check_number, which states every option's bounds)."""
    def check(value: Any, name: str) -> None:
        check_number(value, name, low, high)
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
    "model": check_length, "mode": _one_of(MODES), "seed": _between(0, SEED_MAX), "temperature": _temperature,
    "top_p": _top_p, "samples": _between(1), "max_new_tokens": _between(1),
    "prompt_format": _one_of(tuple(chat.REQUESTS)), "device": check_device,
    "dtype": _one_of(("auto", *DTYPES)), "batch_size": _between(1), "unit_size": _between(1),
    "layers": check_layer_spec, "per_cell_samples": _between(0), "backend": _one_of(BACKENDS),
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
    0 outside score mode), else 1.

    >>> from behavioral import RunConfig
    >>> config = RunConfig("intergroup", "smollm2-135m", options, mode="score", dtype="fp32",
    ...                    capture=("persona", "final"))
    >>> config.mode, config.temperature
    ('score', 0.0)
    """

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
        defaults = run_defaults(get_declaration(self.suite))
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
        options = options_of(manifest, get_declaration(manifest.suite).Options, Path(run_dir) / MANIFEST)
        return replace(cls(**kept | {"options": options, "capture": tuple(stored.get("capture", ()))}), **changes)

    def validate(self, suite: SuiteDeclaration, named: Callable[[str], str] = flag) -> None:
        """Raise ValueError naming the first of the configuration's `problems` (a bad value or combination)."""
        found = self.problems(suite, named)
        if found:
            raise ValueError(found[0])

    def problems(self, suite: SuiteDeclaration, named: Callable[[str], str] = flag) -> list[str]:
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
        return found + vllm_args.run_problems(self.backend, self.vllm_args, self.trust_remote_code, self.capture,
                                             self.device, named)


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
    if changing := vllm_args.numbers(config.vllm_args):  # only a vLLM run takes them (validate)
        identity["vllm_args"] = changing  # quantization, a KV-cache dtype, ...: other numbers than the engine's
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
