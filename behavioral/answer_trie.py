"""The valid answers of a rating scale as a token trie, and the reading of a model's distribution over them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

SPACE_MARKERS = "Ġ▁ "
DIGITS = "0123456789"  # str.isdigit() also accepts "²", which byte-level BPE uses for a raw byte


@dataclass(frozen=True)
class Scores:
    """What `score` mode reads from one prompt's answer distribution."""

    greedy: int
    expected: float
    valid_mass: float
    numeric_mass: float


@dataclass(frozen=True)
class AnswerTrie:
    """Token trie of answer strings; node i holds one token and attends to its ancestors when scored as a tree."""

    tokens: torch.Tensor  # [T] token id of each node
    parents: tuple[int, ...]  # parent node of each node, -1 for the root
    depth: torch.Tensor  # [T] 1 for the root's children
    ancestry: torch.Tensor  # [T, T] bool: column j is node i itself or one of its ancestors
    children: tuple[tuple[int, ...], ...]  # children of the root (index 0) and of node i (index i + 1)
    value_of: tuple[int | None, ...]  # the answer a node completes, if any
    continues: torch.Tensor  # [V] bool: tokens that extend a number already begun
    starts_number: torch.Tensor  # [V] bool: tokens that begin a number (after optional whitespace) or an answer

    @classmethod
    def for_scale(cls, tokenizer, max_rating: int) -> "AnswerTrie":
        """The trie of the integers 0..max_rating as `tokenizer` writes them."""
        return cls.build(tokenizer, {str(v): v for v in range(max_rating + 1)})

    @classmethod
    def build(cls, tokenizer, answers: dict[str, int]) -> "AnswerTrie":
        """The trie of `answers` (text -> value), each tokenized as the model would write it first thing."""
        tokens: list[int] = []
        parents: list[int] = []
        value_of: list[int | None] = []
        index: dict[tuple[int, ...], int] = {}
        for text, value in answers.items():
            ids = tuple(tokenizer.encode(text, add_special_tokens=False))
            if not ids:
                raise ValueError(f"answer {text!r} tokenizes to nothing; expected at least one token")
            for depth in range(1, len(ids) + 1):
                key = ids[:depth]
                if key not in index:
                    index[key] = len(tokens)
                    tokens.append(key[-1])
                    parents.append(index[key[:-1]] if depth > 1 else -1)
                    value_of.append(None)
            node = index[ids]
            if value_of[node] is not None:
                raise ValueError(f"answers {value_of[node]} and {value} tokenize to the same ids {list(ids)}")
            value_of[node] = value
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
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        continues = torch.tensor([bool(p) and p[0] in DIGITS for p in pieces])
        starts_number = torch.tensor([bool(p) and p.lstrip(SPACE_MARKERS)[:1] in DIGITS for p in pieces])
        starts_number[[tokens[i] for i in children[0]]] = True  # a first answer token, e.g. Mistral's bare "▁"
        return cls(
            torch.tensor(tokens), tuple(parents), depth, ancestry, tuple(tuple(c) for c in children),
            tuple(value_of), continues, starts_number,
        )

    def __len__(self) -> int:
        return len(self.tokens)

    def answer_logprobs(self, logits: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """(answer values, [B, A] float64 log-probabilities, the end of the number included) from tree logits."""
        logits = logits.float()
        device = logits.device
        lse = torch.logsumexp(logits, dim=-1)  # [B, P]
        node_pos = torch.tensor(self.parents, device=device) + 1
        tok_logp = logits[:, node_pos, self.tokens.to(device)] - lse[:, node_pos]  # [B, T]
        path_logp = tok_logp @ self.ancestry.T.float().to(device)  # [B, T]
        cont = torch.logsumexp(logits[:, 1:, self.continues.to(device)], dim=-1) - lse[:, 1:]
        end_logp = torch.log1p(-cont.exp().clamp(max=1 - 1e-7))  # [B, T]
        nodes = [i for i, v in enumerate(self.value_of) if v is not None]
        return [self.value_of[i] for i in nodes], (path_logp + end_logp)[:, nodes].double()

    def read(self, logits: torch.Tensor) -> list[Scores]:
        """Scores from logits [B, 1 + T, V]: position 0 after the prompt, position i + 1 after node i."""
        logits = logits.float()
        device = logits.device
        answers, answer_logp = self.answer_logprobs(logits)  # [B, A]
        values = torch.tensor(answers, dtype=torch.float64, device=device)
        probs = torch.softmax(answer_logp, dim=-1)
        expected = probs @ values
        valid = answer_logp.exp().sum(-1)
        starts = self.starts_number.to(device)
        numeric = (torch.logsumexp(logits[:, 0, starts], dim=-1) - torch.logsumexp(logits[:, 0], dim=-1)).exp()
        return [
            Scores(self._greedy(logits[b]), float(expected[b]), float(valid[b]), float(numeric[b]))
            for b in range(logits.shape[0])
        ]

    def _greedy(self, logits: torch.Tensor) -> int:
        """The answer greedy decoding reaches when it must start a number: continue while a child token is argmax."""
        k = max(len(c) for c in self.children) + 1
        pos, node = 0, -1
        while True:
            kids = self.children[node + 1]
            if not kids:
                break
            kid_tokens = self.tokens[list(kids)].to(logits.device)
            kid_logits = logits[pos, kid_tokens]
            best = int(torch.argmax(kid_logits))
            top = torch.topk(logits[pos], k)
            outsider = next(float(v) for v, t in zip(top.values, top.indices) if t not in kid_tokens)
            if node >= 0 and self.value_of[node] is not None and float(kid_logits[best]) <= outsider:
                break
            node = kids[best]
            pos = node + 1
        return self.value_of[node]
