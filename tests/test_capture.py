"""Residual-stream capture: torch hooks against HF's hidden states, hook hygiene, and the three backends agreeing."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from activations.backends import BACKENDS, capture
from activations.capture import (
    EMBED_HOOK, EMBED_LAYER, ResidualHooks, ResidualTrace, decoder_layers, embedding, hook_layer, hook_name,
    hook_names, parse_layers, resid_post, select_hooks,
)
from behavioral.engine import Batch, Engine, left_pad

TEXTS = ["Hi.", "How much joy did the person feel while experiencing the event?", "a person from Iran"]
TOL = 1e-5


def chat_ids(tokenizer, text: str, system: str | None = None) -> list[int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def prompts_and_positions(tokenizer):
    """Three chat prompts of different lengths; positions: each prompt's last token and one in its middle."""
    prompts = [chat_ids(tokenizer, t) for t in TEXTS]
    assert len({len(p) for p in prompts}) == 3
    return prompts, [[len(p) - 1, len(p) // 2] for p in prompts]


@pytest.fixture(params=["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def lm(request):
    """(model, tokenizer) as loaded: default attention implementation (sdpa)."""
    if request.param == "tiny":
        return request.getfixturevalue("tiny_model"), request.getfixturevalue("tiny_tokenizer")
    model, tokenizer, _ = request.getfixturevalue("smollm2")
    return model, tokenizer


_EAGER: dict = {}


@pytest.fixture
def eager_lm(lm):
    """A deep copy of the model in eager attention, the implementation TransformerLens's bridge computes with."""
    model, tokenizer = lm
    if id(model) not in _EAGER:
        eager = copy.deepcopy(model)
        eager.set_attn_implementation("eager")
        _EAGER[id(model)] = (model, eager)  # keep `model` alive so its id is not reused
    return _EAGER[id(model)][1], tokenizer


def scaled_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Max abs difference per hook divided by that hook's max |value| (SmolLM2's residual stream reaches ~700)."""
    scale = np.abs(b).max(axis=(1, 2, 3), keepdims=True)
    return float((np.abs(a - b) / scale).max())


def hooks(model: nn.Module) -> dict[str, tuple]:
    """Every module's forward (pre-)hook ids. transformers 5 leaves hooks of its own on the decoder layers and
    attention modules after the first forward with output_hidden_states, so "no hooks" means "the same as before"."""
    return {name: (tuple(m._forward_hooks), tuple(m._forward_pre_hooks)) for name, m in model.named_modules()}


# --- names and layers ---------------------------------------------------------------------------------------------

def test_hook_names():
    assert hook_names(3) == ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post",
                             "blocks.2.hook_resid_post"]
    assert hook_names(30, [4, 0]) == ["hook_embed", "blocks.4.hook_resid_post", "blocks.0.hook_resid_post"]
    with pytest.raises(ValueError, match="0..2"):
        hook_names(3, [3])


def test_hook_name_and_layer_are_inverse():
    assert hook_name(EMBED_LAYER) == EMBED_HOOK == "hook_embed" and hook_layer("hook_embed") == EMBED_LAYER == -1
    for layer in (0, 7, 31):
        assert hook_layer(hook_name(layer)) == layer
    assert hook_name(np.int64(3)) == "blocks.3.hook_resid_post"
    assert [hook_layer(n) for n in hook_names(4, [2, 0])] == [-1, 2, 0]


@pytest.mark.parametrize("bad", [-2, 1.0, "3", True, None])
def test_hook_name_refuses_what_is_no_layer(bad):
    with pytest.raises(ValueError, match="no hook for layer"):
        hook_name(bad)


@pytest.mark.parametrize("bad", ["blocks.x.hook_resid_post", "blocks.3.hook_resid_pre", "hook_embed ", "embed",
                                 "blocks.-1.hook_resid_post", 3])
def test_hook_layer_refuses_unknown_names(bad):
    with pytest.raises(ValueError, match="unknown hook name"):
        hook_layer(bad)


@pytest.mark.parametrize("spec, expected", [
    ("all", list(range(30))), ("ALL ", list(range(30))), ("0,4,8", [0, 4, 8]), ("8, 0,4,4", [0, 4, 8]),
    ("29", [29]), ("0", [0]),
])
def test_parse_layers(spec, expected):
    assert parse_layers(spec, 30) == expected


@pytest.mark.parametrize("spec, word", [
    ("30", "30"), ("-1", "-1"), ("0,x", "'x'"), ("", "''"), ("1,,2", "'1,,2'"), ("1.5", "'1.5'"), ("al", "'al'"),
])
def test_parse_layers_errors(spec, word):
    with pytest.raises(ValueError) as err:
        parse_layers(spec, 30)
    assert word in str(err.value) and "0..29" in str(err.value)


CAPTURED = [EMBED_HOOK, "blocks.0.hook_resid_post", "blocks.4.hook_resid_post", "blocks.8.hook_resid_post"]


@pytest.mark.parametrize("spec, layers", [
    ("all", [-1, 0, 4, 8]), ("embed", [-1]), ("first,last", [0, 8]), ("middle", [4]), ("8,0", [0, 8]),
    ("-1", [8]), ("-3,embed", [-1, 0]), ("4, 4", [4]),
])
def test_select_hooks_names_captured_hooks_in_capture_order(spec, layers):
    assert select_hooks(spec, CAPTURED) == [hook_name(layer) for layer in layers]


@pytest.mark.parametrize("spec, hooks, message", [
    ("7", CAPTURED, "--probe-layers: block 7 was not captured; captured: [0, 4, 8]"),
    ("-4", CAPTURED, "--probe-layers: block -4 was not captured"),
    ("top", CAPTURED, "--probe-layers: unknown entry 'top'"),
    ("embed", CAPTURED[1:], "--probe-layers embed: the capture holds no token embeddings"),
    ("last", CAPTURED[:1], "--probe-layers last: the capture holds no block outputs"),
])
def test_select_hooks_names_the_flag_and_the_entry_it_refuses(spec, hooks, message):
    with pytest.raises(ValueError) as err:
        select_hooks(spec, hooks, "--probe-layers")
    assert message in str(err.value)


def test_locate_modules(tiny_model):
    assert decoder_layers(tiny_model) is tiny_model.model.layers
    assert embedding(tiny_model) is tiny_model.model.embed_tokens
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32,
                                           bos_token_id=0, eos_token_id=0))
    assert decoder_layers(gpt2) is gpt2.transformer.h
    assert embedding(gpt2) is gpt2.transformer.wte
    with pytest.raises(ValueError, match="Sequential"):
        decoder_layers(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="Linear"):
        embedding(nn.Linear(2, 2))


class _TupleLayer(nn.Module):
    def forward(self, hidden):
        return hidden * 2, "attention weights"


class _Toy(nn.Module):
    """Layers returning (hidden, extra) tuples, as older transformers decoder layers do."""

    def __init__(self):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(10, 4)
        self.model.layers = nn.ModuleList([_TupleLayer(), _TupleLayer()])

    def forward(self, input_ids, attention_mask=None, **kwargs):
        hidden = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            hidden = layer(hidden)[0]
        return hidden


def test_tuple_layer_outputs():
    toy = _Toy()
    ids = torch.tensor([[1, 2, 3]])
    got = resid_post(toy, ids, positions=torch.tensor([[2, 0]]), layers=[1])
    embed = toy.model.embed_tokens(ids)[:, [2, 0]].detach()
    assert torch.equal(got, torch.stack([embed, 4 * embed]))


def test_an_edit_is_what_the_model_goes_on_with(tiny_model):
    """Shifting hook_embed equals running the model on shifted embeddings, shifting the last block's output equals
    applying the final norm and head to the shifted output; the states kept are the edited ones, and `calls` counts
    the forwards through each point."""
    ids = torch.tensor([[5, 6, 7, 8]])
    shift = torch.linspace(-1, 1, tiny_model.config.hidden_size)
    with torch.inference_mode():
        embeds = tiny_model.model.embed_tokens(ids) + shift
        from_embeds = tiny_model(inputs_embeds=embeds).logits
        with ResidualTrace(tiny_model) as plain:
            unedited = tiny_model(input_ids=ids).logits
        with ResidualHooks(tiny_model, [EMBED_LAYER], edit=lambda layer, h: h + shift) as at_embed:
            shifted_embed = tiny_model(input_ids=ids).logits
        with ResidualHooks(tiny_model, [1], edit=lambda layer, h: h + shift) as at_last:
            for _ in range(2):
                shifted_last = tiny_model(input_ids=ids).logits
        from_last = tiny_model.lm_head(tiny_model.model.norm(plain["blocks.1.hook_resid_post"] + shift))
    assert not torch.allclose(shifted_embed, unedited) and not torch.allclose(shifted_last, unedited)
    assert torch.allclose(shifted_embed, from_embeds, atol=1e-5)
    assert torch.equal(at_embed["hook_embed"], embeds) and at_embed.calls == {EMBED_LAYER: 1}
    assert torch.allclose(shifted_last, from_last, atol=1e-5)
    assert torch.equal(at_last["blocks.1.hook_resid_post"], plain["blocks.1.hook_resid_post"] + shift)
    assert at_last.calls == {1: 2} and at_last.names == ["blocks.1.hook_resid_post"]


def test_edit_replaces_tuple_outputs_and_refuses_in_range_only(tiny_model):
    toy = _Toy()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad(), ResidualHooks(toy, [0], edit=lambda layer, h: torch.zeros_like(h)) as hooks:
        out = toy(ids)
    assert torch.equal(out, torch.zeros_like(out)) and hooks.calls == {0: 1}
    with pytest.raises(ValueError, match="-1..1"):
        ResidualHooks(tiny_model, [2])
    with pytest.raises(ValueError, match="-1..1"):
        ResidualHooks(tiny_model, [-2])


# --- torch hooks --------------------------------------------------------------------------------------------------

def test_hooks_equal_output_hidden_states(lm):
    model, tokenizer = lm
    prompts, _ = prompts_and_positions(tokenizer)
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, "cpu")
    with torch.inference_mode(), ResidualTrace(model) as trace:
        hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    n = len(decoder_layers(model))
    assert len(hidden) == n + 1 and trace.names == hook_names(n)
    real = mask.bool()
    assert torch.equal(trace["hook_embed"], hidden[0])
    for layer in range(n - 1):
        got, want = trace[f"blocks.{layer}.hook_resid_post"], hidden[layer + 1]
        assert (got - want)[real].abs().max() <= TOL
    # The last hook is the last layer's output before the final norm; HF's hidden_states[-1] is after it.
    last = trace[f"blocks.{n - 1}.hook_resid_post"]
    assert (last - hidden[-1])[real].abs().max() > 1e-2
    with torch.inference_mode():
        assert (model.model.norm(last) - hidden[-1])[real].abs().max() <= TOL
    assert trace.stacked().shape == (n + 1, *ids.shape, model.config.hidden_size)


def test_positions_keep_only_chosen_tokens(tiny_model, tiny_tokenizer):
    prompts, _ = prompts_and_positions(tiny_tokenizer)
    ids, mask = left_pad(prompts, tiny_tokenizer.pad_token_id, "cpu")
    full = resid_post(tiny_model, ids, mask)
    positions = torch.tensor([[ids.shape[1] - 1, 5], [20, 21], [ids.shape[1] - 2, ids.shape[1] - 1]])
    part = resid_post(tiny_model, ids, mask, positions=positions, layers=[1])
    assert part.shape == (2, 3, 2, 64)
    rows = torch.arange(3)[:, None]
    assert torch.equal(part[0], full[0][rows, positions]) and torch.equal(part[1], full[2][rows, positions])
    shared = resid_post(tiny_model, ids, mask, positions=torch.tensor([-1]))  # [P]: the same for every row
    assert torch.equal(shared[:, :, 0], full[:, :, -1])


def test_hooks_removed_on_exit_and_on_exception(tiny_model):
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        tiny_model(input_ids=ids, output_hidden_states=True)  # transformers installs its own hooks once
    before = hooks(tiny_model)
    modules = [tiny_model.model.embed_tokens, *tiny_model.model.layers]
    with ResidualTrace(tiny_model) as trace:
        assert all(len(m._forward_hooks) == len(before[n][0]) + 1 for n, m in tiny_model.named_modules()
                   if any(m is x for x in modules))
        tiny_model(input_ids=ids)
    assert not tiny_model.model.embed_tokens._forward_hooks
    assert hooks(tiny_model) == before and len(trace.activations) == 3
    with pytest.raises(RuntimeError, match="boom"):
        with ResidualTrace(tiny_model, layers=[1]):
            tiny_model(input_ids=ids)
            raise RuntimeError("boom")
    assert hooks(tiny_model) == before
    with pytest.raises(IndexError):  # an exception inside the hooked forward itself
        resid_post(tiny_model, ids, positions=torch.tensor([[7]]))
    assert hooks(tiny_model) == before


def test_resid_post_with_engine_layout(tiny_model, tiny_tokenizer):
    """The engine's layout (cached shared prefix, 4-D mask, explicit positions) gives the plain forward's values."""
    system = "You are a person from Iran. Only give the scale number."
    prompts = [chat_ids(tiny_tokenizer, t, system) for t in TEXTS]
    engine = Engine(tiny_model, tiny_tokenizer)
    batch = Batch(engine, prompts)
    assert batch.cache is not None  # the system prompt is shared and cached
    last = torch.full((3, 1), batch.width - 1)
    got = resid_post(tiny_model, batch.ids, batch.bias(batch.prompt_mask()), positions=last,
                     position_ids=batch.positions, past_key_values=batch.cache, use_cache=True)
    want = capture(tiny_model, tiny_tokenizer, prompts, [[-1]] * 3)
    assert np.abs(got.numpy() - want).max() <= TOL


# --- backends -----------------------------------------------------------------------------------------------------

def test_backends_agree(eager_lm):
    """All three backends on one model in eager attention (TransformerLens computes attention eagerly)."""
    model, tokenizer = eager_lm
    prompts, positions = prompts_and_positions(tokenizer)
    out = {b: capture(model, tokenizer, prompts, positions, backend=b) for b in BACKENDS}
    n = len(decoder_layers(model))
    assert out["torch"].shape == (n + 1, 3, 2, model.config.hidden_size) and out["torch"].dtype == np.float32
    diffs = {b: float(np.abs(out[b] - out["torch"]).max()) for b in BACKENDS}
    print(f"\n{type(model).__name__} n_layers={n} eager: max |backend - torch| = {diffs}")
    assert max(diffs.values()) <= TOL


def test_backends_agree_default_attention(lm):
    """On the model as loaded (sdpa): nnsight runs the same kernels as torch hooks; TransformerLens's eager attention
    differs by float rounding only (absolute differences reach ~3e-4 where SmolLM2's residual stream is ~700)."""
    model, tokenizer = lm
    prompts, positions = prompts_and_positions(tokenizer)
    out = {b: capture(model, tokenizer, prompts, positions, backend=b) for b in BACKENDS}
    diffs = {b: float(np.abs(out[b] - out["torch"]).max()) for b in BACKENDS}
    scaled = scaled_diff(out["transformer_lens"], out["torch"])
    print(f"\n{type(model).__name__} sdpa: max |backend - torch| = {diffs}, transformer_lens scaled {scaled:.2e}")
    assert diffs["nnsight"] <= TOL
    assert scaled <= TOL


def test_left_padding_invisible(lm, eager_lm):
    """A padded row equals the same prompt run alone, to float rounding: padding changes the matmul shapes, so even
    eager attention is not bit-exact (SmolLM2 fp32 with transformers 5.23: 1.1e-3 where the stream reaches ~700)."""
    for (model, tokenizer), name in ((eager_lm, "eager"), (lm, "sdpa")):
        prompts, positions = prompts_and_positions(tokenizer)
        batched = capture(model, tokenizer, prompts, positions)
        alone = np.concatenate([capture(model, tokenizer, [p], [q]) for p, q in zip(prompts, positions)], axis=1)
        diff = float(np.abs(batched - alone).max())
        print(f"\n{type(model).__name__} {name}: max |padded - alone| = {diff:.3g}")
        assert scaled_diff(batched, alone) <= TOL


def test_layer_subset_order_and_negative_positions(tiny_model, tiny_tokenizer):
    prompts, positions = prompts_and_positions(tiny_tokenizer)
    full = capture(tiny_model, tiny_tokenizer, prompts, positions)
    negative = [[-1, p[1] - len(q)] for p, q in zip(positions, prompts)]
    for backend in BACKENDS:
        sub = capture(tiny_model, tiny_tokenizer, prompts, negative, layers=[1, 0], backend=backend, batch_size=2)
        assert np.abs(sub - full[[0, 2, 1]]).max() <= TOL, backend


def test_backends_leave_model_and_tokenizer_unchanged(tiny_model, tiny_tokenizer):
    prompts, positions = prompts_and_positions(tiny_tokenizer)
    side, attn = tiny_tokenizer.padding_side, tiny_model.config._attn_implementation
    modules, before = dict(tiny_model.named_modules()), hooks(tiny_model)
    for backend in BACKENDS:
        capture(tiny_model, tiny_tokenizer, prompts, positions, backend=backend)
        assert hooks(tiny_model) == before, backend
        assert not any("forward" in m.__dict__ or "__nnsight__" in m.__dict__ for m in tiny_model.modules()), backend
        assert dict(tiny_model.named_modules()) == modules, backend
        assert tiny_tokenizer.padding_side == side and tiny_model.config._attn_implementation == attn, backend


def test_capture_errors(tiny_model, tiny_tokenizer):
    prompts, positions = prompts_and_positions(tiny_tokenizer)
    with pytest.raises(ValueError) as err:
        capture(tiny_model, tiny_tokenizer, prompts, positions, backend="jax")
    assert all(b in str(err.value) for b in BACKENDS)
    with pytest.raises(ValueError, match="out of range"):
        capture(tiny_model, tiny_tokenizer, prompts, [[0], [0], [len(prompts[2])]])
    with pytest.raises(ValueError, match="same number"):
        capture(tiny_model, tiny_tokenizer, prompts, [[0], [0, 1], [0]])
    with pytest.raises(ValueError, match="0..1"):
        capture(tiny_model, tiny_tokenizer, prompts, positions, layers=[2])
