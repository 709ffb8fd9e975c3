"""The lazy answer tree: every number it reports lies within its recorded bound of the full tree's, on every prompt;
the bounds are what their worst cases reach; greedy answers and generated texts are exact."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats

from behavioral.inference import lazy_tree
from behavioral.inference import tree_bounds
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.engine import Engine
from behavioral.inference.lazy_tree import AnswerTree
from tests.conftest import make_tiny_model
from tests.test_engine import _prompt_ids

SLACK = 1e-5  # float rounding between one forward of the whole tree and rounds of it (fp32: measured to 1.2e-6)


def _sharp_model(tokenizer, seed: int, favoured: str, bias: float):
    """A tiny model with sharper logits and the tokens of `favoured` raised, so answers concentrate as a trained
    model's do and a lazy read has subtrees to leave out."""
    model = make_tiny_model(len(tokenizer), seed=seed)
    favoured = sorted(set(tokenizer.encode(favoured, add_special_tokens=False)))
    head = torch.nn.Linear(model.config.hidden_size, len(tokenizer), bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight * 4)
        head.bias.zero_()
        head.bias[favoured] = bias
    model.lm_head = head
    return model


def _entropy(probs) -> float:
    return float(stats.entropy(np.asarray(probs)))


def _spec(kind: str) -> AnswerSpec:
    if kind == "letters":
        return AnswerSpec.choices({c: (c, f" {c}") for c in "ABCDE"})
    return AnswerSpec.integers(0, 100 if kind == "0-100" else 10)


def _scored(model, tokenizer, spec: AnswerSpec, tree: AnswerTree, n: int = 24):
    trie = AnswerTrie.build(tokenizer, spec)
    return Engine(model, tokenizer, batch_size=8, answer_tree=tree).score(_prompt_ids(tokenizer, n), trie), trie


@pytest.mark.parametrize(("kind", "favoured", "bias", "tolerance"), [
    ("0-100", "7", 6.0, 1e-3), ("0-100", "70", 6.0, 1e-2), ("0-100", "4", 6.0, 1e-1), ("0-10", "7", 8.0, 1e-2),
    ("letters", "B", 8.0, 1e-2), ("letters", " B", 10.0, 1e-1)])
def test_every_number_of_a_lazy_read_lies_within_its_bound_of_the_full_trees(tiny_tokenizer, kind, favoured, bias,
                                                                             tolerance, monkeypatch):
    monkeypatch.setattr(lazy_tree, "SMALL_TREE", 0)  # the small tries read lazily too
    spec = _spec(kind)
    trie = AnswerTrie.build(tiny_tokenizer, spec)
    model = _sharp_model(tiny_tokenizer, 2, favoured, bias)
    full, _ = _scored(model, tiny_tokenizer, spec, AnswerTree("full"))
    lazy, _ = _scored(model, tiny_tokenizer, spec, AnswerTree("lazy", tolerance))
    for f, z in zip(full, lazy):
        assert z.greedy == f.greedy
        assert max(abs(a - b) for a, b in zip(z.probs, f.probs)) <= z.probs_bound + SLACK
        assert abs(z.valid_mass - f.valid_mass) <= z.probs_bound + SLACK
        assert abs(_entropy(z.probs) - _entropy(f.probs)) <= z.entropy_bound + SLACK
        assert z.start_mass == pytest.approx(f.start_mass, abs=SLACK)
        assert z.probs_bound <= tolerance
        if spec.values:
            assert abs(z.expected - f.expected) <= z.expected_bound + SLACK
            assert z.expected_bound <= tolerance
        else:
            assert z.expected is None and z.expected_bound is None
        assert (f.nodes, f.expected_bound or 0.0, f.probs_bound, f.entropy_bound) == (len(trie), 0.0, 0.0, 0.0)
    assert sum(z.nodes for z in lazy) < len(lazy) * len(trie), "the lazy read left no subtree out"


def test_a_lazy_read_at_tolerance_zero_reads_every_node_and_equals_the_full_tree(tiny_tokenizer):
    spec = _spec("0-100")
    trie = AnswerTrie.build(tiny_tokenizer, spec)
    model = _sharp_model(tiny_tokenizer, 2, "7", 6.0)
    full, _ = _scored(model, tiny_tokenizer, spec, AnswerTree("full"), 12)
    lazy, _ = _scored(model, tiny_tokenizer, spec, AnswerTree("lazy", 0.0), 12)
    for f, z in zip(full, lazy):
        assert z.nodes == len(trie) and z.greedy == f.greedy
        assert z.probs == pytest.approx(f.probs, abs=SLACK) and z.expected == pytest.approx(f.expected, abs=1e-4)


@pytest.mark.parametrize("kind", ["0-10", "letters"])
def test_a_small_trie_is_read_whole_in_the_prompts_forward(tiny_tokenizer, kind):
    spec = _spec(kind)
    model = _sharp_model(tiny_tokenizer, 2, "7", 8.0)
    lazy, trie = _scored(model, tiny_tokenizer, spec, AnswerTree("lazy", 0.1), 8)
    full, _ = _scored(model, tiny_tokenizer, spec, AnswerTree("full"), 8)
    assert len(trie) <= lazy_tree.SMALL_TREE
    assert [(s.nodes, s.probs_bound, s.entropy_bound) for s in lazy] == [(len(trie), 0.0, 0.0)] * 8
    assert [s.probs for s in lazy] == [s.probs for s in full]


def test_generate_and_score_keeps_generates_texts_and_scores_own_lazy_read(tiny_tokenizer):
    spec = _spec("0-100")
    trie = AnswerTrie.build(tiny_tokenizer, spec)
    model = _sharp_model(tiny_tokenizer, 3, "70", 6.0)
    engine = Engine(model, tiny_tokenizer, batch_size=8, max_new_tokens=6)
    ids = _prompt_ids(tiny_tokenizer, 16)
    texts = [g.text for g in engine.generate(ids)]
    scores = engine.score(ids, trie)
    joint = engine.generate_and_score(ids, trie)
    assert [g.text for g in joint] == texts
    for g, s in zip(joint, scores):
        assert g.scores.greedy == s.greedy and g.scores.nodes == s.nodes
        assert g.scores.probs == pytest.approx(s.probs, abs=SLACK)


def test_the_expected_values_extremes_are_the_best_and_worst_allocation():
    rng = np.random.default_rng(0)
    for _ in range(200):
        t = int(rng.integers(1, 5))
        mass = torch.tensor(rng.uniform(0, 0.3, (1, t)) * rng.integers(0, 2, (1, t)))
        low = torch.tensor(rng.uniform(0, 50, t))
        high = low + torch.tensor(rng.uniform(0, 50, t))
        read_mass = torch.tensor([rng.uniform(0.01, 1)])
        read_sum = read_mass * rng.uniform(0, 100)
        lo, hi = tree_bounds.expected_extremes(read_mass, read_sum, mass, low, high)
        # the mean is linear-fractional in each node's mass and value: its extremes lie at the box's corners
        corners = [(read_sum + sum(u * w for u, w in zip(us, ws))) / (read_mass + sum(us))
                   for us in itertools.product(*[(0.0, float(m)) for m in mass[0]])
                   for ws in itertools.product(*[(float(a), float(b)) for a, b in zip(low, high)])]
        assert float(lo) == pytest.approx(min(float(c) for c in corners))
        assert float(hi) == pytest.approx(max(float(c) for c in corners))


def test_the_entropy_bound_holds_and_is_reached():
    rng = np.random.default_rng(1)
    for k in (2, 5, 101):
        for _ in range(300):
            p = rng.dirichlet(np.full(k, rng.choice([0.1, 1.0, 10.0])))
            q = rng.dirichlet(np.full(k, rng.choice([0.1, 1.0, 10.0])))
            tv = 0.5 * np.abs(p - q).sum()
            bound = float(tree_bounds.entropy_bound(torch.tensor([tv]), k))
            assert abs(stats.entropy(p) - stats.entropy(q)) <= bound + 1e-12
        # the pair that reaches it: a point mass against a mass of 1 - t with t spread evenly over the rest
        t = 0.2
        p = np.eye(k)[0]
        q = np.r_[1 - t, np.full(k - 1, t / (k - 1))]
        assert stats.entropy(q) == pytest.approx(float(tree_bounds.entropy_bound(torch.tensor([t]), k)))


def test_the_probability_bound_is_reached_where_the_unread_mass_is_not_an_answer():
    # A = 0.6 read; U = 0.4 on a frontier node; the report puts it on the node's answer, the truth may hold none
    assert float(tree_bounds.probs_bound(torch.tensor([0.6]), torch.tensor([0.4]))) == pytest.approx(0.4)
    reported = np.array([0.6, 0.4])
    truth = np.array([1.0, 0.0])
    assert 0.5 * np.abs(reported - truth).sum() == pytest.approx(0.4)
    assert float(tree_bounds.probs_bound(torch.tensor([0.6]), torch.tensor([0.0]))) == 0.0


@pytest.mark.parametrize("mode", ["bad", ""])
def test_an_unknown_tree_mode_or_tolerance_is_named(mode):
    with pytest.raises(ValueError, match="--answer-tree is"):
        AnswerTree(mode)
    with pytest.raises(ValueError, match=r"--tree-tolerance must lie in \[0, 1\), got -0.1"):
        AnswerTree("lazy", -0.1)
    assert math.isclose(AnswerTree().tolerance, 1e-3)
