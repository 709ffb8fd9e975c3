"""Closed answer sets (the integers of a rating scale, letters, emotion words, Likert points) as token tries, and the
reading of a model's distribution over them from one tree-masked forward.

An `AnswerSpec` says what a suite accepts, independent of any tokenizer: labels, each with one or more surface forms
(`A` and ` A`; `joy`, `Joy`, ` joy`) and an optional value (Likert 1..5, the integer itself), and an optional
assistant prefill (`[[`) that the answer follows. `AnswerTrie.build` tokenizes it for one model. A label's probability
is the sum over its forms of the form's token path times the probability that the answer ends there: the next token
neither continues the word or number (`joy` -> `joyful`, `8` -> `80`) nor follows another form of the set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import torch

from behavioral.inference import tree_bounds
from behavioral.inference import tree_logits
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.tree_logits import TreeLogits

SPACE_MARKERS = "Ġ▁ "
DIGITS = "0123456789"  # str.isdigit() also accepts "²", which byte-level BPE uses for a raw byte


@dataclass(frozen=True)
class Scores:
    """What the score mode reads from one prompt's answer distribution.

    `probs` is renormalised over the set (label order of the spec); `greedy` the label greedy decoding reaches when
    made to stay in the set; `expected` the mean value under `probs` (None without values); `valid_mass` the
    probability the set holds; `start_mass` the probability that the unconstrained first answer token begins an answer
    of the set (for numbers: any digit). `state` holds final-token activations [hooks, d] (on the model's device, in
    its dtype) when a tracer was active.

    A lazy read (behavioral.inference.lazy_tree) computes `nodes` of the trie's nodes and states how far its numbers can be from
    the full tree's: `expected_bound` for `expected` (None without values), `probs_bound` for each probability, their
    total variation distance and `valid_mass`, `entropy_bound` (nats) for the entropy of `probs`
    (behavioral.inference.tree_bounds). `greedy` is exact either way (its path is always read). A full read has bounds 0.
    """

    greedy: int | str
    expected: float | None
    valid_mass: float
    start_mass: float
    probs: tuple[float, ...]
    nodes: int = 0
    expected_bound: float | None = 0.0
    probs_bound: float = 0.0
    entropy_bound: float = 0.0
    state: torch.Tensor | None = field(default=None, compare=False, repr=False)


def _pieces(tokenizer) -> list[str]:
    return tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))


@dataclass(frozen=True)
class AnswerTrie:
    """Token trie of an answer set; node i holds one token and attends to its ancestors when scored as a tree."""

    spec: AnswerSpec
    prefill: tuple[int, ...]  # prefill token ids, appended to every prompt before the tree
    tokens: torch.Tensor  # [T] token id of each node
    parents: tuple[int, ...]  # parent node of each node, -1 for the root
    depth: torch.Tensor  # [T] 1 for the root's children
    ancestry: torch.Tensor  # [T, T] bool: column j is node i itself or one of its ancestors
    children: tuple[tuple[int, ...], ...]  # children of the root (index 0) and of node i (index i + 1)
    value_of: tuple[int | None, ...]  # the label (index into spec.labels) a node completes, if any
    # [V] bool over the tokenizer's vocabulary; a model's logits may be wider (rows padded past the tokenizer's ids,
    # as in Qwen2.5 or Llama shapes under another tokenizer), and those padding ids neither continue nor start one
    continues: torch.Tensor  # [V] bool: tokens that extend a word or number already begun
    ends_word: torch.Tensor  # [T] bool: the node's form can be continued by `continues` (ends in a letter/digit)
    starts: torch.Tensor  # [V] bool: tokens that begin an answer of the set
    # (node, token) pairs that also keep an answer from ending there: children not already in `continues`
    extra_nodes: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    extra_tokens: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))

    @classmethod
    def for_scale(cls, tokenizer, max_rating: int) -> "AnswerTrie":
        """The trie of the integers 0..max_rating as `tokenizer` writes them."""
        return cls.build(tokenizer, AnswerSpec.integers(0, max_rating))

    @classmethod
    def build(cls, tokenizer, spec: AnswerSpec) -> "AnswerTrie":
        """The trie of `spec`'s forms, each tokenized as the model would write it first thing (after the prefill)."""
        prefill = tuple(tokenizer.encode(spec.prefill, add_special_tokens=False)) if spec.prefill else ()
        tokens: list[int] = []
        parents: list[int] = []
        value_of: list[int | None] = []
        last_char: list[str] = []
        index: dict[tuple[int, ...], int] = {}
        for k, label in enumerate(spec.labels):
            for form in label.forms:
                ids = _form_ids(tokenizer, spec.prefill, prefill, form)
                for depth in range(1, len(ids) + 1):
                    key = ids[:depth]
                    if key not in index:
                        index[key] = len(tokens)
                        tokens.append(key[-1])
                        parents.append(index[key[:-1]] if depth > 1 else -1)
                        value_of.append(None)
                        last_char.append("")
                node = index[ids]
                if value_of[node] not in (None, k):
                    other = spec.labels[value_of[node]].name
                    raise ValueError(f"answers {other!r} and {label.name!r} tokenize to the same ids {list(ids)} "
                                     f"(form {form!r}); expected distinct answers")
                value_of[node], last_char[node] = k, form[-1:]
        n = len(tokens)
        depth = torch.zeros(n, dtype=torch.long)
        ancestry = torch.zeros(n, n, dtype=torch.bool)
        children: list[list[int]] = [[] for _ in range(n + 1)]
        for i, parent in enumerate(parents):
            children[parent + 1].append(i)
            j = i
            while j >= 0:
                ancestry[i, j] = True
                depth[i] += 1
                j = parents[j]
        pieces = _pieces(tokenizer)
        if spec.numeric:
            continues = torch.tensor([bool(p) and p[0] in DIGITS for p in pieces])
            starts = torch.tensor([bool(p) and p.lstrip(SPACE_MARKERS)[:1] in DIGITS for p in pieces])
        else:
            continues = torch.tensor([bool(p) and (p[0].isalnum() or p[0] == "_") for p in pieces])
            heads = {f.strip() for label in spec.labels for f in label.forms}
            starts = torch.tensor([_begins_one_of(p.lstrip(SPACE_MARKERS), heads) for p in pieces])
        starts[[tokens[i] for i in children[0]]] = True  # a first answer token, e.g. Mistral's bare "▁"
        ends_word = torch.tensor([c.isalnum() or c == "_" for c in last_char], dtype=torch.bool)
        extra = [(i, tokens[c]) for i in range(n) if value_of[i] is not None for c in children[i + 1]
                 if not (ends_word[i] and continues[tokens[c]])]
        return cls(spec, prefill, torch.tensor(tokens), tuple(parents), depth, ancestry,
                   tuple(tuple(c) for c in children), tuple(value_of), continues, ends_word, starts,
                   torch.tensor([i for i, _ in extra], dtype=torch.long),
                   torch.tensor([t for _, t in extra], dtype=torch.long))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def value_names(self) -> tuple:
        """Label names of the terminal nodes, in node order."""
        return tuple(self.spec.labels[v].name for v in self.value_of if v is not None)

    @property
    def top_k(self) -> int:
        """Top tokens a position's reduction keeps: enough to find the best token outside any node's children."""
        return max(len(c) for c in self.children) + 1

    def reduce(self, logits: torch.Tensor | TreeLogits) -> TreeLogits:
        """What the trie reads from full tree logits [B, 1 + T, V] (a TreeLogits passes through)."""
        if isinstance(logits, TreeLogits):
            return logits
        return TreeLogits.of(logits, torch.unique(self.tokens), self.continues, self.starts, self.top_k)

    def reduce_hidden(self, hidden: torch.Tensor, head: torch.nn.Linear) -> TreeLogits:
        """What the trie reads, from the output head's input [B, 1 + T, d] (tree_logits.TreeLogits.of_hidden)."""
        return TreeLogits.of_hidden(hidden, head, torch.unique(self.tokens), self.continues, self.starts, self.top_k)

    @cached_property
    def value_ranges(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """[T] float64 value of each node's own answer (0 where it completes none), and the least and greatest value
        of the answers in its subtree (the node included); None unless every label has a value."""
        values = self.spec.values
        if values is None:
            return None
        node_value = torch.tensor([math.nan if k is None else values[k] for k in self.value_of], dtype=torch.float64)
        inside = self.ancestry & ~torch.isnan(node_value)[:, None]  # [i, j]: i is an answer in j's subtree
        column = node_value[:, None].expand_as(inside)
        return (node_value.nan_to_num(0.0), torch.where(inside, column, math.inf).amin(dim=0),
                torch.where(inside, column, -math.inf).amax(dim=0))

    def known(self, computed: torch.Tensor) -> torch.Tensor:
        """[B, T] bool: nodes whose path probability a read with `computed` logit positions [B, 1 + T] knows (the
        position before each of their tokens is computed)."""
        before = torch.tensor(self.parents, device=computed.device) + 1
        missing = (~computed[:, before]).float() @ self.ancestry.T.float().to(computed.device)
        return missing == 0

    def answer_logprobs(self, logits: torch.Tensor | TreeLogits) -> tuple[list, torch.Tensor]:
        """(label names, [B, labels] float64 log-probabilities, each answer's end included) from tree logits (full,
        or reduced)."""
        return list(self.spec.names), self._label_logp(self._node_logp(self.reduce(logits))[0])

    def _node_logp(self, tree: TreeLogits, computed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """([B, T] float64 log-probability that the answer is node i's form: its path, then its end; [B, T] float32
        path log-probabilities). With `computed` [B, 1 + T] (the positions a lazy read computed): -inf below the
        frontier, and a frontier node's answer taken to end there (behavioral.inference.tree_bounds)."""
        device = tree.lse.device
        column = torch.searchsorted(tree.vocab, self.tokens.to(device))  # node -> its token's column
        node_pos = torch.tensor(self.parents, device=device) + 1
        tok_logp = tree.columns[:, node_pos, column] - tree.lse[:, node_pos]  # [B, T]
        known = None if computed is None else self.known(computed)
        if known is not None:
            tok_logp = tok_logp.masked_fill(~known, 0.0)
        path_logp = tok_logp @ self.ancestry.T.float().to(device)  # [B, T]
        # After node i the answer ends where the next token neither continues its word or number (where the form
        # ends in a letter or digit) nor follows another form of the set: the mass of the tokens that do not
        # continue (all tokens, where the form cannot be continued), less the following forms' (a subset of them).
        ends = torch.where(self.ends_word.to(device), tree.lse_stops[:, 1:], tree.lse[:, 1:]).double()  # [B, T]
        if len(self.extra_nodes):
            nodes = self.extra_nodes.to(device)
            extra = tree.columns[:, nodes + 1, torch.searchsorted(tree.vocab, self.extra_tokens.to(device))]  # [B, E]
            following = torch.full_like(ends, float("-inf"))
            for e in range(len(nodes)):
                following[:, nodes[e]] = torch.logaddexp(following[:, nodes[e]], extra[:, e].double())
            ends = ends + torch.log1p(-torch.exp((following - ends).clamp(max=0.0)))  # at 0: rounding, no end
        end_logp = ends - tree.lse[:, 1:].double()  # [B, T]
        if known is not None:
            path_logp = path_logp.masked_fill(~known, float("-inf"))
            end_logp = end_logp.masked_fill(~computed[:, 1:], 0.0)
        return (path_logp + end_logp).double(), path_logp

    def _label_logp(self, node_logp: torch.Tensor) -> torch.Tensor:
        """[B, labels] log-probabilities: each label's forms' node log-probabilities summed."""
        labels = torch.full((node_logp.shape[0], len(self.spec.labels)), float("-inf"), dtype=torch.float64,
                            device=node_logp.device)
        for node, k in enumerate(self.value_of):
            if k is not None:
                labels[:, k] = torch.logaddexp(labels[:, k], node_logp[:, node])
        return labels

    def reading(self, tree: TreeLogits, computed: torch.Tensor | None = None) -> Reading:
        """The answer distribution a reduced tree gives, on its device: of the full tree, or (`computed` [B, 1 + T]
        bool) of the positions a lazy read computed, with the bounds on its distance from the full tree's."""
        node_logp, path_logp = self._node_logp(tree, computed)
        label_logp = self._label_logp(node_logp)
        probs = torch.softmax(label_logp, dim=-1)
        ranges = self.value_ranges
        device = probs.device
        expected = probs @ torch.tensor(self.spec.values, dtype=torch.float64, device=device) if ranges else \
            torch.full(probs.shape[:1], math.nan, dtype=torch.float64, device=device)
        n = len(probs)
        if computed is None:
            frontier = torch.zeros(n, len(self), dtype=torch.float64, device=device)
            zero = torch.zeros(n, dtype=torch.float64, device=device)
            nodes = torch.full((n,), len(self), device=device)
            bounds = (zero if ranges else expected, zero, zero)
        else:
            read = computed[:, 1:]
            frontier = path_logp.double().exp().masked_fill(read, 0.0)  # -inf (0) where the path is not known
            labelled = torch.tensor([k is not None for k in self.value_of], device=device)
            read_mass = node_logp.exp().masked_fill(~(read & labelled), 0.0)
            tv = tree_bounds.probs_bound(read_mass.sum(1), frontier.sum(1))
            spread = torch.full_like(expected, math.nan)
            if ranges:
                values, low, high = (r.to(device) for r in ranges)
                lo, hi = tree_bounds.expected_extremes(read_mass.sum(1), (read_mass * values).sum(1), frontier,
                                                       low, high)
                spread = torch.maximum(hi - expected, expected - lo).clamp(min=0.0)
            bounds = (spread, tv, tree_bounds.entropy_bound(tv, len(self.spec.labels)))
            nodes = read.sum(1)
        return Reading(label_logp, probs, expected, label_logp.exp().sum(-1),
                       (tree.lse_starts[:, 0] - tree.lse[:, 0]).exp().double(), frontier, nodes, *bounds)

    def read(self, logits: torch.Tensor | TreeLogits, computed: torch.Tensor | None = None,
             reading: Reading | None = None) -> list[Scores]:
        """Scores from tree logits [B, 1 + T, V] (position 0 after the prompt and prefill, position i + 1 after node
        i) or their reduction, of the whole tree or (`computed`) of a lazy read's positions, whose `reading` a caller
        may already hold. Full logits are reduced READ_BYTES of float32 at a time; everything the scores need is
        computed on the logits' device and moved to the host in one transfer per batch (per-row reads would stall a
        GPU once per number)."""
        if isinstance(logits, TreeLogits):
            parts = [self._summaries(logits, reading or self.reading(logits, computed))]
        else:
            rows = max(1, tree_logits.READ_BYTES // (logits[0].numel() * 4))
            parts = []
            for i in range(0, len(logits), rows):
                tree = self.reduce(logits[i:i + rows])
                parts.append(self._summaries(tree, self.reading(tree)))
        host = [torch.cat(column).cpu().tolist() for column in zip(*parts)]
        expected, valid, start, probs, nodes, spread, tv, entropy, columns, top_values, top_indices = host
        column = self.token_columns()
        branching = self.branching()
        return [
            Scores(self._label_name(self.greedy_walk(columns[b], dict(zip(branching, zip(top_values[b], top_indices[b]))),
                                               column)),
                   None if not self.spec.values else expected[b], valid[b], start[b], tuple(probs[b]), int(nodes[b]),
                   None if not self.spec.values else spread[b], tv[b], entropy[b])
            for b in range(len(probs))
        ]

    def token_columns(self) -> dict[int, int]:
        """Token id -> its column in a reduction's `columns` (the trie's distinct tokens, ascending)."""
        return {int(t): j for j, t in enumerate(torch.unique(self.tokens).tolist())}

    def branching(self) -> list[int]:
        """Logit positions whose node has children (0: after the prompt)."""
        return [0] + [i + 1 for i in range(len(self.tokens)) if self.children[i + 1]]

    def _summaries(self, tree: TreeLogits, r: Reading) -> tuple[torch.Tensor, ...]:
        """Per row, on the logits' device: from the `tree`'s reading `r`, expected value, valid mass, start mass, label
        probabilities, nodes read and the three bounds; from `tree`, the trie tokens' logits at every position and the
        top-k (values, tokens) at branching positions."""
        branching = self.branching()
        return (r.expected, r.valid_mass, r.start_mass, r.probs, r.nodes, r.expected_bound, r.probs_bound,
                r.entropy_bound, tree.columns, tree.top_values[:, branching], tree.top_indices[:, branching])

    def _label_name(self, node: int) -> int | str:
        return self.spec.labels[self.value_of[node]].name

    def greedy_walk(self, columns: list[list[float]], top: dict[int, tuple[list[float], list[int]]],
              column: dict[int, int], computed: set[int] | None = None) -> int:
        """The node greedy decoding reaches when it must stay in the set: continue while a child token is argmax.
        Reads one row's logits of the trie's tokens at each position (`column`: token -> index) and its top-k
        (values, tokens) at each position that has children. Given the `computed` positions of a lazy read, it
        stops at the first node on its path whose own position, which decides where it goes on, is not computed."""
        token_ids = self.tokens.tolist()
        pos, node = 0, -1
        while True:
            kids = self.children[node + 1]
            if not kids or (computed is not None and pos not in computed):
                break
            kid_tokens = [token_ids[kid] for kid in kids]
            kid_logits = [columns[pos][column[t]] for t in kid_tokens]
            best = kid_logits.index(max(kid_logits))
            outsider = next(v for v, t in zip(*top[pos]) if t not in kid_tokens)
            if node >= 0 and self.value_of[node] is not None and kid_logits[best] <= outsider:
                break
            node = kids[best]
            pos = node + 1
        return node


@dataclass(frozen=True)
class Reading:
    """One batch's answer distribution, on the logits' device ([B] per row unless said): label log-probabilities and
    probabilities [B, labels], expected value (nan without values), valid and start mass, each frontier node's path
    probability [B, T] (0 off the frontier; all 0 for a full read), nodes read, and the bounds of Scores."""

    label_logp: torch.Tensor
    probs: torch.Tensor
    expected: torch.Tensor
    valid_mass: torch.Tensor
    start_mass: torch.Tensor
    frontier: torch.Tensor
    nodes: torch.Tensor
    expected_bound: torch.Tensor
    probs_bound: torch.Tensor
    entropy_bound: torch.Tensor


def _form_ids(tokenizer, prefill_text: str, prefill: tuple[int, ...], form: str) -> tuple[int, ...]:
    """Token ids of `form` written right after the prefill; an error where the two merge into one token."""
    if not form:
        raise ValueError("an answer form is empty; expected at least one character")
    if not prefill:
        ids = tuple(tokenizer.encode(form, add_special_tokens=False))
    else:
        joined = tuple(tokenizer.encode(prefill_text + form, add_special_tokens=False))
        if joined[:len(prefill)] != prefill:
            raise ValueError(f"answer form {form!r} merges with the prefill {prefill_text!r} into other tokens; "
                             "expected forms that start a new token after the prefill")
        ids = joined[len(prefill):]
    if not ids:
        raise ValueError(f"answer {form!r} tokenizes to nothing; expected at least one token")
    return ids


def _begins_one_of(text: str, heads: set[str]) -> bool:
    """True if a token reading `text` can begin one of the answers `heads` (it is a prefix of one, or one of them
    followed by punctuation)."""
    if not text:
        return False
    return any(h.startswith(text) or (text.startswith(h) and not text[len(h):][:1].isalnum()) for h in heads)
