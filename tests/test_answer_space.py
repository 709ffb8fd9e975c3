"""Closed label sets: tree-masked scoring against one full forward per surface form, prefills, and bad specs."""

from __future__ import annotations

import math

import pytest
import torch

from behavioral.inference import lazy_tree
from behavioral.inference import tree_logits
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.lazy_tree import AnswerTree
from behavioral.inference.engine import Batch, Engine
from tests.conftest import favouring_model, make_tiny_model
from tests.test_engine import _prompt_ids

YES_NO = AnswerSpec.choices({"yes": ("yes", " yes", "Yes"), "no": ("no", " no", "No")}, values={"yes": 1.0, "no": 0.0})
# "A)" extends "A" with a token that is no letter: the end of "A" must exclude it, or "A)" would count twice.
LETTERS = AnswerSpec.choices({"A": ("A", "A)"), "B": ("B",), "C": ("C",)}, prefill="[[")

# the whole tree in one forward, and read lazily at tolerance 0 (every node with mass, in rounds): each equals brute force
EXACT = pytest.mark.parametrize("tree", [AnswerTree("full"), AnswerTree("lazy", 0.0)], ids=["full", "lazy-0"])


@torch.no_grad()
def _brute_force(model, tokenizer, trie: AnswerTrie, ids: list[int]) -> dict:
    """log P(label) by one full forward per form: the form's tokens after the prompt (and prefill), times the
    probability that the next token neither continues the word (where the form ends in a letter) nor follows
    another form of the set."""
    prefix = list(ids) + list(trie.prefill)
    words = [i for i in range(len(tokenizer)) if trie.continues[i]]
    forms = {f: tokenizer.encode(trie.spec.prefill + f, add_special_tokens=False)[len(trie.prefill):]
             for label in trie.spec.labels for f in label.forms}
    out = {}
    for label in trie.spec.labels:
        total = -math.inf
        for form in label.forms:
            toks = forms[form]
            lp = model(torch.tensor([prefix + toks])).logits[0].double().log_softmax(-1)
            path = sum(float(lp[len(prefix) - 1 + j, t]) for j, t in enumerate(toks))
            after = lp[len(prefix) - 1 + len(toks)].exp()
            go_on = set(words) if form[-1].isalnum() else set()
            go_on |= {other[len(toks)] for other in forms.values() if len(other) > len(toks) and
                      other[:len(toks)] == toks}
            ends = [t for t in range(len(after)) if t not in go_on]  # summed directly: no 1 - (a mass near 1)
            total = float(torch.logaddexp(torch.tensor(total), torch.tensor(path + math.log(float(after[ends].sum())))))
        out[label.name] = total
    return out


@pytest.mark.parametrize("spec", [YES_NO, LETTERS, AnswerSpec.integers(0, 10)], ids=["yes-no", "letters-prefill",
                                                                                   "integers"])
@pytest.mark.parametrize("padding", [0, 40], ids=["same-vocabulary", "padded-vocabulary"])
@EXACT
def test_label_scores_equal_brute_force(tiny_model, tiny_tokenizer, spec, padding, tree, monkeypatch):
    """Scores equal one full forward per form. With `padding` the model's output rows outnumber the tokenizer's ids
    (Qwen2.5 pads its vocabulary; the GPU check runs Llama-3.1-8B shapes under SmolLM2's tokenizer): the padding ids
    count in the normaliser and neither continue nor start an answer (the GPU check's first run failed there with an
    IndexError)."""
    model = make_tiny_model(len(tiny_tokenizer) + padding) if padding else tiny_model
    trie = AnswerTrie.build(tiny_tokenizer, spec)
    prompts = _prompt_ids(tiny_tokenizer, 3)
    monkeypatch.setattr(lazy_tree, "SMALL_TREE", 0)  # these small tries read lazily too
    scores = Engine(model, tiny_tokenizer, batch_size=3, answer_tree=tree).score(prompts, trie)
    for ids, got in zip(prompts, scores):
        want = _brute_force(model, tiny_tokenizer, trie, ids)
        z = sum(math.exp(v) for v in want.values())
        assert got.valid_mass == pytest.approx(z, rel=1e-4)
        probs = [math.exp(want[n]) / z for n in spec.names]
        assert got.probs == pytest.approx(probs, rel=1e-4)
        if spec.values is not None:
            assert got.expected == pytest.approx(sum(p * v for p, v in zip(probs, spec.values)), rel=1e-4)
        else:
            assert got.expected is None
        assert got.greedy in spec.names and 0 < got.start_mass <= 1


@pytest.mark.parametrize("tree", [AnswerTree("full"), AnswerTree("lazy")], ids=["full", "lazy"])
def test_rare_endings_are_read_exactly_not_clamped(tiny_tokenizer, tree):
    """A model that almost never ends a number (every digit token favoured by 30 logits, so each in-range ending has
    a probability far below 1e-9): the answer mass and the expected value equal the exact computation (float64 over
    the full logits, the ending's mass summed directly), where a clamp of the continuing probability below 1 had
    inflated the mass about 10^5-fold and moved the expected value by points."""
    model = favouring_model(tiny_tokenizer, 3, lambda text: text.strip().isdigit(), 30.0)
    spec = AnswerSpec.integers(0, 100)
    trie = AnswerTrie.build(tiny_tokenizer, spec)
    prompts = _prompt_ids(tiny_tokenizer, 2)
    scores = Engine(model, tiny_tokenizer, batch_size=2, answer_tree=tree).score(prompts, trie)
    for ids, got in zip(prompts, scores):
        want = _brute_force(model, tiny_tokenizer, trie, ids)
        z = sum(math.exp(v) for v in want.values())
        assert z < 1e-9 and got.start_mass > 0.9  # the model begins a number and almost never ends one in range
        assert got.valid_mass == pytest.approx(z, rel=1e-3)
        expected = sum(math.exp(want[n]) / z * v for n, v in zip(spec.names, spec.values))
        assert got.expected == pytest.approx(expected, abs=max(tree.tolerance, 1e-3) + got.expected_bound)


@pytest.mark.parametrize("tree", ["full", "lazy"])
def test_score_mode_never_builds_full_vocabulary_logits(tiny_model, tiny_tokenizer, monkeypatch, tree):
    """Score mode reads the answer tree through the output head's input, a few vocabulary rows at a time: the head
    returns no logits in the tree forwards (the prefix store's forwards and a lazy read's prompt forward keep one
    position's), the largest float32 logits block is READ_BYTES, and the scores are those read from the full
    logits (a lazy read's at tolerance 0)."""
    trie = AnswerTrie.for_scale(tiny_tokenizer, 100)
    prompts = _prompt_ids(tiny_tokenizer, 5)
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=5, answer_tree=AnswerTree(tree, 0.0))
    assert engine.head is tiny_model.lm_head
    full = trie.read(engine.tree_forward(Batch(engine, prompts), trie, use_cache=False).logits)
    rows = 5 * (1 + len(trie))
    monkeypatch.setattr(tree_logits, "READ_BYTES", rows * 50 * 4)  # 50 vocabulary rows a slice: 12 slices
    widths, blocks = [], []
    hook = tiny_model.lm_head.register_forward_hook(lambda m, a, out: widths.append(tuple(out.shape[1:])))
    logsumexp = torch.logsumexp
    monkeypatch.setattr(torch, "logsumexp", lambda t, **k: blocks.append(t.numel()) or logsumexp(t, **k))
    try:
        scores = engine.score(prompts, trie)
    finally:
        hook.remove()
    if tree == "full":
        assert widths == [(1, len(tiny_tokenizer)), (1 + len(trie), 1)]
    else:  # the prefix, the prompt, then rounds of nodes
        assert widths[:2] == [(1, len(tiny_tokenizer))] * 2 and {w[1] for w in widths[2:]} == {1}
    assert max(blocks) <= rows * 50
    for got, want in zip(scores, full):
        assert got.greedy == want.greedy
        assert got.expected == pytest.approx(want.expected, rel=1e-6)
        assert got.probs == pytest.approx(want.probs, rel=1e-5, abs=1e-12)
        assert (got.valid_mass, got.start_mass) == pytest.approx((want.valid_mass, want.start_mass), rel=1e-5)


@EXACT
def test_soft_capped_logits_are_read_in_full(tiny_tokenizer, tree, monkeypatch):
    """A model whose logits are not its head's output alone (Gemma-2's soft-capping) is scored from its full logits,
    and its scores equal one full forward per form. (Its window is wider than the prompts, as Gemma-2's 4,096 is:
    the engine's explicit masks do not apply a window.)"""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    model = Gemma2ForCausalLM(Gemma2Config(
        vocab_size=len(tiny_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, final_logit_softcapping=3.0,
        sliding_window=256, max_position_embeddings=512)).eval()
    trie = AnswerTrie.build(tiny_tokenizer, YES_NO)
    prompts = _prompt_ids(tiny_tokenizer, 3)
    monkeypatch.setattr(lazy_tree, "SMALL_TREE", 0)
    engine = Engine(model, tiny_tokenizer, batch_size=3, answer_tree=tree)
    assert engine.head is None
    for ids, got in zip(prompts, engine.score(prompts, trie)):
        want = _brute_force(model, tiny_tokenizer, trie, ids)
        z = sum(math.exp(v) for v in want.values())
        assert got.valid_mass == pytest.approx(z, rel=1e-4)
        assert got.probs == pytest.approx([math.exp(want[n]) / z for n in YES_NO.names], rel=1e-4)


def test_forms_share_tokens_and_prefill_is_forced(tiny_tokenizer):
    trie = AnswerTrie.build(tiny_tokenizer, LETTERS)
    assert list(trie.prefill) == tiny_tokenizer.encode("[[", add_special_tokens=False)
    a = tiny_tokenizer.encode("[[A", add_special_tokens=False)[len(trie.prefill):]
    root = [int(trie.tokens[i]) for i in trie.children[0]]
    assert a[0] in root and len(root) == 3  # "A" and "A)" share their first node
    assert len(trie.extra_nodes) >= 1  # ")" after "A" keeps "A" from ending there
    assert trie.starts[root].all()


def test_integers_keep_ints_as_names_and_values():
    spec = AnswerSpec.integers(0, 10)
    assert spec.names == tuple(range(11)) and spec.values == tuple(float(v) for v in range(11)) and spec.numeric
    assert AnswerSpec.choices({"a": ("a",), "b": ("b",)}).values is None


def test_bad_specs_name_the_form(tiny_tokenizer):
    with pytest.raises(ValueError, match="'yes' and 'also yes' tokenize to the same ids"):
        AnswerTrie.build(tiny_tokenizer, AnswerSpec.choices({"yes": ("yes",), "also yes": ("yes",)}))
    with pytest.raises(ValueError, match="empty"):
        AnswerTrie.build(tiny_tokenizer, AnswerSpec.choices({"x": ("",)}))
