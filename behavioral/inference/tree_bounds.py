"""How far a partly read answer tree's numbers can be from the full tree's: the worst case over every way the
unread subtrees could hold their probability.

A lazy read computes some nodes of the answer trie. A node whose parent was computed but which was not (a frontier
node) has a known path probability m; the answers below it hold some part of m, anywhere in [0, m], spread over
their values in any way. The reported distribution puts all of m on the node's own answer (as if the answer ended
there; nothing where the node completes none) and renormalises. Whatever the truth, both distributions give the read
answers at least A / (A + U) of their weight in the same proportions (A: the computed answers' mass, U: the frontier's
total), so their total variation distance is at most U / (A + U) (the `probs` bound, also each probability's and, as
U <= U / (A + U), the valid mass's). The expected value's bound is the largest distance from the reported one to an
expected value some allocation reaches (`expected_extremes`), and entropy's follows from the total variation
distance by the Fannes-Audenaert inequality.
"""

from __future__ import annotations

import math

import torch


def probs_bound(read_mass: torch.Tensor, frontier_mass: torch.Tensor) -> torch.Tensor:
    """[B] bound on the total variation distance between the reported and the full tree's renormalised
    distribution: U / (A + U), 0 where nothing is unread."""
    total = read_mass + frontier_mass
    return torch.where(frontier_mass > 0, frontier_mass / total.clamp(min=torch.finfo(total.dtype).tiny),
                       torch.zeros_like(total))


def expected_extremes(read_mass: torch.Tensor, read_sum: torch.Tensor, mass: torch.Tensor, low: torch.Tensor,
                      high: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The least and greatest expected value over the allocations of frontier masses `mass` [B, T] (0 off the
    frontier) to values within each node's subtree range [`low`, `high`] [T], given the read answers' mass and
    value-weighted sum [B]. Adding mass at value v moves the mean towards v, so the greatest takes whole masses at
    their highs, highest first, for as long as that raises the mean: the largest mean over the prefixes of that
    order (the least, likewise, at the lows)."""
    def extreme(values: torch.Tensor, sign: float) -> torch.Tensor:
        order = torch.argsort(values * -sign, stable=True)
        m = mass[:, order]
        sums = read_sum[:, None] + torch.cumsum(m * values[order], dim=1)
        masses = read_mass[:, None] + torch.cumsum(m, dim=1)
        means = torch.cat([read_sum[:, None], sums], dim=1) / torch.cat([read_mass[:, None], masses], dim=1)
        means = torch.where(torch.isnan(means), torch.full_like(means, -sign * math.inf), means)  # no mass: no mean
        return sign * (sign * means).amax(dim=1)

    return extreme(low, -1.0), extreme(high, 1.0)


def entropy_bound(tv: torch.Tensor, labels: int) -> torch.Tensor:
    """[B] bound on the entropy difference (nats) of two distributions over `labels` answers at total variation
    distance `tv` (Fannes-Audenaert: tv log(labels - 1) + h(tv), and log(labels) from tv >= 1 - 1/labels on)."""
    if labels < 2:
        return torch.zeros_like(tv)
    t = tv.clamp(0.0, 1.0)
    binary = -(t * torch.log(t) + (1 - t) * torch.log1p(-t)).nan_to_num(0.0)
    bound = t * math.log(labels - 1) + binary
    return torch.where(t >= 1 - 1 / labels, torch.full_like(t, math.log(labels)), bound)
