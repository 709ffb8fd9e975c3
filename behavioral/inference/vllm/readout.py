"""An answer tree read through vLLM: one request per tree position, whose logits a processor inside vLLM's worker
(behavioral.inference.vllm.processors.TreeReadout) replaces by what the answer trie reads there, returned as the request's
logprobs (logprobs_mode processed_logits); the readouts assemble into the TreeLogits the engine's tree forward gives."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.tree_logits import TreeLogits

# A readout's leading slots (token ids 0-4): the log-normaliser, the log-sums over the tokens that do not continue a
# word or number (where an answer may end) and that start an answer, the best logit and its token id (exact in
# float32 below 2**24); the position's children follow.
LSE, STOPS, STARTS, BEST, BEST_TOKEN = range(5)
SLOTS = 5


def paths(trie: AnswerTrie) -> list[tuple[int, ...]]:
    """The tokens after the prompt (and prefill) of each tree position: () at the prompt's end (position 0), then node
    i's path, its ancestors' tokens and its own (position i + 1)."""
    tokens = trie.tokens.tolist()
    out: list[tuple[int, ...]] = [()]
    for i, parent in enumerate(trie.parents):  # a parent comes before its children
        out.append(out[parent + 1] + (tokens[i],))
    return out


def child_tokens(trie: AnswerTrie, position: int) -> list[int]:
    """The tokens of the children of a position's node (position 0: the root's)."""
    return [int(trie.tokens[c]) for c in trie.children[position]]


def readout(logits: torch.Tensor, continues: torch.Tensor, starts: torch.Tensor,
            children: torch.Tensor) -> torch.Tensor:
    """One position's logits [V] replaced by its readout: the SLOTS leading values, then the logits of `children`,
    -inf elsewhere; computed by the engine's own reduction (TreeLogits.of) of this one position."""
    tree = TreeLogits.of(logits[None, None], children, continues, starts, 1)
    out = torch.full_like(logits, float("-inf"))
    out[:SLOTS] = torch.stack([tree.lse[0, 0], tree.lse_stops[0, 0], tree.lse_starts[0, 0],
                               tree.top_values[0, 0, 0], tree.top_indices[0, 0, 0].to(out.dtype)])
    out[SLOTS:SLOTS + len(children)] = tree.columns[0, 0]
    return out


def tree_logits(trie: AnswerTrie, readouts: Sequence[Sequence[Sequence[float]]]) -> TreeLogits:
    """The TreeLogits of B prompts from their readouts [B][position][slot]. Each position's top tokens are its best
    one alone, then -inf: all AnswerTrie._greedy reads of them is whether the best token is one of the children."""
    vocab = torch.unique(trie.tokens)
    column = {t: j for j, t in enumerate(vocab.tolist())}
    n, width = len(readouts), len(trie) + 1
    head = torch.tensor([[position[:SLOTS] for position in rows] for rows in readouts], dtype=torch.float32)
    columns = torch.full((n, width, len(vocab)), float("-inf"))
    for p in range(width):
        kids = [column[t] for t in child_tokens(trie, p)]
        if kids:
            columns[:, p, kids] = torch.tensor([rows[p][SLOTS:] for rows in readouts], dtype=torch.float32)
    top_values = torch.full((n, width, trie.top_k), float("-inf"))
    top_values[..., 0] = head[..., BEST]
    top_indices = torch.full((n, width, trie.top_k), -1, dtype=torch.long)
    top_indices[..., 0] = head[..., BEST_TOKEN].long()
    return TreeLogits(vocab, head[..., LSE], head[..., STOPS], head[..., STARTS], columns, top_values, top_indices)
