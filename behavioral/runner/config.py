"""A run's configuration: every setting that decides its rows (RunConfig), each declared once on its field (its help,
check, suite default, identity and sweep tables: behavioral.runner.settings), the suite's defaults applied, and the
identity a resume must match. Nothing here loads a model or imports torch, so the command
line and a sweep file's every run are checked before the engine is imported."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
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
from behavioral.core.options import SEED_MAX, SIZE_MAX, check_number, comma_values, quoted
from behavioral.runner.settings import (
    Check, added_since, checks, flag, identity_fields, recorded_checks, setting, suite_defaults,
)
from behavioral.suite.registry import get_declaration
from behavioral.suite.protocol import SuiteDeclaration, local_path

BACKENDS = ("engine", "vllm")  # what runs the model: this toolkit's engine, or vLLM (behavioral.inference.vllm.engine)


def run_defaults(suite: SuiteDeclaration) -> dict[str, Any]:
    """The decoding settings' defaults for `suite`: the generic ones, replaced by the suite's own."""
    return RUN_DEFAULTS | dict(suite.run_defaults)


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


def _numbers(value: Any, name: str) -> None:
    """The record of vLLM's engine arguments that change the numbers (`vllm_args.numbers`): a JSON object."""
    if not isinstance(value, dict):
        raise ValueError(f"{name} is {quoted(value)}; expected a JSON object of vLLM's engine arguments")


def _captured(value: str, suite: SuiteDeclaration) -> tuple[str, ...]:
    """The --capture flag's comma list as capture kinds (`all`: every kind the suite has)."""
    names = tuple(comma_values(value))
    return (suite.capture.kinds if suite.capture else ()) if names == ("all",) else names


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

    suite: str = setting(help="the suite's name", identity=True, flag=None)
    model: str = setting(help="Hugging Face id, local folder, .gguf file or smollm2-135m", check=check_length,
                         identity=True, flag={"required": True})
    options: Any = None  # the suite's options (a frozen dataclass, see Suite.options), declared by the suite
    mode: str | None = setting(None, "generate: decode a reply and parse it; score: the distribution over the answer "
                               "set (default {default})", check=_one_of(MODES), identity=True,
                               sweep=("run", "suite"), flag={"choices": MODES}, suite_default="generate")
    seed: int | None = setting(None, "seeds data samples, sampling streams and per-cell samples (default {default})",
                               check=_between(0, SEED_MAX), identity=True, sweep=("run", "suite"), suite_default=0)
    temperature: float | None = setting(None, "0: greedy decoding (default {default:g})", check=_temperature,
                                        identity=True, sweep=("run", "suite"), suite_default=0.0)
    top_p: float | None = setting(None, "default {default:g}", check=_top_p, identity=True, sweep=("run", "suite"),
                                  suite_default=1.0)
    samples: int | None = setting(None, "sampled replies per item (default {default} with --temperature above 0; 1 "
                                  "when greedy and in score mode)", check=_between(1), identity=True,
                                  sweep=("run", "suite"), suite_default=1)
    max_new_tokens: int | None = setting(None, "decoding limit (default {default}); a reply stops earlier once its "
                                         "answer is decided", check=_between(1), identity=True,
                                         sweep=("run", "suite"), suite_default=128)
    prompt_format: str | None = setting(None, "auto: the chat template where the tokenizer has one, else plain text "
                                        "(default {default})", check=_one_of(tuple(chat.REQUESTS)), identity=True,
                                        sweep=("run", "model", "suite"), flag={"choices": tuple(chat.REQUESTS)},
                                        suite_default="auto")
    device: str = setting("auto", "auto, cpu, cuda, cuda:N, mps, or split (a model larger than one GPU over the GPUs, "
                          "then the host; split:0=70GiB,cpu=200GiB caps each device)", check=check_device,
                          sweep=("run", "model"))
    dtype: str = setting("auto", "auto (bf16 on CUDA, else fp32), fp32, bf16, fp16", check=_one_of(("auto", *DTYPES)),
                         sweep=("run", "model"))
    batch_size: int = setting(16, "prompts per forward pass; decides speed, not rows (default {default})",
                              check=_between(1), sweep=("run", "model", "suite"), flag={"metavar": "N"})
    unit_size: int = setting(32, "items per work unit (the unit of resume; default {default})", check=_between(1),
                             identity=True, sweep=("run", "suite"), flag={"metavar": "N"})
    trust_remote_code: bool = setting(False, "let a model folder or hub repository run its own code (only for a "
                                      "model you trust)", sweep=("model",))
    capture: tuple[str, ...] = setting((), "residual-stream capture: a comma list of the suite's capture kinds "
                                       "(intergroup: persona, experiencer, final) or all", identity=True,
                                       sweep=("capture",), key="kinds", flag={"default": ""},
                                       read=lambda value, suite: _captured(value, suite))
    layers: str = setting("all", "blocks to capture (hook_embed always is): all, or a comma list of block numbers "
                          "(negative ones count back from the last), inclusive ranges a-b, first/middle/last and hook "
                          "names, such as 0,4,8 or 0-5,-1; write --layers=-4--1 for a value that starts with -",
                          check=check_layer_spec, identity=True, sweep=("capture",))
    per_cell_samples: int = setting(0, "single-prompt final-token states kept per cell (seeded), besides the "
                                    "per-cell means (default {default})", check=_between(0), identity=True,
                                    sweep=("capture",), flag={"metavar": "N"})
    store_probs: bool = setting(False, "score and both modes: keep every label's probability on each row, whatever "
                                "the answer set's size (sets of up to 32 labels always keep them; each work unit's "
                                "mean is always kept)", identity=True, since=False, sweep=("run", "suite"))
    answer_tree: str = setting("lazy", "score and both modes: lazy reads the answer tree's nodes only while they can "
                               "move the expected value or a probability by more than --tree-tolerance, and records "
                               "the bounds on each row; full reads every node (exact, slower)",
                               check=_one_of(TREES), since="full", sweep=("run", "suite"), flag={"choices": TREES})
    tree_tolerance: float = setting(TREE_TOLERANCE, "--answer-tree lazy: the most a row's expected value (in its "
                                    "scale's points) or any of its probabilities may differ from the full tree's "
                                    "(default {default:g})", check=check_tolerance, sweep=("run", "suite"),
                                    flag={"metavar": "X"})
    backend: str = setting("engine", "engine: this toolkit's batched engine (hooks: capture, patching, steering); "
                           "vllm: vLLM (pip install -e '.[vllm]'), the same rows (sampled replies aside), tensor and "
                           "pipeline parallel across GPUs and nodes, sent 4 x --batch-size prompts at a time",
                           check=_one_of(BACKENDS), since="engine", sweep=("model",), flag={"choices": BACKENDS})
    vllm_args: tuple[tuple[str, Any], ...] = setting(
        (), "--backend vllm: more of vLLM's engine arguments (the fields of vllm.EngineArgs), VALUE read as JSON where "
            "it parses, else as text: max_model_len=8192 enforce_eager=true",
        flag={"nargs": "+", "action": "extend", "type": vllm_args.engine_arg, "metavar": "KEY=VALUE", "default": []},
        read=lambda value, suite: tuple(value), recorded=_numbers)

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
        check_recorded(stored, Path(run_dir) / MANIFEST)
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


# Each run setting's own check of its value; RunConfig.problems adds what the settings' combination and the suite
# decide (the capture kinds).
SETTING_CHECKS = checks(RunConfig)
# The decoding settings' defaults; a suite replaces some with its own (Suite.run_defaults, e.g. its authors').
RUN_DEFAULTS = suite_defaults(RunConfig)
IDENTITY = identity_fields(RunConfig)
# How each setting's value in a manifest is checked: the JSON form of its type, then its own check.
RECORDED = recorded_checks(RunConfig)
# identity settings newer than some manifests (flat keys): the value those runs ran with, where the run has the key
ADDED = added_since(RunConfig) | {"options.exclude_events": []}


def check_setting(field: str, value: Any, name: str) -> None:
    """Raise ValueError naming `name` where `value` (of the field's type) is not one RunConfig's `field` may take."""
    if field in SETTING_CHECKS:
        SETTING_CHECKS[field](value, name)


def check_recorded(config: Mapping[str, Any], path: Path) -> None:
    """A RunDirError naming the first run setting a manifest's `config` (read from `path`) records in a form or with a
    value the setting does not take (RECORDED): what the run directory's own reader (read_manifest, below this
    layer) leaves to the settings' declarations."""
    for name, check in RECORDED.items():
        if name in config:
            try:
                check(config[name], f"config.{name}")
            except ValueError as err:
                raise RunDirError(f"{path}: {err} (is the manifest damaged or edited?)") from None


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
