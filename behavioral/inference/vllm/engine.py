"""The vLLM backend of a run (`--backend vllm`): vLLM decodes and scores the run's prompts, on one device or tensor and
pipeline parallel across GPUs and nodes, into the engine's rows: a reply stops where the engine's stops (a logits
processor ends a reply once it decides its answer) and score mode reads the same answer tree and normaliser. vLLM is
optional: it is imported when a model loads, and a run that asks for it without it is refused in one line."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import tempfile
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from behavioral.inference import models
from behavioral.inference.vllm.args import vllm_device
from behavioral.inference.answer_space import AnswerTrie, Scores
from behavioral.core.distributed import Place
from behavioral.inference.engine import Generation, Sampling, Until, stop_token_ids
from behavioral.core.extras import require
from behavioral.inference.vllm.readout import SLOTS, child_tokens, paths, tree_logits

# The logits processors vLLM's workers load by name, and the keys of a request's extra_args they read.
PROCESSORS = ("behavioral.inference.vllm.processors:DecidedStop", "behavioral.inference.vllm.processors:TreeReadout")
UNTIL, STOP = "empathy_gap_until", "empathy_gap_stop"
SPEC, POSITION = "empathy_gap_spec", "empathy_gap_position"
# vLLM's engine arguments on a CPU, where its defaults do not serve: KV cache blocks of 32 tokens (its smallest; the
# default 128 left each of score mode's tree requests most of a short prompt to compute again), and a KV cache of
# 1 GiB. vLLM's own budget there is a fraction of the memory node less the worker's resident memory, which holds
# the weights and what the worker inherited from its parent: a fraction that served one process was refused
# ("requested memory for kv -0.55 GiB") in a test process that had grown, so the cache is sized in bytes.
CPU_DEFAULTS = {"block_size": 32, "kv_cache_memory_bytes": 1 << 30}
# the engine arguments that size the KV cache themselves, and with either the default size is not passed
CACHE_SIZES = ("gpu_memory_utilization", "kv_cache_memory_bytes")


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
    named = dict(engine_args)
    defaults = {} if device != "cpu" else {key: value for key, value in CPU_DEFAULTS.items()
                                           if not (key == "kv_cache_memory_bytes" and named.keys() & set(CACHE_SIZES))}
    try:
        llm = vllm.LLM(model=path, tokenizer=path, dtype=dtype_name, trust_remote_code=trust_remote_code, seed=0,
                       enable_prefix_caching=True, logits_processors=list(PROCESSORS),
                       logprobs_mode="processed_logits", **(defaults | named))
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
            raise ValueError("sampling needs one seed per prompt (behavioral.inference.engine.stream_seed)")
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
        and each node's path), whose logits are replaced by the position's readout (behavioral.inference.vllm.readout)."""
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
