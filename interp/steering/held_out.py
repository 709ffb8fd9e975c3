"""The held-out-identity control of a steering's projections: does the direction fit without an identity's cells
lower that identity's in-group interaction as the real direction does (a feature every in-group cell shares) or not
(features per identity)? With the interaction model it reads (main effects fit on the out-group cells, a token-length
term where it is not additive) and the transfer ratio with Fieller's interval."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from behavioral.analysis import cell_gap
from behavioral.analysis.paired import fieller, t_interval
from interp.steering.controls import UNSTEERED, Block


TRANSFER_REFUSED = ("the real direction's lowering of the held-out identities' in-group interactions is not "
                    "distinguishable from 0 (its 95% t-interval over events includes 0), so the ratio has no bounded "
                    "interval and is not printed")
TRANSFER_RAISED = ("the real direction raised the held-out identities' in-group interactions (its 95% t-interval "
                   "over events lies below 0): there is no lowering to transfer, so the ratio is not printed")


LENGTHS_FIT = "persona tokens × experiencer tokens fit beside the main effects"
LENGTHS_ADDITIVE = ("none needed: persona tokens × experiencer tokens are additive over these identities (e.g. every "
                    "one the same length), so the main effects remove them")
LENGTHS_NOT_GIVEN = "not controlled: no token counts given"


def length_term(tokens: Mapping[str, tuple[int, int]], names: Sequence[str]) -> np.ndarray:
    """[n, n] float: persona tokens of perceiver p × experiencer tokens of experiencer x, for `names` in order
    (`tokens`: identity -> its persona slot's and its experiencer slot's token counts, the protocol's
    `identity_tokens`)."""
    persona, experiencer = np.array([tokens[name] for name in names], dtype=float).T
    return np.outer(persona, experiencer)


def _interaction_design(same: np.ndarray, covariate: np.ndarray | None) -> tuple[np.ndarray, bool]:
    """The design [n², 2n (+1)] of `ingroup_interaction` (perceiver and experiencer indicators, and `covariate`'s
    column where it is not in their span over the out-group cells), and whether that column is in it."""
    n = len(same)
    rows, cols = np.indices((n, n)).reshape(2, -1)
    design = np.hstack([np.eye(n)[rows], np.eye(n)[cols]])  # the constant is in the span of either block
    outside = ~np.asarray(same, dtype=bool).ravel()
    rank = np.linalg.matrix_rank(design[outside])
    if rank < np.linalg.matrix_rank(design):
        raise ValueError("the in-group interaction needs three or more groups: the main effects of an in-group cell "
                         "are not estimable from the out-group cells")
    if covariate is None:
        return design, False
    extended = np.hstack([design, np.asarray(covariate, dtype=float).reshape(-1, 1)])
    return (extended, True) if np.linalg.matrix_rank(extended[outside]) > rank else (design, False)


def ingroup_interaction(I: np.ndarray, same: np.ndarray, covariate: np.ndarray | None = None) -> np.ndarray:
    """I [n, n, ...] less its additive model a + b_p + c_x (perceiver p, experiencer x) fit by least squares on the
    out-group cells (`same` False) alone, per trailing index (e.g. per event): what an in-group cell holds beyond its
    rater's and its rated identity's main effects. With `covariate` [n, n] (`length_term`: persona tokens ×
    experiencer tokens) the model adds β × covariate, fit on the same cells, where it is not additive there (else
    the main effects remove it already): what an in-group cell holds beyond that too. A double-centring over all
    cells mixes the other in-group cells into each (where the others close and j's does not, j's seems to close by
    1/n); this mixes in none. A ValueError with fewer than three groups, where the main effects of an in-group cell
    are not estimable from the out-group cells."""
    n = len(same)
    design, _ = _interaction_design(same, covariate)
    outside = ~np.asarray(same, dtype=bool).ravel()
    flat = I.reshape(n * n, -1)
    return (flat - design @ np.linalg.lstsq(design[outside], flat[outside], rcond=None)[0]).reshape(I.shape)


def transfer(held: np.ndarray, real: np.ndarray) -> dict[str, float | str]:
    """mean(held) / mean(real) of paired per-event values (how far each direction lowered the in-group interaction)
    with Fieller's 95% interval; NaN with the reason in ``transfer_note`` where the denominator's t-interval
    includes 0 (`TRANSFER_REFUSED`) or lies below it (`TRANSFER_RAISED`: the sentence it supports is about a lowering,
    so one side of the interval decides and a world without one passes by chance in about 0.025 of runs, not 0.05)
    or fewer than two events are kept."""
    if len(held) < 2:
        return {"transfer": math.nan, "transfer_low": math.nan, "transfer_high": math.nan,
                "transfer_note": "fewer than two events kept in every condition"}
    low, high, unbounded = fieller(held, real, 0.95)
    note = TRANSFER_REFUSED if unbounded else TRANSFER_RAISED if real.mean() < 0 else ""
    if note:
        return {"transfer": math.nan, "transfer_low": math.nan, "transfer_high": math.nan, "transfer_note": note}
    return {"transfer": float(held.mean() / real.mean()), "transfer_low": low, "transfer_high": high,
            "transfer_note": ""}


def held_out_control(blocks: Iterable[Block],
                     tokens: Mapping[str, tuple[int, int]] | None = None) -> pd.DataFrame:
    """The held-out-identity control of the projections: per block (`interp.steering.controls.Block`), layer and
    identity group j left out of a fit, j's in-group interaction (``interaction_*``: the mean over j's in-group cells
    of `ingroup_interaction`, in rating points, with `tokens` (identity -> persona and experiencer token counts, the
    protocol's `identity_tokens`) less a persona tokens × experiencer tokens term fit on the out-group cells too,
    which ``length_control`` names; one identity per group: its own cell's) unsteered, after projecting out the
    direction fit without j's cells (``L{l} project held out {j}``) and after projecting out the real direction, fit
    with them (``L{l} project``), over the events kept in every condition of the layer, and how far each direction
    lowered it (``closed_held_out``, ``closed_real``: unsteered − projected). Per layer, ``identity`` "pooled": the
    means over the held-out identities, the t-intervals over events of both closings, and ``transfer`` = pooled
    closed_held_out / pooled closed_real with Fieller's interval over events (`transfer`: refused where the real
    closing's interval includes 0 or lies below it). A direction that carries a feature every in-group cell shares
    lowers a held-out identity's interaction as the real one does (transfer near 1); one fit from identity-specific
    features does not (near 0). j's in-group cell read against its own row and column instead carries j's main
    effects, which any projection the rating reads shifts: that passed without a shared feature; and without the
    length term a rating that reads persona length × experiencer length passed it too (docs/BENCHMARKS.md)."""
    out = []
    for block in blocks:
        rows, tensors, same, groups = block.rows, block.tensors, block.same, block.groups
        mine = rows[rows["held_out"].ge(0)] if "held_out" in rows else rows.iloc[:0]
        if not len(mine):
            continue
        first = {j: name for name, j in reversed(list(zip(block.names, groups)))}
        covariate = None if tokens is None else length_term(tokens, block.names)
        lengths = (LENGTHS_NOT_GIVEN if covariate is None
                   else LENGTHS_FIT if _interaction_design(same, covariate)[1] else LENGTHS_ADDITIVE)
        for layer, part in mine.groupby("layer"):
            left_out = sorted(int(j) for j in part["held_out"].unique())
            conditions = [UNSTEERED, f"L{layer} project", *(f"L{layer} project held out {j}" for j in left_out)]
            kept = np.logical_and.reduce([cell_gap.exclusion_mask(tensors[c]) for c in conditions])
            labels = {"layer": int(layer), **block.labels}
            table = (_held_out_rows(tensors, conditions, left_out, kept, same, groups, first, covariate)
                     if kept.any() else pd.DataFrame([{"identity": "pooled", **transfer(np.zeros(0), np.zeros(0))}]))
            out.append(pd.DataFrame([labels] * len(table)).join(table).assign(n_events=int(kept.sum()),
                                                                                length_control=lengths))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _held_out_rows(tensors: Mapping[str, np.ndarray], conditions: Sequence[str], left_out: Sequence[int],
                   kept: np.ndarray, same: np.ndarray, groups: np.ndarray, first: Mapping[int, str],
                   covariate: np.ndarray | None) -> pd.DataFrame:
    """`held_out_control`'s rows of one layer: per held-out group j (named `first[j]`) and pooled, over the `kept`
    events; `conditions`: unsteered, the real projection, then the held-out projections in `left_out` order;
    `covariate`: the length term of `ingroup_interaction` (None: none)."""
    own = {c: ingroup_interaction(tensors[c][:, :, kept], same, covariate) for c in conditions}
    records, held_closed, real_closed = [], [], []
    for j, condition in zip(left_out, conditions[2:]):
        before, real, after = (own[c][same & (groups[:, None] == j)].mean(axis=0)
                               for c in (conditions[0], conditions[1], condition))
        held_closed.append(before - after)
        real_closed.append(before - real)
        records.append({"identity": first[j], "interaction_unsteered": before.mean(),
                        "interaction_held_out": after.mean(), "interaction_real": real.mean(),
                        "closed_held_out": held_closed[-1].mean(), "closed_real": real_closed[-1].mean()})
    frame = pd.DataFrame(records)
    pooled_held, pooled_real = np.mean(held_closed, axis=0), np.mean(real_closed, axis=0)
    pooled = {"identity": "pooled", **frame.drop(columns="identity").mean(),
              **dict(zip(("closed_held_out_low", "closed_held_out_high"), t_interval(pooled_held, 0.95))),
              **dict(zip(("closed_real_low", "closed_real_high"), t_interval(pooled_real, 0.95))),
              **transfer(pooled_held, pooled_real)}
    return pd.concat([frame, pd.DataFrame([pooled])], ignore_index=True)
