"""Residual-stream capture: torch hooks against HF's hidden states, hook hygiene, and the three backends agreeing."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from activations.backends import BACKENDS, capture
from activations.capture import (
    EMBED_HOOK, ResidualHooks, ResidualTrace, decoder_layers, embedding, hook_layer, hook_name, hook_names,
    parse_layers, resid_post, resolve_layers, select_hooks, select_layers, table_layer,
)
from behavioral.inference.engine import Batch, Engine, cache_keyword, halving_on_oom, left_pad
from interp.patching.spec import PatchSpec
from tests.conftest import oom_above

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
    assert hook_names(4, [-1, "hook_embed", 3]) == ["hook_embed", "blocks.3.hook_resid_post"]
    with pytest.raises(ValueError, match="0..2"):
        hook_names(3, [3])


def test_hook_name_and_layer_are_inverse():
    assert hook_name(EMBED_HOOK) == EMBED_HOOK == "hook_embed" and table_layer("hook_embed") == -1
    for layer in (0, 7, 31):
        assert hook_layer(hook_name(layer)) == layer == table_layer(hook_name(layer))
    assert hook_name(np.int64(3)) == hook_name("blocks.3.hook_resid_post") == "blocks.3.hook_resid_post"
    assert [table_layer(n) for n in hook_names(4, [2, 0])] == [-1, 2, 0]


def test_minus_one_is_the_last_block_and_needs_the_model():
    """-1 counts back from the last block, as in Python and --layers; without the block count it is refused."""
    assert hook_name(-1, 4) == "blocks.3.hook_resid_post" == hook_name(3, 4) == hook_name("last", 4)
    assert hook_name(-4, 4) == "blocks.0.hook_resid_post" and hook_name("embed", 4) == "hook_embed"
    with pytest.raises(ValueError, match="pass n_layers"):
        hook_name(-1)
    with pytest.raises(ValueError, match="names 2 hooks; expected one"):
        hook_name("0-1", 4)


def test_one_resolver_agrees_with_the_layers_parser():
    """Integers, hook names and --layers strings name the same hooks as parse_layers, wherever they are taken."""
    for spec, layers in (("-1", [-1]), ("0,-1", [0, -1]), ("-2--1", [-2, -1]), ("blocks.3.hook_resid_post", [3]),
                         ("first,middle", [0, 2])):
        named = [hook_name(block) for block in parse_layers(spec, 4)]
        assert resolve_layers(spec, 4) == resolve_layers(layers, 4) == named, spec
    assert resolve_layers([3, "hook_embed", -4, 3], 4, embed=True) == \
        ["blocks.3.hook_resid_post", "hook_embed", "blocks.0.hook_resid_post"]  # the order named, each once
    assert resolve_layers(np.array([1, -1]), 4) == resolve_layers(torch.tensor([1, 3]), 4) == \
        ["blocks.1.hook_resid_post", "blocks.3.hook_resid_post"]
    assert resolve_layers("3,1", 4) == ["blocks.1.hook_resid_post", "blocks.3.hook_resid_post"]  # a spec: model order
    assert PatchSpec(["blocks.3.hook_resid_post", "hook_embed", -1], "system").hooks(4) == \
        ("hook_embed", "blocks.3.hook_resid_post")


@pytest.mark.parametrize("bad, message", [
    (4, "layers: block 4 was not available; available: 0..3"), (-5, "layers: block -5 was not available"),
    ("hook_embed", "layers hook_embed: no token embeddings were available"),
    ("blocks.9.hook_resid_post", "layers: block 9 was not available"),
    ("blocks.3.hook_resid_pre", "layers: unknown entry 'blocks.3.hook_resid_pre'; expected all, or a comma list"),
    (1.0, "layers: 1.0 is not a layer; expected all, or a comma list"), (True, "layers: True is not a layer"),
    ([0, None], "layers: None is not a layer"), ("3", None),
])
def test_a_bad_layer_is_one_clear_line(bad, message):
    if message is None:
        assert resolve_layers(bad, 4) == ["blocks.3.hook_resid_post"]  # a string is a --layers entry
        return
    with pytest.raises(ValueError) as err:
        resolve_layers(bad, 4)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("bad", [-2, 1.0, "3", True, None, "last"])
def test_hook_name_without_the_model_refuses_what_it_cannot_name(bad):
    with pytest.raises(ValueError, match="no hook for layer"):
        hook_name(bad)


@pytest.mark.parametrize("bad", ["blocks.x.hook_resid_post", "blocks.3.hook_resid_pre", "hook_embed ", "embed",
                                 "blocks.-1.hook_resid_post", 3])
def test_hook_layer_refuses_unknown_names(bad):
    with pytest.raises(ValueError, match="is no block's hook name"):
        hook_layer(bad)


def test_the_embedding_has_no_block_number():
    with pytest.raises(ValueError, match="'hook_embed' is the token embedding, no decoder block"):
        hook_layer(EMBED_HOOK)


def test_select_layers_counts_back_from_the_last_block_held():
    assert select_layers([-1, "hook_embed"], CAPTURED) == ["blocks.8.hook_resid_post", "hook_embed"]
    assert select_layers(4, CAPTURED) == select_hooks("4", CAPTURED) == ["blocks.4.hook_resid_post"]
    with pytest.raises(ValueError, match="layers: block 3 was not captured; captured: \\[0, 4, 8\\]"):
        select_layers(3, CAPTURED)


@pytest.mark.parametrize("spec, expected", [
    ("all", list(range(30))), ("ALL ", list(range(30))), ("0,4,8", [0, 4, 8]), ("8, 0,4,4", [0, 4, 8]),
    ("29", [29]), ("0", [0]), ("-1", [29]), ("-30", [0]), ("0-3", [0, 1, 2, 3]), ("5-5,1", [1, 5]),
    ("-3--1", [27, 28, 29]), ("0--29", [0, 1]), ("first,middle,last", [0, 15, 29]), ("embed", []),
    ("hook_embed,2", [2]), ("blocks.7.hook_resid_post, 7", [7]),
])
def test_parse_layers(spec, expected):
    assert parse_layers(spec, 30) == expected


@pytest.mark.parametrize("spec, message", [
    ("30", "--layers: block 30 was not available; available: 0..29"),
    ("-31", "--layers: block -31 was not available"),
    ("0,x", "--layers: unknown entry 'x'; expected all, or a comma list of"),
    ("", "--layers: unknown entry ''"), ("1,,2", "--layers: unknown entry ''"), ("1.5", "unknown entry '1.5'"),
    ("al", "unknown entry 'al'"), ("0:5", "unknown entry '0:5'"), ("blocks.30.hook_resid_post", "block 30 was not"),
    ("25-30", "--layers: block 30 (an end of range 25-30) was not available; available: 0..29"),
    ("5-2", "--layers: range 5-2 names no block available (a-b is inclusive, a <= b); available: 0..29"),
])
def test_parse_layers_errors(spec, message):
    with pytest.raises(ValueError) as err:
        parse_layers(spec, 30)
    assert message in str(err.value) and "0..29" in str(err.value)


def test_old_run_specs_keep_their_layers():
    """A resumed run re-reads the spec its manifest recorded: "all" and comma lists name what they always did."""
    assert parse_layers("all", 4) == [0, 1, 2, 3] and parse_layers("0,2", 4) == [0, 2]
    assert hook_names(4, parse_layers("all", 4)) == hook_names(4)


CAPTURED = [EMBED_HOOK, "blocks.0.hook_resid_post", "blocks.4.hook_resid_post", "blocks.8.hook_resid_post"]


@pytest.mark.parametrize("spec, layers", [
    ("all", [EMBED_HOOK, 0, 4, 8]), ("embed", [EMBED_HOOK]), ("first,last", [0, 8]), ("middle", [4]),
    ("8,0", [0, 8]), ("-1", [8]), ("-3,embed", [EMBED_HOOK, 0]), ("4, 4", [4]), ("0-5", [0, 4]), ("-2--1", [4, 8]),
    ("5-8", [8]), ("hook_embed,blocks.4.hook_resid_post", [EMBED_HOOK, 4]),
])
def test_select_hooks_names_captured_hooks_in_capture_order(spec, layers):
    assert select_hooks(spec, CAPTURED) == [hook_name(layer) for layer in layers]


@pytest.mark.parametrize("spec, hooks, message", [
    ("7", CAPTURED, "--probe-layers: block 7 was not captured; captured: [0, 4, 8]"),
    ("-4", CAPTURED, "--probe-layers: block -4 was not captured"),
    ("top", CAPTURED, "--probe-layers: unknown entry 'top'"),
    ("1-3", CAPTURED, "--probe-layers: range 1-3 names no block captured"),
    ("0-9", CAPTURED, "--probe-layers: block 9 (an end of range 0-9) was not captured; captured: [0, 4, 8]"),
    ("embed", CAPTURED[1:], "--probe-layers embed: no token embeddings were captured"),
    ("last", CAPTURED[:1], "--probe-layers last: no block outputs were captured"),
    ("0", CAPTURED[:1], "--probe-layers: block 0 was not captured; captured: none"),
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
        with ResidualHooks(tiny_model, [EMBED_HOOK], edit=lambda name, h: h + shift) as at_embed:
            shifted_embed = tiny_model(input_ids=ids).logits
        with ResidualHooks(tiny_model, [-1], edit=lambda name, h: h + shift) as at_last:
            for _ in range(2):
                shifted_last = tiny_model(input_ids=ids).logits
        from_last = tiny_model.lm_head(tiny_model.model.norm(plain["blocks.1.hook_resid_post"] + shift))
    assert not torch.allclose(shifted_embed, unedited) and not torch.allclose(shifted_last, unedited)
    assert torch.allclose(shifted_embed, from_embeds, atol=1e-5)
    assert torch.equal(at_embed["hook_embed"], embeds) and at_embed.calls == {"hook_embed": 1}
    assert torch.allclose(shifted_last, from_last, atol=1e-5)
    assert torch.equal(at_last["blocks.1.hook_resid_post"], plain["blocks.1.hook_resid_post"] + shift)
    assert at_last.calls == {"blocks.1.hook_resid_post": 2} and at_last.names == ["blocks.1.hook_resid_post"]


def test_edit_replaces_tuple_outputs_and_refuses_in_range_only(tiny_model):
    toy = _Toy()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad(), ResidualHooks(toy, [0], edit=lambda name, h: torch.zeros_like(h)) as hooks:
        out = toy(ids)
    assert torch.equal(out, torch.zeros_like(out)) and hooks.calls == {"blocks.0.hook_resid_post": 1}
    with pytest.raises(ValueError, match="layers: block 2 was not available; available: \\[0, 1\\]"):
        ResidualHooks(tiny_model, [2])
    with pytest.raises(ValueError, match="layers: block -3 was not available"):
        ResidualHooks(tiny_model, [-3])


def test_hooks_on_minus_one_a_hook_name_and_embed_agree_with_the_parser(tiny_model):
    """ResidualHooks on -1, on "blocks.1.hook_resid_post", on "last" and on parse_layers("-1") hold the same point;
    "hook_embed" and "embed" the embedding."""
    for same in ([-1], ["blocks.1.hook_resid_post"], "last", parse_layers("-1", 2)):
        point = ResidualHooks(tiny_model, same)
        assert point.names == ["blocks.1.hook_resid_post"]
        assert point.modules == {"blocks.1.hook_resid_post": tiny_model.model.layers[1]}
    for same in (["hook_embed"], "embed"):
        assert ResidualHooks(tiny_model, same).modules == {"hook_embed": tiny_model.model.embed_tokens}
    ids = torch.tensor([[5, 6, 7]])
    with torch.inference_mode():
        assert torch.equal(resid_post(tiny_model, ids, layers=[-1]), resid_post(tiny_model, ids, layers=[1]))


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


@pytest.fixture(scope="module")
def four_layers():
    """A random 4-layer Llama in fp32 and a counter of the forwards through each decoder layer and the LM head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                         num_attention_heads=4, num_key_value_heads=2)).eval()
    calls = {}
    for name, module in [*enumerate(model.model.layers), ("head", model.lm_head)]:
        module.register_forward_pre_hook(lambda m, a, name=name: calls.__setitem__(name, calls.get(name, 0) + 1))
    return model, calls


def test_resid_post_stops_after_the_last_chosen_layer(four_layers):
    """Capturing blocks 0..1 of 4 runs 2 decoder layers and no head, with the states of the whole forward."""
    model, calls = four_layers
    ids, mask = left_pad([[3, 4, 5, 6, 7], [8, 9, 10]], 0, "cpu")
    with torch.inference_mode(), ResidualTrace(model, [0, 1]) as whole:
        model(input_ids=ids, attention_mask=mask)
    assert calls == {0: 1, 1: 1, 2: 1, 3: 1, "head": 1}
    calls.clear()
    before = hooks(model)
    stopped = resid_post(model, ids, mask, layers=[0, 1])
    assert calls == {0: 1, 1: 1} and hooks(model) == before
    assert torch.equal(stopped, whole.stacked())
    calls.clear()
    assert torch.equal(resid_post(model, ids, mask, layers=[])[0], whole["hook_embed"]) and calls == {}


def test_a_stopping_trace_keeps_what_it_reached_and_ends_the_block(four_layers):
    model, calls = four_layers
    ids = torch.tensor([[3, 4, 5]])
    calls.clear()
    with torch.inference_mode(), ResidualTrace(model, [2], stop=True) as trace:
        model(input_ids=ids)
        raise AssertionError("the forward went on past the stop")
    assert calls == {0: 1, 1: 1, 2: 1} and trace.calls == {"hook_embed": 1, "blocks.2.hook_resid_post": 1}
    assert trace.stacked().shape == (2, 1, 3, 32)


def test_a_forward_with_a_cache_runs_every_layer(four_layers):
    """resid_post with a KV cache runs the whole model, so the cache it extends stays whole."""
    from transformers import DynamicCache

    model, calls = four_layers
    cache = DynamicCache(config=model.config)
    calls.clear()
    resid_post(model, torch.tensor([[3, 4, 5]]), layers=[0], use_cache=True, **{cache_keyword(model): cache})
    assert calls == {0: 1, 1: 1, 2: 1, 3: 1, "head": 1} and cache.get_seq_length() == 3


def test_source_states_stop_and_halve_on_out_of_memory(four_layers, monkeypatch):
    """Patch sources of block 1 run blocks 0..1 only; a batch above 2 prefixes runs out of memory and is halved as
    the engine's are, into the states of the unbatched forwards."""
    from interp.patching import sources as patch_sources

    model, calls = four_layers
    prompts = [(3, 4, 5, i) for i in range(5)]
    alone = patch_sources.source_states(model, prompts, [1], batch_size=1)
    real, sizes, ticks = patch_sources.resid_post, [], []

    monkeypatch.setattr(patch_sources, "resid_post", oom_above(real, 2, sizes))
    calls.clear()
    halved = patch_sources.source_states(model, prompts, [1], batch_size=5, on_forward=lambda: ticks.append(1))
    assert sizes == [5, 2, 3, 1, 2] and len(ticks) == 3 and calls == {0: 3, 1: 3}
    assert all(torch.allclose(h, a, atol=1e-6) for h, a in zip(halved.states, alone.states))


def test_halving_on_oom_gives_up_on_a_single_item():
    def never(chunk):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    halves = []
    with pytest.raises(torch.cuda.OutOfMemoryError):
        halving_on_oom(never, [[1, 2, 3, 4]], on_halve=halves.append)
    assert halves == [2, 1]
    assert halving_on_oom(lambda chunk: [x * 10 for x in chunk], [[1, 2], [3]]) == [10, 20, 30]


def test_resid_post_with_engine_layout(tiny_model, tiny_tokenizer):
    """The engine's layout (cached shared prefix, 4-D mask, explicit positions) gives the plain forward's values."""
    system = "You are a person from Iran. Only give the scale number."
    prompts = [chat_ids(tiny_tokenizer, t, system) for t in TEXTS]
    engine = Engine(tiny_model, tiny_tokenizer)
    batch = Batch(engine, prompts)
    assert batch.cache is not None  # the system prompt is shared and cached
    last = torch.full((3, 1), batch.width - 1)
    got = resid_post(tiny_model, batch.ids, batch.bias(batch.prompt_mask()), positions=last,
                     position_ids=batch.positions, use_cache=True, **{engine.cache_key: batch.cache})
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
