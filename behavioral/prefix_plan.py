"""The batching plan of a pool of prompts: which prefix of each prompt comes from the KV-cache store (a branch point of
the pool's prefix tree, computed once), and batches of prompts whose remaining lengths are alike (little padding)."""

from __future__ import annotations

from collections.abc import Sequence

# A cached prefix costs a forward of its own; one that saves fewer positions than this is computed in the rows instead
# (on a GPU a small forward costs about as much as a few dozen positions of a full batch).
MIN_SAVED_POSITIONS = 64


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token sequences."""
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def cached_prefixes(prompts: Sequence[Sequence[int]], min_saved: int = MIN_SAVED_POSITIONS) -> list[int]:
    """Per prompt, the length of its prefix read from the cache: the deepest branch point of the prompts' prefix tree
    on its path whose extension over the branch point above it saves at least `min_saved` positions (computed once
    instead of once per prompt below it); every prompt keeps at least one token of its own."""
    n = len(prompts)
    order = sorted(range(n), key=lambda i: prompts[i])
    lcp = [common_length(prompts[order[k]], prompts[order[k + 1]]) for k in range(n - 1)]
    out = [0] * n
    pending = [(0, n, 0)] if n else []  # (lo, hi, base): order[lo:hi] lie under the branch point of length base
    while pending:
        lo, hi, base = pending.pop()
        if hi - lo == 1:
            out[order[lo]] = max(0, min(base, len(prompts[order[lo]]) - 1))
            continue
        depth = min(lcp[lo:hi - 1])
        chosen = depth if (hi - lo - 1) * (depth - base) >= min_saved else base
        start = lo
        for k in range(lo, hi - 1):
            if lcp[k] == depth:
                pending.append((start, k + 1, chosen))
                start = k + 1
        pending.append((start, hi, chosen))
    return out


def batches(prompts: Sequence[Sequence[int]], prefixes: Sequence[int], batch_size: int, extra: int,
            max_tokens: int | None = None) -> list[list[tuple[int, int]]]:
    """(prompt index, cached prefix length) batches, by the length each prompt has left after its prefix so padding
    stays small (prompts under one prefix together, else in their order): at most batch_size rows and, if set, max_tokens positions
    (padded remainder plus `extra` new tokens per row)."""
    rest = [len(p) - k for p, k in zip(prompts, prefixes)]
    out: list[list[tuple[int, int]]] = []
    current: list[tuple[int, int]] = []
    for i in sorted(range(len(prompts)), key=lambda i: (rest[i], prompts[i][:prefixes[i]], i)):
        width = rest[i] + extra  # the longest so far: rows come shortest first
        over_budget = max_tokens is not None and width * (len(current) + 1) > max_tokens
        if current and (len(current) == batch_size or over_budget):
            out.append(current)
            current = []
        current.append((i, prefixes[i]))
    if current:
        out.append(current)
    return out
