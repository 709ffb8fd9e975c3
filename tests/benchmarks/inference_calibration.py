"""Calibration of seed 000's inference and of the mechanistic controls on synthetic worlds where the truth is known:
the size and power of Table 2's test of the gap in rating points over events (`cell_gap.gap_t_test`, p_gap:
`rejects_over_events`) and of the randomisation test within these events printed beside it (`cell_gap.gap_test`,
p_gap_these_events and before issue 48 p_gap: `rejects_these_events`), the coverage of the 95% t-interval of that
gap over events (`cell_gap.gap_interval`) beside the event-bootstrap percentile interval it replaced, and what happens
to δ with few events (its mean, the coverage of a bootstrap interval of δ, the share of σ(M⁰)² that is event
noise), which is why Table 2 prints no interval of δ over events; then patching's "stops
mattering" and steering's two controls. Prints a table and writes a JSON file.

A synthetic run is I[p, x, e] for 5 identities (religion's one-to-one grid without "a person") and E events. Worlds
where H0 (no positive gap) holds:
- normal N(70, 10²), uniform integers 0..100, skewed 85 or, with probability 0.05, 50 (the development model answers
  80-85 and now and then far lower), each cell drawn independently;
- tied: greedy answers 80 or 85 (probabilities 0.6, 0.4), so matchings tie within events;
- off-diagonal: N(70, 1) with one perceiver rating one other identity 10 points higher and every in-group cell 0.4
  higher: the population gap is 0.4 - 10/20 = -0.1 points (the rank test the toolkit used before rejected here in
  0.30 of 200 runs at 12 events).
Worlds where per-event gaps vary around a population mean of 0 (H0 of the test over events holds, the randomisation
test's H0 does not: the matching changes the ratings within an event): N(70, 10²) answers (their own per-event gap has
sd 5 points) and each event's in-group cells raised by that event's gap, 3 t₃ ("t3 event gaps": sd 5.2, heavy tails)
or 5 (1 − Exp(1)) ("skewed event gaps": sd 5, most events a small positive gap and a few a large negative one, the
direction that makes a one-sided test of gap > 0 liberal).
Planted worlds add `gap` rating points to the in-group cells of N(70, 10²) answers: the true gap is `gap` and the
true δ (the z-scored gap of the infinite-event matrix) is gap / σ(gap · same) = 2.5 for any gap > 0. Per world the
t-interval's coverage of the true gap is measured over the same runs as the tests (`covers_gap`).

A steered pair is an unsteered and a steered rerun on the same events: they share a cell × event part (N(70, 10²)),
each adds N(0, 2²) noise of its own, and steering closes half of a 3-point in-group gap (true change -1.5 points);
per event count, the coverage of the steer study's paired t-interval of the change (`cell_gap.gap_change`) beside the
paired event-bootstrap percentile interval it replaced.

Patching worlds (`tests.synthetic_worlds`: event noise sd 2, patch noise sd 1 per prompt, a 1.5-point
gap) patch layers 0, 10 and 20: "half" closes 50% of the gap at every layer (nothing stops mattering), "stops at 10"
closes 100%, 0 and 0, "10% from 10" closes 100%, 10% and 10% (the equivalence margin: a test at 0.05 may declare
it in at most 0.05 of runs). Per world: the share of runs whose headline says patching stops mattering (Fieller's
interval of the share closed within ±10%, `interp.patching.claims.stops_mattering`) and the share the old rule (every
later interval includes 0) would have said it; where half the gap is closed at one layer, the coverage of the
patched gap's t-interval in points (`covers_gap`), of the share closed's Fieller interval (`covers_share`, with the
share of runs where it is unbounded) and of 1 − δ ratio's event-bootstrap interval it replaced (`covers_delta`).
The same three worlds at event noise sd 0.3 and patch noise sd 0.3 (`PRECISE`), where the equivalence test has power
with few events. Per world also: the share of runs whose layer 10 passes the equivalence test alone
(`equivalent_at_10`: at the margin, its size, at most 0.025), and the share whose headline claims something the
world contradicts (`false_claim`, `false_claims`): a layer named from which every layer is within ±10% while one
closes 10% or more, or the layer before it named as one where patching still matters while it closes 10% or less;
as printed now (only where its interval lies beyond ±10%) and before issue 48 (`false_claim_before`: "stops
mattering between layers X and L" named the layer before whatever its interval).

Held-out-identity worlds (`held_out_rows`: `synthetic.steering_states` with persona and experiencer vectors of sd 4,
main effects the rating 50 + 3 readout · h reads with sd 12 points, and prompt noise sd 0.5) fit the real direction
and each identity's without its cells on E events and project them out on E others (E: `--held-out-events`, 6, 12,
24): "shared feature" plants 3 u on every in-group cell, "per-identity features" 3 g_p on identity p's own in-group
cell (the rating reads the sum of the g_p), "no feature" nothing; and (issue 59) "length confound": no in-group
feature, every state moved along the readout v by `LENGTH_PLANT` × the perceiver's persona tokens × the
experiencer's experiencer tokens (`TOKENS`: Christian 2, Muslim 1, Jew 1, Buddhist 3, Hindu 4, "a person" 2), so the
in-group cells (p × p tokens) rate higher than the product's main effects predict; "shared + dominant own feature":
3 u on every in-group cell and `DOMINANT` g on Christian's alone, the rating reading (u + g) / ‖u + g‖. Per world:
the share of runs whose transfer is printed and > 0.5 as scored now (the in-group interaction net of the persona
tokens × experiencer tokens term, `steering.held_out_control` with `TOKENS`, every world), without that term
(`held_out_passes_no_lengths`: issue 48's scoring with issue 59's one-sided refusal, `held_out.TRANSFER_RAISED`) and
before issue 48 (`old_transfer`), the share refused now, and
the coverage of transfer's Fieller interval of the noise-free world's transfer (the same directions, no event noise;
undefined without a feature, where both closings are 0).

Worlds with event effects (issue 48, 4), at `--closing-events` (4, 6, 12) and `--atp-events` (10, 12, 20): each
event's effect is `spread` (1 or 3) times a draw of mean 0 and sd 1, normal, t₃ (heavy tails) or 1 − Exp(1) (skewed:
a long tail of low values). Patching (`closing_pair`): half of a gap that varies by event is closed, the patch's own
share of each event varying too: clean = base_matrix + (1.5 + u_e) on the in-group cells + N(0, 2²), patched = clean −
0.5 (1.5 + w_e) on them + N(0, 1²); also rounded, at half size, to the integers 0..5 (ties and a ceiling; the truth
is then the mean over 200,000 drawn events). Per world: the coverage of the points closed's t-interval
(`covers_closed_points`), of the share closed's Fieller interval where it is bounded (`covers_share`, `unbounded`)
and of Fieller's set bounded or not (`covers_share_set`: the paired t-test of closed − share × before). AtP
(`atp_coverage`): maps of 20 independent nodes, 5 pairs an event (the persona's 5 religions), AtP at a node 1 + u_e +
N(0, 1) per pair; the coverage of the interval the map prints (`atp.summarize`: `covers_atp`) beside the
event-bootstrap percentile interval it printed before issue 48 (`covers_atp_bootstrap`) and Student's t over the
per-event means it printed from issue 48 to 59 (`covers_atp_t`), with both mean widths (`width_atp`, `width_atp_t`).
The AtP worlds also draw u_e (issue 59, 5: `ATP_EFFECTS`) reflected, Exp(1) − 1 ("exponential": a long tail of high
values), and with stronger left skews: (1 − Γ(0.25, 4)) / 2 ("gamma", skew −4) and a negated log-normal
(e^½ − LN(0, 1)) / sd ("lognormal", skew −6.2).

Events the user could have drawn (issue 59, `calibration_59_rows`, a generator of its own: `--seed` and 59). Per
world, p_gap's size (Student's t, `cell_gap.gap_t_test`, `rejects_over_events`) and the coverage of the 95% t-interval
(`cell_gap.gap_interval`) of the population gap, 0 unless said:
- emotion world (`emotion_world`, at `--emotion-events`): N(70, 1²) answers (`--emotion-cell-sd`) on the events
  `corpus.sample_events` draws from the embedded corpus (144 events) or the real crowd-enVENT release (`--release`,
  6,050 events; skipped where absent), each event's gap +1.5 points on negative emotions (anger, disgust, fear,
  guilt, sadness, shame) and −1.5 on the others, less their mean over the corpus weighted by its emotion counts, so
  the corpus's (the population's) mean gap is 0;
- templated worlds (`templated`, at each of `--iccs`, 0.25 and 0.55): 12 or 24 events in 4-8 narrative templates
  (`TEMPLATED`; 12 in 12: one event per template), each event's gap its template's effect plus its own (sd 3),
  N(70, 10²) answers; the template sd sets the per-event gaps' intra-class correlation; before (clusters=None, over
  the events) and now (`clusters` = the templates: `rejects_over_clusters`, `covers_gap_clusters`, over C − 1 df);
- `SKEWED_NULLS`: N(70, 1²) answers with per-event gaps 5 (1 − Exp(1)) (skew −2) or 2.5 (1 − Γ(0.25, 4)) (skew −4),
  sd 5; and floored answers: N(70, 10²) clipped to 0..100, 5% of them (each cell independently) near 0 (uniform
  0..2), no gap.
Every independent-event null world (NULLS, EVENT_GAP_NULLS, SKEWED_NULLS) at `--size-events` (`over_events`:
`--size-runs` runs drawn as one long world split into runs, the first runs checked against `stats`), with at
`--alternative-events` the alternatives to Student's t (`ALTERNATIVES`: Johnson's and Hall's skewness-corrected t,
a studentized bootstrap over events, a sign-flip permutation test) and their power in a world planted with a
1.5-point gap, and at `--holm-events` Holm's family-wise error over 21 independent p_gap tests (`holm_fwe_*`, the
analytic tests). `p_gap_sizes` gives, by units (events, or clusters where a row tests over them), the largest size
over the null rows: `cell_gap.P_GAP_SIZE`, printed after the table and written as `p_gap_size`.

    python tests/benchmarks/inference_calibration.py --out calibration.json
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (python tests/benchmarks/NAME.py): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import platform
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats as _sps

from behavioral.analysis.bootstrap import percentile_interval, resamples
from behavioral.analysis.multiplicity import holm
from behavioral.analysis.paired import UNBOUNDED, t_interval
from behavioral.analysis import cell_gap
from behavioral.suites.intergroup import corpus
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.patching import SLOTS, gap_table
from interp.patching.gap_by_layer import event_tensor
from behavioral.suites.intergroup import steering
from tests.synthetic_worlds import GAP, base_matrix, patched_rows, projection_rows, steering_states
from interp import attribution as atp
from interp.matchings import involves, wrong_matchings
from interp.patching.claims import EQUIVALENCE_MARGIN, beyond, equivalent, stops_mattering, undetermined_from
from interp.steering import mean_difference, span_direction
from interp.matchings import matched_cells
from interp.steering.controls import matching_control, random_control, raw_gap
from interp.steering.held_out import held_out_control

SAME = np.eye(5, dtype=bool)
TRUE_DELTA = float(1 / SAME.std())  # δ of gap · SAME, z-scored, for any gap > 0
OFF_DIAGONAL = np.zeros((5, 5, 1))
OFF_DIAGONAL[0, 1], OFF_DIAGONAL[SAME] = 10.0, 0.4

World = Callable[[np.random.Generator, int], np.ndarray]


def planted(gap: float) -> World:
    """N(70, 10²) answers with `gap` points added to the in-group cells."""
    return lambda rng, e: rng.normal(70, 10, (5, 5, e)) + gap * SAME[:, :, None]


NULLS: dict[str, World] = {
    "normal": planted(0.0),
    "uniform": lambda rng, e: rng.integers(0, 101, (5, 5, e)).astype(float),
    "skewed": lambda rng, e: rng.choice([50.0, 85.0], p=[0.05, 0.95], size=(5, 5, e)),
    "tied": lambda rng, e: rng.choice([80.0, 85.0], p=[0.6, 0.4], size=(5, 5, e)),
    "off-diagonal": lambda rng, e: rng.normal(70, 1, (5, 5, e)) + OFF_DIAGONAL,
}
TRUE_GAP = {"off-diagonal": -0.1}  # every other null world's population gap is 0


def varying(gaps: Callable[[np.random.Generator, int], np.ndarray]) -> World:
    """N(70, 10²) answers with each event's in-group cells raised by that event's own gap, `gaps(rng, events)`."""
    return lambda rng, e: rng.normal(70, 10, (5, 5, e)) + gaps(rng, e) * SAME[:, :, None]


EVENT_GAP_NULLS: dict[str, World] = {
    "t3 event gaps": varying(lambda rng, e: 3 * rng.standard_t(3, e)),
    "skewed event gaps": varying(lambda rng, e: 5 * (1 - rng.exponential(1, e))),
}


def gap_tests(rng: np.random.Generator, world: World, true_gap: float, events: int, runs: int, draws: int) -> dict:
    """Over `runs` runs of `world`: the shares whose test of the gap over events (`cell_gap.gap_t_test`) and whose
    randomisation test within these events (`cell_gap.gap_test`) reject at 0.05, and whose 95% t-interval holds the true
    gap."""
    over, these, covers = [], [], []
    for k in range(runs):
        I = world(rng, events)
        over.append(cell_gap.gap_t_test(I, SAME) <= 0.05)
        these.append(cell_gap.gap_test(I, SAME, draws, seed=k).p_value <= 0.05)
        low, high = cell_gap.gap_interval(I, SAME)
        covers.append(low <= true_gap <= high)
    return {"rejects_over_events": float(np.mean(over)), "rejects_these_events": float(np.mean(these)),
            "covers_gap": float(np.mean(covers))}


def rejection(rng: np.random.Generator, world: World, events: int, runs: int, draws: int) -> float:
    """Share of `runs` runs of `world` whose randomisation test within these events rejects at 0.05."""
    return gap_tests(rng, world, 0.0, events, runs, draws)["rejects_these_events"]


def coverage(rng: np.random.Generator, world: World, true_gap: float, events: int, runs: int,
             resamples: int) -> dict:
    """Over `runs` runs of `world`: the share whose 95% t-interval of the gap (`cell_gap.gap_interval`, what Table 2
    prints) and whose 95% event-bootstrap percentile interval of the gap (what it printed before) hold the true gap,
    δ's mean, the share whose bootstrap interval of δ holds the infinite-event δ (planted worlds), the mean
    event-noise share."""
    gap_hits, boot_hits, delta_hits, deltas, noise = [], [], [], [], []
    for k in range(runs):
        I = world(rng, events)
        low, high = cell_gap.gap_interval(I, SAME)
        gap_hits.append(low <= true_gap <= high)
        boot = cell_gap.event_bootstrap(I, SAME, resamples, seed=k)
        low, high = boot.interval(boot.gap_points)
        boot_hits.append(low <= true_gap <= high)
        deltas.append(cell_gap.empathy_gap(cell_gap.zscore(I.mean(axis=2)), SAME))
        noise.append(cell_gap.event_noise_share(I))
        if true_gap > 0:
            low, high = boot.interval(boot.delta)
            delta_hits.append(low <= TRUE_DELTA <= high)
    return {"covers_gap": float(np.mean(gap_hits)), "covers_gap_bootstrap": float(np.mean(boot_hits)),
            "delta_mean": float(np.mean(deltas)),
            "covers_delta": float(np.mean(delta_hits)) if delta_hits else None,
            "noise_share": float(np.mean(noise))}


def steered_pair(rng: np.random.Generator, events: int, gap: float = 3.0,
                 closure: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """An unsteered and a steered rerun on the same events: a cell × event part both share (N(70, 10²)), a `gap`
    in the in-group cells that steering closes by `closure`, and N(0, 2²) noise of each rerun's own."""
    shared = rng.normal(70, 10, (5, 5, events))
    before = shared + gap * SAME[:, :, None] + rng.normal(0, 2, shared.shape)
    after = shared + (1 - closure) * gap * SAME[:, :, None] + rng.normal(0, 2, shared.shape)
    return before, after


def change_coverage(rng: np.random.Generator, events: int, runs: int, n_resamples: int,
                    gap: float = 3.0, closure: float = 0.5) -> dict:
    """Over `runs` steered pairs: the share whose 95% paired t-interval of the gap's change (`cell_gap.gap_change`, what
    the steer study prints) and whose paired event-bootstrap percentile interval (what it printed before) hold the
    true change, -closure x gap."""
    truth, hits, boot_hits = -closure * gap, [], []
    for k in range(runs):
        before, after = steered_pair(rng, events, gap, closure)
        _, low, high = cell_gap.gap_change(before, after, SAME)
        hits.append(low <= truth <= high)
        draws = resamples(events, n_resamples, k)
        changes = [raw_gap(after[:, :, d], SAME) - raw_gap(before[:, :, d], SAME) for d in draws]
        low, high = percentile_interval(np.array(changes))
        boot_hits.append(low <= truth <= high)
    return {"true_gap": truth, "covers_gap": float(np.mean(hits)), "covers_gap_bootstrap": float(np.mean(boot_hits))}


PATCH_WORLDS = {"half": {0: 0.5, 10: 0.5, 20: 0.5}, "stops at 10": {0: 1.0, 10: 0.0, 20: 0.0},
                "10% from 10 (the margin)": {0: 1.0, 10: 0.1, 20: 0.1}}


PRECISE = (0.3, 0.3)  # event and patch noise sd of the patching worlds where few events give equivalence power


def false_claims(world: dict[int, float], layers: list[int], low: list[float], high: list[float],
                 stop: int | None) -> tuple[bool, bool]:
    """Whether the headline naming `stop` contradicts the world's true shares closed, as printed now and before issue
    48: both say every layer from `stop` on is within ±10% (false where one closes 10% or more); the layer before it
    was said to matter before whatever its interval, and now only where its interval lies beyond ±10% (false where it
    closes 10% or less). `layers` in increasing order."""
    if stop is None:
        return False, False
    at = layers.index(stop)
    within = any(abs(world[layer]) >= EQUIVALENCE_MARGIN for layer in layers[at:])
    before = at > 0 and abs(world[layers[at - 1]]) <= EQUIVALENCE_MARGIN
    return within or (before and beyond(low[at - 1], high[at - 1])), within or before


def patch_claims(world: dict[int, float], events: int, runs: int, noise: float = 2.0,
                 patch_noise: float = 1.0) -> dict:
    """Over `runs` synthetic patching runs (event noise sd `noise`, patch noise sd `patch_noise`): the share whose
    profile is read as stopping to matter (equivalence of the share closed within ±10%), the share the old rule
    (every later interval includes 0) would have read so, the share whose layer 10 passes the equivalence test, and
    the shares whose headline contradicts the world now and before issue 48 (`false_claims`)."""
    new, old, at_10, wrong = [], [], [], []
    for seed in range(runs):
        table = gap_table(patched_rows(world, events, noise, seed, patch_noise=patch_noise), get_category("religion"))
        table = table.sort_values("layer")
        layers, low, high = table["layer"].tolist(), table["gap_closed_low"].tolist(), table["gap_closed_high"].tolist()
        stop = stops_mattering(layers, low, high)
        new.append(stop is not None)
        old.append(undetermined_from(layers, low, high) is not None)
        at_10.append(equivalent(low[layers.index(10)], high[layers.index(10)]))
        wrong.append(false_claims(world, layers, low, high, stop))
    now, before = np.mean(wrong, axis=0)
    return {"stops_mattering": float(np.mean(new)), "old_rule": float(np.mean(old)),
            "equivalent_at_10": float(np.mean(at_10)), "false_claim": float(now), "false_claim_before": float(before)}


def patch_intervals(events: int, runs: int, resamples: int) -> dict:
    """Over `runs` synthetic patching runs closing half the gap at one layer: the share whose 95% t-interval of the
    patched gap in points holds its noise-free value (`covers_gap`), whose Fieller interval of the share closed
    holds 0.5 where it is bounded (`covers_share`; `unbounded`: the share of runs where it is not), and whose
    percentile interval of 1 − δ ratio over event resamples (what the report printed before) holds its noise-free
    value (`covers_delta`)."""
    category = get_category("religion")
    same = category.in_group()
    base = base_matrix(len(category.identities))
    patched = base + 0.5 * GAP * same
    truth_gap = patched[same].mean() - patched[~same].mean()
    truth_delta = 1 - (cell_gap.empathy_gap(cell_gap.zscore(patched), same)
                       / cell_gap.empathy_gap(cell_gap.zscore(base + GAP * same), same))
    gap_hits, share_hits, unbounded, delta_hits = [], [], [], []
    for seed in range(runs):
        frame = patched_rows({10: 0.5}, events, 2.0, seed, patch_noise=1.0)
        row = gap_table(frame, category).iloc[0]
        gap_hits.append(row["gap_raw_patched_low"] <= truth_gap <= row["gap_raw_patched_high"])
        unbounded.append(row["interval_note"] == UNBOUNDED)
        if not unbounded[-1]:
            share_hits.append(row["gap_closed_low"] <= 0.5 <= row["gap_closed_high"])
        clean, after = (event_tensor(frame, category.identities, c, SLOTS) for c in ("expected_clean", "expected"))
        b0, b1 = (cell_gap.event_bootstrap(I, same, resamples, seed) for I in (clean, after))
        low, high = percentile_interval(1 - b1.delta / b0.delta)
        delta_hits.append(low <= truth_delta <= high)
    return {"true_gap": float(truth_gap), "covers_gap": float(np.mean(gap_hits)),
            "covers_share": float(np.mean(share_hits)) if share_hits else None,
            "unbounded": float(np.mean(unbounded)),
            "covers_delta": float(np.mean(delta_hits))}


# Event effects of mean 0 and sd 1 (issue 48, 4), scaled by a world's spread: normal, heavy-tailed (t₃), skewed (a
# long tail of low values).
EFFECTS: dict[str, Callable[[np.random.Generator, int | tuple], np.ndarray]] = {
    "normal": lambda rng, size: rng.normal(0, 1, size),
    "t3": lambda rng, size: rng.standard_t(3, size) / np.sqrt(3),
    "skewed": lambda rng, size: 1 - rng.exponential(1, size),
}
# The AtP worlds' event effects (issue 59, 5), mean 0 and sd 1: EFFECTS, the skewed one reflected (right-skewed) and
# two stronger left skews.
ATP_EFFECTS: dict[str, Callable[[np.random.Generator, int | tuple], np.ndarray]] = {
    **EFFECTS,
    "exponential": lambda rng, size: rng.exponential(1, size) - 1,
    "gamma": lambda rng, size: (1 - rng.gamma(0.25, 4, size)) / 2,
    "lognormal": lambda rng, size: (np.exp(0.5) - rng.lognormal(0, 1, size)) / np.sqrt((np.e - 1) * np.e),
}
SPREADS = (1.0, 3.0)  # sd of the event effects: the per-event gap's own noise (sd 1 in the patching worlds), 3 times it
SCALE = 5  # the integer answer scale of the tied patching worlds: 0..5


def closing_pair(rng: np.random.Generator, effect: str, events: int, spread: float = 1.0, scale: int | None = None,
                 share: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Clean and patched I [5, 5, E] of a patch that closes `share` of a gap varying by event: clean = base_matrix +
    (GAP + u_e) on the in-group cells + N(0, 2²), the patch removes share × (GAP + w_e) of event e's in-group cells
    and adds N(0, 1²), u and w independent draws of `spread` × EFFECTS[effect]; with `scale`, both at half size
    rounded to the integers 0..scale (ties, and a ceiling)."""
    draw, same = EFFECTS[effect], SAME[:, :, None]
    clean = base_matrix(5)[:, :, None] + (GAP + spread * draw(rng, events)) * same + rng.normal(0, 2, (5, 5, events))
    patched = clean - share * (GAP + spread * draw(rng, events)) * same + rng.normal(0, 1, clean.shape)
    if scale is None:
        return clean, patched
    return np.clip(np.round(clean / 2), 0, scale), np.clip(np.round(patched / 2), 0, scale)


def closing_truth(effect: str, spread: float, scale: int | None, share: float = 0.5,
                  events: int = 200_000) -> tuple[float, float]:
    """The population points closed and share closed of `closing_pair`'s world: exact on the continuous scale, else
    the means over `events` drawn events (standard error about 0.002 points)."""
    if scale is None:
        return share * GAP, share
    clean, patched = closing_pair(np.random.default_rng(1), effect, events, spread, scale, share)
    before, after = cell_gap.event_gaps(clean, SAME)[2], cell_gap.event_gaps(patched, SAME)[2]
    return float((before - after).mean()), float((before - after).mean() / before.mean())


def closing_coverage(rng: np.random.Generator, effect: str, events: int, runs: int, spread: float = 1.0,
                     scale: int | None = None) -> dict:
    """Over `runs` worlds of `closing_pair`: the share whose t-interval of the points closed (`cell_gap.gap_closed`,
    what the patch study prints) holds the population's, whose Fieller interval of the share closed does where it is
    bounded (`unbounded`: the share of runs where it is not, and no interval is printed), and whose Fieller set does,
    bounded or not (`covers_share_set`)."""
    points, share = closing_truth(effect, spread, scale)
    hits, share_hits, set_hits, unbounded = [], [], [], []
    for _ in range(runs):
        clean, patched = closing_pair(rng, effect, events, spread, scale)
        change = cell_gap.gap_closed(clean, patched, SAME)
        hits.append(change.points_low <= points <= change.points_high)
        unbounded.append(change.note == UNBOUNDED)
        if not unbounded[-1]:
            share_hits.append(change.share_low <= share <= change.share_high)
        before, after = cell_gap.event_gaps(clean, SAME)[2], cell_gap.event_gaps(patched, SAME)[2]
        low, high = t_interval(before - after - share * before, 0.95)  # Fieller's set: this test does not reject
        set_hits.append(low <= 0 <= high)
    return {"true_gap": points, "covers_closed_points": float(np.mean(hits)),
            "covers_share": float(np.mean(share_hits)) if share_hits else None, "unbounded": float(np.mean(unbounded)),
            "covers_share_set": float(np.mean(set_hits))}


def atp_coverage(rng: np.random.Generator, effect: str, events: int, runs: int, n_resamples: int,
                 spread: float = 1.0, pairs: int = 5, nodes: int = 20) -> dict:
    """Over `runs` synthetic AtP maps of `nodes` independent nodes, each of `pairs` pairs an event (intergroup's
    persona: 5 religions) with AtP 1 + u_e + N(0, 1) at a node (u_e: `spread` × ATP_EFFECTS[effect], shared by an
    event's pairs): the share of nodes whose printed interval (`atp.summarize`) holds the mean, 1, whose percentile
    interval over events resampled (what the map printed before issue 48) does and whose Student's t over the
    per-event means (what it printed from issue 48 to 59) does, and the mean widths of the printed one and of t.
    The maps are summarized as one (layer: the map, offset: the node), which is each map's summary: a node's
    interval reads its own rows, and the map's bootstrap draws the same resamples for every map."""
    maps, boot_hits = [], []
    for k in range(runs):
        values = (1 + spread * ATP_EFFECTS[effect](rng, (nodes, events))[:, :, None]
                  + rng.normal(0, 1, (nodes, events, pairs)))
        maps.append(values)
        means = values.mean(axis=2)[:, resamples(events, n_resamples, k)].mean(axis=2)  # [nodes, resamples]
        boot_hits.extend(low <= 1 <= high for low, high in map(percentile_interval, means))
    values = np.concatenate(maps)  # [runs × nodes, events, pairs]
    frame = pd.DataFrame({"layer": np.repeat(np.arange(runs), nodes * events * pairs),
                          "offset": np.tile(np.repeat(np.arange(nodes), events * pairs), runs),
                          "unit": np.tile(np.repeat(np.arange(events), pairs), runs * nodes), "atp": values.ravel()})
    out = atp.summarize(frame, "atp", "unit")
    t_ends = np.array([t_interval(m, 0.95) for m in values.mean(axis=2)])
    return {"true_gap": 1.0, "covers_atp": float(((out["ci_low"] <= 1) & (1 <= out["ci_high"])).mean()),
            "covers_atp_bootstrap": float(np.mean(boot_hits)),
            "covers_atp_t": float(((t_ends[:, 0] <= 1) & (1 <= t_ends[:, 1])).mean()),
            "width_atp": float((out["ci_high"] - out["ci_low"]).mean()),
            "width_atp_t": float((t_ends[:, 1] - t_ends[:, 0]).mean())}


def steering_controls(shared: bool, runs: int) -> dict:
    """Over `runs` synthetic steering worlds: how often each control says the direction carries a shared in-group
    feature (wrong matchings: p_real <= 0.05; held out: transfer > 0.5), and the mean transfer."""
    selection = {"category": "religion", "setting": "P0S0T0"}
    matchings = wrong_matchings(5, 1000)
    events = [f"e{i:02d}" for i in range(30)]
    passed, transfers = [], []
    for seed in range(runs):
        states, readout, cells = steering_states(3.0, seed=seed, shared=shared)
        means = states[:, :15].mean(axis=1)[None]
        counts = np.full(len(cells), 15)

        def fit(matching=None, without=None) -> np.ndarray:
            label = matched_cells(cells, steering.SLOTS, steering.identities(selection), matching, without)
            return mean_difference(means, counts, label.eq(True).fillna(False), label.eq(False).fillna(False))[0]

        directions = {"L1 project": fit(), **{f"L1 project matching {m}": fit(matching) for m, matching
                                              in enumerate(matchings)},
                      **{f"L1 project held out {j}": fit(without=j) for j in range(5)}}
        rows = projection_rows(states[:, 15:], cells, 3 * readout, directions, events[15:])
        control = matching_control(steering.measured(rows), matchings)
        held = held_out_control(steering.measured(rows), TOKENS)
        control = control[control["measure"] == "intensity"]
        real, wrong = control[control["matching"] == "real"].iloc[0], control[control["matching"] != "real"]
        by_points = (1 + (wrong["closed_points"] >= real["closed_points"]).sum()) / (len(wrong) + 1)
        transfer = held.loc[(held["identity"] == "pooled") & (held["measure"] == "intensity"), "transfer"].iloc[0]
        passed.append((by_points <= 0.05, real["p_real"] <= 0.05, transfer > 0.5))
        transfers.append(transfer)
    shares = np.mean(passed, axis=0)
    return {"matching_by_points_passes": float(shares[0]), "matching_control_passes": float(shares[1]),
            "held_out_passes": float(shares[2]), "transfer_mean": float(np.mean(transfers))}


HELD_OUT_WORLDS = ("shared feature", "per-identity features", "no feature", "length confound",
                   "shared + dominant own feature")
SPREAD = 4.0  # sd of the persona and experiencer vectors' coordinates: main effects the rating reads, 12 points
TOKENS = dict(zip(get_category("religion").with_unspecified, ((2, 2), (2, 2), (1, 1), (1, 1), (3, 3), (4, 4))))
LENGTH_PLANT = 1.0  # the length world's state component along its readout per persona token × experiencer token
DOMINANT = 12.0  # the own in-group feature of Christian beside the shared 3 u, in the last world


def old_transfer(rows: pd.DataFrame) -> float:
    """The held-out control's transfer as scored before issue 48: identity j's gap is its in-group cell against its
    row and column (j's perceiver and experiencer main effects in it), pooled shares of |gap| removed, their ratio."""
    block = next(b for b in steering.measured(rows) if b.labels["measure"] == "intensity")
    same, tensors = block.same, block.tensors
    before, held, real = [], [], []
    for j in range(len(same)):
        cells = involves(*np.indices(same.shape), j)
        before.append(abs(raw_gap(tensors["unsteered"], same, cells)))
        held.append(abs(raw_gap(tensors[f"L1 project held out {j}"], same, cells)))
        real.append(abs(raw_gap(tensors["L1 project"], same, cells)))
    return (1 - sum(held) / sum(before)) / (1 - sum(real) / sum(before))


def held_out_states(world: str, events: int, seed: int, spread: float = SPREAD,
                    noise: float = 0.5) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """The states [cells, events, d], readout and cells of one world of `HELD_OUT_WORLDS` (`steering_states`, the
    module docstring says what each plants); the same seed draws the same vectors at any `noise`."""
    plant = 0.0 if world in ("no feature", "length confound") else 3.0
    states, readout, cells = steering_states(plant, events, seed=seed, shared=world != "per-identity features",
                                             spread=spread, noise=noise)
    if world in HELD_OUT_WORLDS[:3]:
        return states, readout, cells
    extra = np.random.default_rng([seed, 2]).standard_normal(states.shape[-1])
    extra /= np.linalg.norm(extra)
    if world == "length confound":
        persona, experiencer = (cells[side].map(lambda name: TOKENS[name][k]).to_numpy(dtype=float)
                                for k, side in enumerate(("perceiver", "experiencer")))
        return states + LENGTH_PLANT * (persona * experiencer)[:, None, None] * extra, extra, cells
    christian = ((cells["perceiver"] == "a Christian") & (cells["experiencer"] == "a Christian")).to_numpy()
    both = readout + extra
    return states + DOMINANT * christian[:, None, None] * extra, both / np.linalg.norm(both), cells


def held_out_rows(world: str, events: int, seed: int,
                  spread: float = SPREAD) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One synthetic steering world of `HELD_OUT_WORLDS` (`held_out_states`, persona and experiencer vectors of sd
    `spread`): the real direction fit on `events` events and each identity's fit without its cells, projected out on
    `events` other events, and the same projections of the world without event noise (two identical events), as
    rows of one measure (intensity; expected_intensity NaN)."""
    selection = {"category": "religion", "setting": "P0S0T0"}
    states, readout, cells = held_out_states(world, 2 * events, seed, spread)
    clean = held_out_states(world, 2, seed, spread, noise=0.0)[0]
    means = states[:, :events].mean(axis=1)[None]

    def fit(without: int | None = None) -> np.ndarray:
        label = matched_cells(cells, steering.SLOTS, steering.identities(selection), None, without)
        return mean_difference(means, np.full(len(cells), events), label.eq(True).fillna(False),
                               label.eq(False).fillna(False))[0]

    directions = {"L1 project": fit(), **{f"L1 project held out {j}": fit(j) for j in range(5)}}
    names = [f"e{i:02d}" for i in range(events)]
    return tuple(projection_rows(h, cells, 3 * readout, directions, chosen).assign(expected_intensity=np.nan)
                 for h, chosen in ((states[:, events:], names), (clean, names[:2])))  # one measure: intensity


def pooled_transfer(rows: pd.DataFrame, tokens: dict[str, tuple[int, int]] | None = TOKENS) -> pd.Series:
    """The held-out-identity control's pooled row (intensity) of a world's rows, with the identities' `tokens` as
    the study passes them (None: without the length term)."""
    table = held_out_control(steering.measured(rows), tokens)
    return table.query("identity == 'pooled' and measure == 'intensity'").iloc[0]


def held_out_world(world: str, events: int, runs: int, spread: float = SPREAD) -> dict:
    """Over `runs` worlds of `held_out_rows`: how often the held-out-identity control passes (transfer printed and
    > 0.5) as scored now (`steering.held_out_control` with `TOKENS`), without the length term and as scored before
    issue 48 (`old_transfer`), how often transfer is refused now, and how often its interval
    holds the noise-free world's transfer where both are printed."""
    new, unmatched, old, refused, hits = [], [], [], [], []
    for seed in range(runs):
        rows, clean = held_out_rows(world, events, seed, spread)
        pooled, truth = pooled_transfer(rows), pooled_transfer(clean)
        new.append(pooled["transfer"] > 0.5)
        unmatched.append(pooled_transfer(rows, None)["transfer"] > 0.5)
        old.append(old_transfer(rows) > 0.5)
        refused.append(np.isnan(pooled["transfer"]))
        if not refused[-1] and not np.isclose(truth["closed_real"], 0, atol=1e-9):  # no feature: truth 0 / 0
            hits.append(pooled["transfer_low"] <= truth["transfer"] <= pooled["transfer_high"])
    return {"held_out_passes_before": float(np.mean(old)), "held_out_passes_no_lengths": float(np.mean(unmatched)),
            "held_out_passes": float(np.mean(new)), "transfer_refused": float(np.mean(refused)),
            "covers_transfer": float(np.mean(hits)) if hits else None}


RANDOM_WORLDS = ("shared feature", "no feature, gap in the ratings", "gap shrinks with disturbance")


def random_control_world(world: str, runs: int, n_random: int = 39) -> dict:
    """Over `runs` synthetic steering worlds: how often the random-direction control (`steering.random_control`)
    says the real projection closes the real gap more than random directions that disturb the ratings as much
    (p_matched <= 0.05), how often it cannot speak (no random direction disturbed them as much), and the mean number
    matched. The rating reads the states along u (the in-group direction) and another unit direction r: 50 +
    (3u + 3r) · h. Worlds: a shared in-group feature (3 u on every in-group cell); no feature in the states and a
    3-point gap added to the in-group ratings (no direction can close it); and a gap that shrinks with any
    disturbance, the world the control exists to catch: every prompt's state varies widely along u (sd 3) with a
    small in-group offset (0.5 u), so the fit direction is about u and projecting it removes most of the states'
    energy, and the 3-point gap is scaled by each prompt's energy relative to the unsteered mean (‖h‖² / E‖h₀‖²)."""
    selection = {"category": "religion", "setting": "P0S0T0"}
    events = [f"e{i:02d}" for i in range(30)]
    passed, silent, matched = [], [], []
    for seed in range(runs):
        plant = {RANDOM_WORLDS[0]: 3.0, RANDOM_WORLDS[1]: 0.0, RANDOM_WORLDS[2]: 0.5}[world]
        states, u, cells = steering_states(plant, seed=seed)
        rng = np.random.default_rng([seed, 1])
        other = rng.standard_normal(len(u))
        other -= (other @ u) * u
        readout = 3 * u + 3 * other / np.linalg.norm(other)
        if world == RANDOM_WORLDS[2]:
            states = states + rng.normal(0, 3, states.shape[:2] + (1,)) * u
        label = matched_cells(cells, steering.SLOTS, steering.identities(selection), None)
        ingroup = label.eq(True).fillna(False).to_numpy()[:, None]
        energy = float((states[:, 15:] ** 2).sum(axis=2).mean())

        def rating(h: np.ndarray) -> np.ndarray:
            if world == RANDOM_WORLDS[0]:
                return 50 + h @ readout
            scale = (h ** 2).sum(axis=2) / energy if world == RANDOM_WORLDS[2] else 1.0
            return 50 + h @ readout + 3.0 * ingroup * scale

        means = states[:, :15].mean(axis=1)[None]
        real = mean_difference(means, np.full(len(cells), 15), label.eq(True).fillna(False),
                               label.eq(False).fillna(False))[0]
        directions = {"L1 project": real, **{f"L1 project random {k}": span_direction(
            means[0], float(np.linalg.norm(real)), 1000 * seed + k) for k in range(1, n_random + 1)}}
        rows = projection_rows(states[:, 15:], cells, readout, directions, events[15:], rating=rating)
        first = random_control(steering.measured(rows)).query("measure == 'intensity'").iloc[0]
        passed.append(bool(first["p_matched"] <= 0.05))
        silent.append(first["n_matched"] == 0)
        matched.append(first["n_matched"])
    return {"random_control_passes": float(np.mean(passed)), "random_control_silent": float(np.mean(silent)),
            "random_matched_mean": float(np.mean(matched))}


# --- Issue 59: intervals and p_gap over events the user could have drawn -----------------------------------------

REAL_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "crowd-envent"
NEGATIVE = ("anger", "disgust", "fear", "guilt", "sadness", "shame")
EMOTION_GAP = 1.5  # points: + on the NEGATIVE emotions' events, − on the others', less the corpus's mean
ALPHA = 0.05
HOLM_FAMILY = 21  # the p_gap tests Table 2 prints (categories × settings)


def emotion_gaps(events: list[corpus.Event]) -> dict[str, float]:
    """Each emotion's gap in the emotion world of the corpus `events`: +EMOTION_GAP on NEGATIVE emotions, −EMOTION_GAP
    on the others, less their mean over the corpus's events (weighted by its emotion counts), so that the corpus's
    mean gap, the population's, is 0."""
    counts = corpus.emotions_drawn(event.emotion for event in events)
    signed = {emotion: EMOTION_GAP if emotion in NEGATIVE else -EMOTION_GAP for emotion in counts}
    mean = sum(signed[emotion] * n for emotion, n in counts.items()) / len(events)
    return {emotion: gap - mean for emotion, gap in signed.items()}


def emotion_world(events: list[corpus.Event], cell_sd: float = 1.0) -> World:
    """N(70, cell_sd²) answers on the events `corpus.sample_events` draws from the corpus `events` (its seed drawn
    from the world's generator), each event's in-group cells raised by its emotion's gap (`emotion_gaps`)."""
    gaps = emotion_gaps(events)

    def world(rng: np.random.Generator, e: int) -> np.ndarray:
        drawn = corpus.sample_events(events, e, int(rng.integers(2**31)))
        gap = np.array([gaps[event.emotion] for event in drawn])
        return rng.normal(70, cell_sd, (5, 5, len(drawn))) + gap * SAME[:, :, None]

    return world


ClusteredWorld = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]
EVENT_SD = 3.0  # sd of an event's own effect on its gap in the templated worlds, beside its template's
TEMPLATED = ((12, 4), (12, 6), (24, 4), (24, 8), (12, 12))  # (events, templates); the last: one event per template
ICCS = (0.25, 0.55)


def templated(icc: float, templates: int, event_sd: float = EVENT_SD) -> ClusteredWorld:
    """N(70, 10²) answers on events in `templates` narrative templates (event k in template k mod templates), each
    event's in-group cells raised by its template's effect plus its own (N(0, event_sd²)), the template effects
    N(0, τ²) with τ² set so that the per-event gaps' intra-class correlation is `icc` (their within-template variance
    is event_sd² + 25, the cells' noise adding 10² (1/5 + 1/20)); the population mean gap is 0. Returns I and the
    events' template labels."""
    within = event_sd ** 2 + 10.0 ** 2 * (1 / 5 + 1 / 20)
    template_sd = float(np.sqrt(icc / (1 - icc) * within))

    def world(rng: np.random.Generator, e: int) -> tuple[np.ndarray, np.ndarray]:
        clusters = np.arange(e) % templates
        gap = template_sd * rng.standard_normal(templates)[clusters] + event_sd * rng.standard_normal(e)
        return rng.normal(70, 10, (5, 5, e)) + gap * SAME[:, :, None], clusters

    return world


def floored(rng: np.random.Generator, e: int, share: float = 0.05) -> np.ndarray:
    """Answers N(70, 10²) clipped to 0..100, a `share` of them (each cell and event independently) near 0 instead
    (uniform on 0..2): a floor, no gap."""
    answers = np.clip(rng.normal(70, 10, (5, 5, e)), 0, 100)
    return np.where(rng.random(answers.shape) < share, rng.uniform(0, 2, answers.shape), answers)


SKEWED_NULLS: dict[str, World] = {
    "left-skewed event gaps (skew -2), cells sd 1": lambda rng, e: (
        rng.normal(70, 1, (5, 5, e)) + 5 * (1 - rng.exponential(1, e)) * SAME[:, :, None]),
    "left-skewed event gaps (skew -4), cells sd 1": lambda rng, e: (
        rng.normal(70, 1, (5, 5, e)) + 2.5 * (1 - rng.gamma(0.25, 4, e)) * SAME[:, :, None]),
    "floored (5% of answers near 0)": floored,
}
POWER_GAP = 1.5  # the planted gap of the alternatives' power row (N(70, 10²) answers)


def interval_tests(rng: np.random.Generator, world: World | ClusteredWorld, true_gap: float, events: int, runs: int,
                   clustered: bool = False) -> dict:
    """Over `runs` runs of `world`: the shares whose p_gap (`cell_gap.gap_t_test`) rejects at 0.05 and whose 95%
    t-interval (`cell_gap.gap_interval`) holds `true_gap`, over the events (clusters=None); for a `clustered` world (one
    that returns I and its events' clusters) also over its clusters (`rejects_over_clusters`,
    `covers_gap_clusters`)."""
    hits: dict[str, list[bool]] = {}
    for _ in range(runs):
        I, clusters = world(rng, events) if clustered else (world(rng, events), None)
        for suffix, labels in (("events", None), ("clusters", clusters))[:1 + clustered]:
            hits.setdefault(f"rejects_over_{suffix}", []).append(cell_gap.gap_t_test(I, SAME, labels) <= ALPHA)
            low, high = cell_gap.gap_interval(I, SAME, clusters=labels)
            hits.setdefault(f"covers_gap{'_clusters' if labels is not None else ''}", []).append(low <= true_gap <= high)
    return {name: float(np.mean(values)) for name, values in hits.items()}


# Alternatives to Student's t for p_gap, each over rows of per-event gaps g [runs, n]: one-sided p for a mean > 0.

def _student_t(g: np.ndarray) -> np.ndarray:
    """Each row's t statistic, x̄ / (s / √n) (±inf or NaN where its values are equal)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return g.mean(axis=1) / (g.std(axis=1, ddof=1) / np.sqrt(g.shape[1]))


def student_p(g: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """Student's t (what `cell_gap.gap_t_test` computes), n − 1 degrees of freedom."""
    return _sps.t.sf(_student_t(g), g.shape[1] - 1)


def skewness_corrected_p(g: np.ndarray, rng: np.random.Generator | None = None, hall: bool = False) -> np.ndarray:
    """Johnson's (1978) t corrected for skewness, √n (T + γ̂/(6n) + γ̂ T²/3) with T = x̄ / s and γ̂ = m₃ / s³ (m₃ the
    third central moment, divisor n), against t with n − 1 degrees of freedom; `hall`: Hall's (1992) monotone form,
    which adds γ̂² T³/27."""
    n = g.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        s = g.std(axis=1, ddof=1)
        T = g.mean(axis=1) / s
        skew = ((g - g.mean(axis=1, keepdims=True)) ** 3).mean(axis=1) / s ** 3
        statistic = np.sqrt(n) * (T + skew / (6 * n) + skew * T ** 2 / 3 + (hall * skew ** 2 * T ** 3 / 27))
    statistic = np.where(np.isnan(statistic) & np.isinf(T), T, statistic)  # equal values: Student's ±inf
    return _sps.t.sf(statistic, n - 1)


def bootstrap_t_p(g: np.ndarray, rng: np.random.Generator, resamples: int = 999, chunk: int = 200) -> np.ndarray:
    """The studentized bootstrap over events: (1 + #{t* ≥ t}) / (B + 1), t* = (x̄* − x̄) / (s* / √n) of `resamples`
    resamples of a row's n values with replacement (a resample of equal values: t* = ±inf by the sign of
    x̄* − x̄)."""
    n, observed, out = g.shape[1], _student_t(g), []
    for start in range(0, len(g), chunk):
        rows = g[start:start + chunk]
        draws = np.take_along_axis(rows[:, None, :], rng.integers(0, n, (len(rows), resamples, n)), axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (draws.mean(axis=2) - rows.mean(axis=1, keepdims=True)) / (draws.std(axis=2, ddof=1) / np.sqrt(n))
        out.append((1 + np.count_nonzero(t >= observed[start:start + chunk, None] - 1e-12, axis=1)) / (resamples + 1))
    return np.concatenate(out)


def sign_flip_p(g: np.ndarray, rng: np.random.Generator, draws: int = 4000, exact: int = 12,
                chunk: int = 200) -> np.ndarray:
    """The sign-flip permutation test of the per-event gaps (H0: symmetric about 0), its statistic studentized
    (Student's t, which for sign flips orders as the mean does: Σ g² is fixed): exact over the 2^n patterns where
    n <= `exact` (p = #{patterns whose mean ≥ the observed} / 2^n; none below 0.05 at n = 4), else the identity and
    `draws` random patterns."""
    n = g.shape[1]
    if n <= exact:
        signs, plus = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1), 0
    else:
        signs, plus = rng.choice([-1.0, 1.0], (draws, n)), 1
    out = []
    for start in range(0, len(g), chunk):
        rows = g[start:start + chunk]
        flipped = rows @ signs.T  # [rows, patterns]: n × the flipped mean
        hits = np.count_nonzero(flipped >= rows.sum(axis=1, keepdims=True) - 1e-9, axis=1)
        out.append((plus + hits) / (len(signs) + plus))
    return np.concatenate(out)


ALTERNATIVES: dict[str, Callable[..., np.ndarray]] = {
    "student": student_p, "johnson": skewness_corrected_p,
    "hall": lambda g, rng=None: skewness_corrected_p(g, rng, hall=True),
    "bootstrap_t": bootstrap_t_p, "sign_flip": sign_flip_p,
}
ANALYTIC = ("student", "johnson", "hall")  # the tests whose family-wise error under Holm is measured (cheap, and
# fine enough in p: the smallest Holm p_(1) that rejects is 0.05 / 21 = 0.0024)


def event_gap_rows(rng: np.random.Generator, world: World, events: int, runs: int, chunk: int = 500) -> np.ndarray:
    """[runs, events]: the per-event gaps (`cell_gap.event_gaps`) of `runs` runs of a world whose events are independent
    (NULLS, EVENT_GAP_NULLS, SKEWED_NULLS, planted), drawn as worlds of chunk × events events split into runs; the
    first two runs' Student p and t-interval are checked against `cell_gap.gap_t_test` and `cell_gap.gap_interval`."""
    rows = []
    for start in range(0, runs, chunk):
        size = min(chunk, runs - start)
        I = world(rng, size * events)
        gaps = cell_gap.event_gaps(I, SAME)[2]
        assert len(gaps) == size * events, "a world with refused events: draw its runs one by one"
        rows.append(gaps.reshape(size, events))
        if not start:
            for k in range(min(2, size)):
                one = I[:, :, k * events:(k + 1) * events]
                assert np.isclose(cell_gap.gap_t_test(one, SAME), student_p(rows[0][k:k + 1])[0], equal_nan=True)
                assert np.allclose(cell_gap.gap_interval(one, SAME), t_interval(rows[0][k], 0.95), equal_nan=True)
    return np.concatenate(rows)


def over_events(rng: np.random.Generator, world: World, true_gap: float, events: int, runs: int,
                alternatives: bool = False, families: int = 0) -> dict:
    """Over `runs` runs of an independent-event world (`event_gap_rows`): p_gap's size (Student's t,
    `rejects_over_events`) and the t-interval's coverage of `true_gap`; with `alternatives`, each of ALTERNATIVES'
    rejection at 0.05 (`rejects_johnson`, ...); with `families`, Holm's family-wise error over that many families of
    HOLM_FAMILY independent runs (`behavioral.analysis.multiplicity.holm`) for the ANALYTIC tests (`holm_fwe_...`)."""
    g = event_gap_rows(rng, world, events, runs)
    half = _sps.t.ppf(0.975, events - 1) * g.std(axis=1, ddof=1) / np.sqrt(events)
    out = {"rejects_over_events": float(np.mean(student_p(g) <= ALPHA)),
           "covers_gap": float(np.mean(np.abs(g.mean(axis=1) - true_gap) <= half))}
    for name, test in ALTERNATIVES.items() if alternatives else ():
        if name != "student":
            out[f"rejects_{name}"] = float(np.mean(test(g, rng) <= ALPHA))
    if families:
        family = event_gap_rows(rng, world, events, families * HOLM_FAMILY)
        for name in ANALYTIC:
            p = ALTERNATIVES[name](family).reshape(families, HOLM_FAMILY)
            out[f"holm_fwe_{name}"] = float(np.mean([(holm(row) <= ALPHA).any() for row in p]))
    return out


def calibration_59_rows(args: argparse.Namespace) -> list[dict]:
    """Issue 59's rows (their own generator, `args.seed` and 59): the emotion world on the embedded corpus and, where
    it is on this machine, the real release, at `--emotion-events`; the templated worlds at each ICC (before: p_gap
    and the interval over events; now: over the templates); every independent-event null world (NULLS,
    EVENT_GAP_NULLS, SKEWED_NULLS) at `--size-events` with Student's t, the alternatives at `--alternative-events`
    (with power in a planted world of POWER_GAP points) and Holm's family-wise error at `--holm-events`."""
    rng = np.random.default_rng([args.seed, 59])
    out = []
    corpora = {"embedded": corpus.embedded_events()}
    if args.emotion_runs and args.release.exists():
        corpora["crowd-enVENT"] = corpus.load_release(args.release)
    for name, events in corpora.items() if args.emotion_runs else ():
        world = emotion_world(events, args.emotion_cell_sd)
        for count in (int(e) for e in args.emotion_events.split(",") if e):
            out.append({"events": count, "units": count, "null": True, "true_gap": 0.0,
                        "world": f"emotion gaps ±{EMOTION_GAP:g} ({name} corpus), cells sd {args.emotion_cell_sd:g}",
                        **interval_tests(rng, world, 0.0, count, args.emotion_runs)})
    for icc in (float(x) for x in args.iccs.split(",") if x):
        for events, templates in TEMPLATED if args.templated_runs else ():
            out.append({"events": events, "units": templates, "null": True, "true_gap": 0.0,
                        "world": f"templated, ICC {icc:g}, {events} events in {templates} templates",
                        **interval_tests(rng, templated(icc, templates), 0.0, events, args.templated_runs, True)})
    holm_events = {int(e) for e in args.holm_events.split(",") if e}
    alternative_events = {int(e) for e in args.alternative_events.split(",") if e}
    for count in (int(e) for e in args.size_events.split(",") if e) if args.size_runs else ():
        for name, world in {**NULLS, **EVENT_GAP_NULLS, **SKEWED_NULLS}.items():
            truth = TRUE_GAP.get(name, 0.0)
            holm_families = args.holm_families if count in holm_events and (
                name in SKEWED_NULLS or name == "normal") else 0
            out.append({"events": count, "units": count, "null": True, "true_gap": truth,
                        "world": name if name in SKEWED_NULLS else f"{name} null",
                        **over_events(rng, world, truth, count, args.size_runs, count in alternative_events,
                                      holm_families)})
        if count in alternative_events:
            out.append({"events": count, "units": count, "null": False, "true_gap": POWER_GAP,
                        "world": f"planted {POWER_GAP:g} points (power)",
                        **over_events(rng, planted(POWER_GAP), POWER_GAP, count, args.size_runs, True)})
        print(f"events the user could have drawn: {count} events done", flush=True)
    return out


def p_gap_sizes(result_rows: list[dict]) -> dict[int, tuple[float, str]]:
    """By number of units (events, or clusters where the row tests over them): the largest size of p_gap (Student's
    t) over the null rows, and the world that gave it (cell_gap.P_GAP_SIZE)."""
    worst: dict[int, tuple[float, str]] = {}
    for row in result_rows:
        if not row.get("null"):
            continue
        size = row.get("rejects_over_clusters", row.get("rejects_over_events"))
        if size is not None and size >= worst.get(row["units"], (-1.0, ""))[0]:
            worst[row["units"]] = (size, row["world"])
    return dict(sorted(worst.items()))


def rows(args: argparse.Namespace) -> list[dict]:
    """Every row of the table."""
    rng = np.random.default_rng(args.seed)
    out = []
    for events in (int(e) for e in args.events.split(",") if e):
        for name, world in {**NULLS, **EVENT_GAP_NULLS}.items():
            truth = TRUE_GAP.get(name, 0.0)
            out.append({"events": events, "world": f"{name} null", "true_gap": truth,
                        **gap_tests(rng, world, truth, events, args.runs, args.draws)})
        for gap in (3.0, 5.0):
            out.append({"events": events, "world": f"planted {gap:g} points", "true_gap": gap,
                        **gap_tests(rng, planted(gap), gap, events, args.runs // 2, args.draws)})
        for name, world, gap in (("normal null", planted(0.0), 0.0), ("tied null", NULLS["tied"], 0.0),
                                 ("planted 5 points", planted(5.0), 5.0)):
            out.append({"events": events, "world": f"{name}, intervals", "true_gap": gap,
                        **coverage(rng, world, gap, events, args.coverage_runs, args.resamples)})
        out.append({"events": events, "world": "steering, gap change (3 points, half closed), intervals",
                    **change_coverage(rng, events, args.coverage_runs, args.resamples)})
        for name, world in PATCH_WORLDS.items():
            out.append({"events": events, "world": f"patching, {name}",
                        **patch_claims(world, events, args.coverage_runs)})
        for name, world in PATCH_WORLDS.items():
            out.append({"events": events, "world": f"patching, {name}, event sd {PRECISE[0]:g} patch sd {PRECISE[1]:g}",
                        **patch_claims(world, events, args.coverage_runs, *PRECISE)})
        out.append({"events": events, "world": "patching, half at one layer, intervals",
                    **patch_intervals(events, args.coverage_runs, args.resamples // 5)})
        print(f"{events} events done", flush=True)
    for events in (int(e) for e in args.closing_events.split(",") if e):
        for effect, spread, scale in ((e, s, k) for e in EFFECTS for s in SPREADS for k in (None, SCALE)):
            integers = f", integers 0-{scale}" if scale else ""
            out.append({"events": events, "world": f"patching closes half, {effect} event effects sd {spread:g}"
                                                   f"{integers}, intervals",
                        **closing_coverage(rng, effect, events, args.closing_runs, spread, scale)})
    for events in (int(e) for e in args.atp_events.split(",") if e):
        for effect, spread in ((e, s) for e in ATP_EFFECTS for s in SPREADS):
            out.append({"events": events, "world": f"AtP map, {effect} event effects sd {spread:g}, intervals",
                        **atp_coverage(rng, effect, events, args.atp_runs, args.resamples, spread)})
    out.extend(calibration_59_rows(args))
    for events in (int(e) for e in args.held_out_events.split(",") if e and args.held_out_runs):
        for name in HELD_OUT_WORLDS:
            out.append({"events": events, "world": f"steering held-out identities, {name}",
                        **held_out_world(name, events, args.held_out_runs)})
    if not args.steering_runs:
        return out
    for name, shared in (("steering, shared feature", True), ("steering, per-identity features", False)):
        out.append({"events": 15, "world": name, **steering_controls(shared, args.steering_runs)})
    for n_random in (39, 199):
        for name in RANDOM_WORLDS:
            out.append({"events": 15, "world": f"steering random control ({n_random} directions), {name}",
                        **random_control_world(name, args.steering_runs, n_random)})
    return out


COLUMNS = ("events", "units", "world", "true_gap", "rejects_over_events", "rejects_these_events", "covers_gap",
           "rejects_over_clusters", "covers_gap_clusters", "rejects_johnson", "rejects_hall", "rejects_bootstrap_t",
           "rejects_sign_flip", "holm_fwe_student", "holm_fwe_johnson", "holm_fwe_hall",
           "covers_gap_bootstrap", "covers_closed_points", "covers_share", "unbounded", "covers_share_set",
           "delta_mean", "covers_delta", "noise_share", "covers_atp", "covers_atp_bootstrap", "covers_atp_t",
           "width_atp", "width_atp_t", "stops_mattering", "old_rule", "equivalent_at_10", "false_claim",
           "false_claim_before", "matching_by_points_passes",
           "matching_control_passes", "held_out_passes_before", "held_out_passes_no_lengths", "held_out_passes",
           "transfer_mean", "transfer_refused", "covers_transfer", "random_control_passes",
           "random_control_silent", "random_matched_mean")


def table(result_rows: list[dict]) -> str:
    """The rows as a Markdown table (blank where a row does not measure a column)."""
    def cell(value) -> str:
        return "" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(cell(r.get(c)) for c in COLUMNS) + " |" for r in result_rows])


def main() -> None:
    """Measure, print the table and write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000, help="synthetic runs per size cell (half per power cell)")
    parser.add_argument("--draws", type=int, default=2000, help="null draws per gap test")
    parser.add_argument("--coverage-runs", type=int, default=200, help="synthetic runs per interval cell")
    parser.add_argument("--resamples", type=int, default=1000, help="event resamples per bootstrap")
    parser.add_argument("--events", default="4,12,24,100", help="events per run, comma separated (empty: none)")
    parser.add_argument("--closing-events", default="4,6,12",
                        help="events per run of the patching worlds with event effects, comma separated (empty: none)")
    parser.add_argument("--closing-runs", type=int, default=4000, help="synthetic runs per patching-effects cell")
    parser.add_argument("--atp-events", default="10,12,20",
                        help="events per synthetic AtP map, comma separated (empty: none)")
    parser.add_argument("--atp-runs", type=int, default=200, help="synthetic AtP maps of 20 nodes per cell")
    parser.add_argument("--steering-runs", type=int, default=20, help="synthetic worlds per steering row (0: none)")
    parser.add_argument("--held-out-runs", type=int, default=200,
                        help="synthetic worlds per held-out-identity row (0: none)")
    parser.add_argument("--held-out-events", default="6,12,24",
                        help="test events (as many fit) of the held-out-identity worlds, comma separated (empty: none)")
    parser.add_argument("--emotion-events", default="2,4,6,12",
                        help="events per run of the emotion world (issue 59), comma separated (empty: none)")
    parser.add_argument("--emotion-runs", type=int, default=2000,
                        help="runs per emotion-world cell, on the embedded corpus and the real release (0: none)")
    parser.add_argument("--emotion-cell-sd", type=float, default=1.0, help="sd of the emotion world's answers")
    parser.add_argument("--release", type=Path, default=REAL_CORPUS,
                        help="the crowd-enVENT release the emotion world also samples (skipped where absent)")
    parser.add_argument("--iccs", default=",".join(map(str, ICCS)),
                        help="intra-class correlations of the templated worlds, comma separated (empty: none)")
    parser.add_argument("--templated-runs", type=int, default=2000, help="runs per templated-world cell (0: none)")
    parser.add_argument("--size-events", default="2,3,4,6,8,12,24,48,100,500",
                        help="events per run of p_gap's size in every independent-event null world (empty: none)")
    parser.add_argument("--size-runs", type=int, default=4000, help="runs per size cell (0: none)")
    parser.add_argument("--alternative-events", default="4,6,12,24",
                        help="of --size-events, where the alternatives to Student's t are measured too")
    parser.add_argument("--holm-events", default="4,6,12,24",
                        help="of --size-events, where Holm's family-wise error over 21 tests is measured")
    parser.add_argument("--holm-families", type=int, default=2000, help="families of 21 runs per Holm cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("inference_calibration.json"))
    args = parser.parse_args()
    started = time.perf_counter()
    result_rows = rows(args)
    print(table(result_rows))
    sizes = p_gap_sizes(result_rows)
    if sizes:
        print("P_GAP_SIZE (largest size of p_gap over the null worlds, by units): "
              + ", ".join(f"{units}: {size:.3f} ({world})" for units, (size, world) in sizes.items()))
    settings = ("runs", "draws", "coverage_runs", "resamples", "closing_runs", "atp_runs", "steering_runs",
                "held_out_runs", "held_out_events", "emotion_runs", "emotion_cell_sd", "templated_runs", "size_runs",
                "holm_families", "seed")
    result = {"rows": result_rows, **{k: getattr(args, k) for k in settings}, "true_delta": TRUE_DELTA,
              "p_gap_size": {units: size for units, (size, _) in sizes.items()},
              "seconds": time.perf_counter() - started, "machine": platform.platform()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
