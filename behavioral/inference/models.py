"""Loading a causal LM and its tokenizer from a hub id, a local folder, a .gguf file or the embedded alias."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import re
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from behavioral.inference.gguf_header import gguf_metadata
from behavioral.inference.gguf_parsing import parsed_once
from behavioral.inference.model_source import (
    DTYPES, SPLIT, ModelLoadError, ModelSource, check_device, memory_limits, resolve_source, split_placement,
)
from behavioral.core.extras import require
from behavioral.core.options import quoted

# transformers' modules whose own `tqdm` draws a bar on every load: de-quantizing a .gguf file's tensors (imported
# only to load one), and putting the weights into the modules
GGUF_BAR, WEIGHTS_BAR = "transformers.modeling_gguf_pytorch_utils", "transformers.core_model_loading"


def resolve_device(device: str) -> str:
    """`auto` becomes cuda when a GPU is visible, else cpu; a split becomes the kind of device it starts on (which
    decides the auto dtype)."""
    check_device(device)
    if device == "auto" or SPLIT.fullmatch(device):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"--device {device!r} asked for, but torch sees no CUDA device")
    if device.startswith("cuda:") and int(device[5:]) >= torch.cuda.device_count():
        raise ModelLoadError(f"--device {device!r} asked for, but torch sees {torch.cuda.device_count()} CUDA "
                             "devices (cuda:0 is the first)")
    if device == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"--device {device!r} asked for, but torch sees no MPS device")
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """`auto` is bf16 on CUDA and fp32 elsewhere: on a CPU with native bf16 (AVX512-BF16) fp32 measured faster for
    both generate and score (docs/BENCHMARKS.md), and only fp32 reproduces samples across batch sizes."""
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return getattr(torch, DTYPES[dtype])
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


@dataclass(frozen=True)
class ModelConfig:
    """What a model's config says before its weights load: its decoder blocks and the longest context it takes (None
    where it states none)."""

    n_layers: int | None
    context: int | None


def read_config(spec: str, trust_remote_code: bool = False) -> ModelConfig:
    """The ModelConfig of a model argument from its config alone: a .gguf file's header (behavioral.inference.gguf_header, not
    gguf's parse of the whole file), else transformers' AutoConfig of its config.json (its text model's, for a
    multimodal one), the names the loaded model's config has."""
    source = resolve_source(spec)
    if source.gguf_file:
        path = Path(source.path) / source.gguf_file
        try:
            arch = gguf_metadata(path, ("general.architecture",)).get("general.architecture")
            found = gguf_metadata(path, (f"{arch}.block_count", f"{arch}.context_length"))
        except (OSError, ValueError) as err:
            raise ModelLoadError(f"cannot read model {spec!r}: {err}") from err
        return ModelConfig(found.get(f"{arch}.block_count"), found.get(f"{arch}.context_length"))
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(source.path, **_source_kwargs(source, trust_remote_code)).get_text_config()
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"cannot read the config of model {spec!r}: {err}") from err
    return ModelConfig(getattr(config, "num_hidden_layers", None), getattr(config, "max_position_embeddings", None))


def shared_parse(spec: str):
    """While active, a .gguf model's file is parsed once for all that reads it (the tokenizer of the checks made
    before its weights load, then the load); else nothing."""
    return _parsed_once(resolve_source(spec))


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
    """While loading from a .gguf file, each parse of it is shared (behavioral.inference.gguf_parsing); else nothing."""
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
