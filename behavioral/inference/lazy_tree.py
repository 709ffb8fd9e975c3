"""Reading an answer tree lazily: after the prompt, only the nodes whose subtrees can still move a reported number.

Score mode's full read computes every node of the answer trie (101 for the integers 0-100) beside each prompt. A
lazy read computes the prompt, then, round by round, the frontier nodes (their parent computed, their own logits
not) that matter: every node on the greedy path (so the greedy answer is exact), and, while a row's bounds
(behavioral.inference.tree_bounds) exceed the tolerance, its frontier nodes in order of how far they can move the expected
value or the probabilities, until what is left could move them by at most half the tolerance. Each row records the
nodes it read and its bounds (Scores). A trie of at most SMALL_TREE nodes is read whole in the prompt's forward: a
lazy read could save at most those few positions, and each of its rounds costs a forward (measured on CPU: the 11-node
0..10 tree read lazily made a score run 7-11% slower).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from behavioral.inference.answer_space import AnswerTrie, Reading
from behavioral.rundir.manifest import TREE_TOLERANCE, TREES, check_tolerance
from behavioral.inference.tree_logits import TreeLogits

SMALL_TREE = 16  # tries of at most this many nodes are read whole


@dataclass(frozen=True)
class AnswerTree:
    """How score mode reads an answer tree: `full` (every node, exact) or `lazy` (bounds at most `tolerance`)."""

    mode: str = "lazy"
    tolerance: float = TREE_TOLERANCE

    def __post_init__(self):
        if self.mode not in TREES:
            raise ValueError(f"--answer-tree is {self.mode!r}; expected one of {', '.join(TREES)}")
        check_tolerance(self.tolerance, "--tree-tolerance")

    def lazy_for(self, trie: AnswerTrie) -> bool:
        """True when `trie`'s nodes are read only as needed: a lazy read of a trie above SMALL_TREE nodes."""
        return self.mode == "lazy" and len(trie) > SMALL_TREE


def expansion(trie: AnswerTrie, reading: Reading, tree: TreeLogits, computed: torch.Tensor,
              tolerance: float) -> torch.Tensor:
    """[B, T] bool: the nodes a lazy read computes next, given what it has read so far (`computed` [B, 1 + T]
    positions, their reduced logits `tree`)."""
    chosen = _greedy_frontier(trie, tree, computed)
    valued = trie.value_ranges is not None
    open_rows = reading.probs_bound > tolerance
    if valued:
        open_rows |= reading.expected_bound > tolerance
    if not open_rows.any():
        return chosen
    mass = reading.frontier / reading.valid_mass.clamp(min=torch.finfo(torch.float64).tiny)[:, None]
    reach = mass  # how far each frontier node can move the probabilities, then the expected value
    if valued:
        _, low, high = (r.to(mass.device) for r in trie.value_ranges)
        distance = torch.maximum((high - reading.expected[:, None]).abs(), (reading.expected[:, None] - low).abs())
        reach = torch.maximum(reach, mass * distance)
    order = torch.argsort(reach, dim=1, descending=True, stable=True)
    ranked = reach.gather(1, order)
    left = ranked.flip(1).cumsum(1).flip(1)  # [B, T]: what the k-th node and those after it can move together
    take = torch.zeros_like(chosen).scatter(1, order, left > tolerance / 2)
    return chosen | (take & (reading.frontier > 0) & open_rows[:, None])


def _greedy_frontier(trie: AnswerTrie, tree: TreeLogits, computed: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: per row, the node where greedy decoding's path leaves the computed positions, if it does."""
    branching = trie.branching()
    host = (tree.columns.cpu().tolist(), tree.top_values[:, branching].cpu().tolist(),
            tree.top_indices[:, branching].cpu().tolist(), computed.cpu())
    columns, values, indices, done = host
    column = trie.token_columns()
    chosen = torch.zeros(len(columns), len(trie), dtype=torch.bool)
    for b in range(len(columns)):
        positions = set(done[b].nonzero().flatten().tolist())
        node = trie.greedy_walk(columns[b], dict(zip(branching, zip(values[b], indices[b]))), column, positions)
        if node >= 0 and node + 1 not in positions and trie.children[node + 1]:
            chosen[b, node] = True
    return chosen.to(computed.device)
