"""What runs a run's prompts, declared once: the calls the run loop makes of a loaded backend (`Backend`: generate,
score, both from one prompt forward, and the hook block capture needs), and per backend how its model loads, which
device it runs on, what the run records of it and whether a suite's data preparation may generate with it
(`BackendKind`). The engine and vLLM implement it; the run loop names neither."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from behavioral.core.distributed import Place, device_for
from behavioral.inference import models
from behavioral.inference.answer_space import AnswerTrie, Scores
from behavioral.inference.engine import Engine, Generation, Sampling, Until
from behavioral.inference.lazy_tree import AnswerTree
from behavioral.inference.vllm import engine as vllm
from behavioral.inference.vllm.args import vllm_device


class Backend(Protocol):
    """A loaded model answering token-id prompts, row for row as the engine does (lm-eval's `LM` for this toolkit's
    three calls). `seeds[i]` is prompt i's own random stream when `sampling` samples."""

    def hooked(self, tracer: Callable | None = None) -> AbstractContextManager[Backend]: ...

    def generate(self, prompts: Sequence[list[int]], until: Sequence[Until | None] | None = None,
                 sampling: Sampling | None = None, seeds: Sequence[int] | None = None) -> list[Generation]: ...

    def score(self, prompts: Sequence[list[int]], trie: AnswerTrie) -> list[Scores]: ...

    def generate_and_score(self, prompts: Sequence[list[int]], trie: AnswerTrie,
                           until: Sequence[Until | None] | None = None, sampling: Sampling | None = None,
                           seeds: Sequence[int] | None = None) -> list[Generation]: ...


class Settings(Protocol):
    """The run settings a backend reads (a RunConfig has them all)."""

    model: str
    dtype: str
    device: str
    trust_remote_code: bool
    batch_size: int
    max_new_tokens: int
    answer_tree: str
    tree_tolerance: float
    vllm_args: tuple[tuple[str, Any], ...]


class BackendKind(Protocol):
    """How one backend's model loads and starts, and what a run records of it."""

    renders_before_loading: bool  # its tokenizer renders and bounds the prompts before the weights load

    def device(self, settings: Settings, where: Place) -> str:
        """The device this process's model runs on (what decides its resolved dtype)."""
        ...

    def load(self, settings: Settings, where: Place, load: Callable[..., tuple] = models.load) -> tuple:
        """(model, tokenizer, info) of the run's model on this process's device."""
        ...

    def start(self, model: Any, tokenizer: Any, settings: Settings) -> Backend:
        """The loaded model as a Backend the run loop calls."""
        ...

    def writer(self, model: Any) -> Any:
        """The model a suite's data preparation may generate with (its rewrites), or None where it cannot."""
        ...

    def origin(self, settings: Settings, info: dict) -> dict:
        """What the manifest records of the backend beside its name (versions, engine arguments)."""
        ...


class EngineBackend:
    """This toolkit's engine over a Hugging Face model (hooks: capture, patching, steering)."""

    renders_before_loading = True

    def device(self, settings: Settings, where: Place) -> str:
        return models.resolve_device(device_for(settings.device, where))

    def load(self, settings: Settings, where: Place, load: Callable[..., tuple] = models.load) -> tuple:
        return load(settings.model, device_for(settings.device, where), settings.dtype, settings.trust_remote_code)

    def start(self, model: Any, tokenizer: Any, settings: Settings) -> Backend:
        return Engine(model, tokenizer, settings.batch_size, settings.max_new_tokens,
                      answer_tree=AnswerTree(settings.answer_tree, settings.tree_tolerance))

    def writer(self, model: Any) -> Any:
        return model

    def origin(self, settings: Settings, info: dict) -> dict:
        return {}


class VllmBackend:
    """vLLM (behavioral.inference.vllm.engine): no hooks; it renders and bounds the context once it loads."""

    renders_before_loading = False

    def device(self, settings: Settings, where: Place) -> str:
        return vllm_device()

    def load(self, settings: Settings, where: Place, load: Callable[..., tuple] = models.load) -> tuple:
        return vllm.load(settings.model, settings.dtype, settings.trust_remote_code, settings.vllm_args, where)

    def start(self, model: Any, tokenizer: Any, settings: Settings) -> Backend:
        return vllm.VllmEngine(model, tokenizer, settings.max_new_tokens)

    def writer(self, model: Any) -> Any:
        return None

    def origin(self, settings: Settings, info: dict) -> dict:
        return {"vllm_version": info["vllm_version"], "vllm_args": dict(settings.vllm_args)}


BACKENDS: dict[str, BackendKind] = {"engine": EngineBackend(), "vllm": VllmBackend()}
