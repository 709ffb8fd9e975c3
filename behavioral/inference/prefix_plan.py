"""The batching plan of a pool of prompts: which prefix of each prompt comes from the KV-cache store (a branch point of
the pool's prefix tree, computed once), and batches of prompts whose remaining lengths are alike (little padding)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# A cached prefix costs a row of a batched prefix forward, a KV cache kept while its pool runs and a slot in each of
# its batches' stacked caches (copied a length at a time, not a prefix at a time); one that saves fewer positions than
# this is computed in the rows instead. Nationality's score run (bench_engine_costs --run-path) computes 1.15 x its
# prefix tree's positions at 32 (27 prefixes kept at batch 256), 1.07-1.08 x at 24 (75 at batch 64, 295 at 256).
MIN_SAVED_POSITIONS = 24
# A branch point between cached prefixes is one more level of the pool's prefix fill: a forward, which a GPU pays in
# kernel launches however short its segment. One that saves fewer positions than this is computed in the rows below
# it. The GPU check's grid fills in 2 levels at 8 (4 at 1: prefix fill 0.07 s against 0.12-0.48 s per 256 prompts on
# an H200); nationality's score run at batch 256 computes 1.077 x its prefix tree (1.071 at 1, 1.158 at 24).
MIN_BRANCH_SAVED = 8
# A batch is cut where padding would pass this share of its positions, once it holds more than MIN_ROWS rows (fewer
# would waste a GPU more than the padding does).
MAX_PADDING = 0.10
MIN_ROWS = 8


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


def with_branch_points(prefixes: Iterable[tuple[int, ...]],
                       min_saved: int = MIN_BRANCH_SAVED) -> set[tuple[int, ...]]:
    """The prefixes and the branch points of their own prefix tree (the longest common prefix of a pair adjacent in
    sorted order) that save at least `min_saved` positions over the point above them: computing these, each
    extending the longest one it starts with, computes every shared segment worth a level of the fill once."""
    ordered = sorted(set(prefixes))
    points = {a[:common_length(a, b)] for a, b in zip(ordered, ordered[1:])} - set(ordered) - {()}
    kept = set(ordered) - {()}
    for point in sorted(points, key=len):
        above = max((p for p in kept if len(p) < len(point) and point[:len(p)] == p), key=len, default=())
        below = sum(1 for p in ordered if p[:len(point)] == point)
        if (below - 1) * (len(point) - len(above)) >= min_saved:
            kept.add(point)
    return kept


def batches(prompts: Sequence[Sequence[int]], prefixes: Sequence[int], batch_size: int, extra: int,
            max_tokens: int | None = None, max_padding: float = MAX_PADDING,
            min_rows: int = MIN_ROWS) -> list[list[tuple[int, int]]]:
    """(prompt index, cached prefix length) batches, by the length each prompt has left after its prefix so padding
    stays small (prompts under one prefix together, else in their order): at most batch_size rows, at most
    `max_padding` of a batch's positions padding once it holds min_rows rows, and, if set, at most max_tokens
    positions (padded remainder plus `extra` new tokens per row)."""
    rest = [len(p) - k for p, k in zip(prompts, prefixes)]
    out: list[list[tuple[int, int]]] = []
    current: list[tuple[int, int]] = []
    filled = 0  # the current batch's unpadded remainders
    for i in sorted(range(len(prompts)), key=lambda i: (rest[i], prompts[i][:prefixes[i]], i)):
        rows, width = len(current) + 1, rest[i] + extra  # the longest so far: rows come shortest first
        over_budget = max_tokens is not None and width * rows > max_tokens
        padded = (rows * rest[i] - filled - rest[i]) / (rows * width) > max_padding and rows > min_rows
        if current and (len(current) == batch_size or over_budget or padded):
            out.append(current)
            current, filled = [], 0
        current.append((i, prefixes[i]))
        filled += rest[i]
    if current:
        out.append(current)
    return out
