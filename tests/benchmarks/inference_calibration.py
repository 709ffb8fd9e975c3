"""Calibration of seed 000's inference and of the mechanistic controls on synthetic worlds where the truth is known:
the size and power of the per-event randomisation test of the gap in rating points (`stats.gap_test`), the coverage
of the 95% t-interval of that gap over events (`stats.gap_interval`) beside the event-bootstrap percentile interval
it replaced, and what happens to δ with few events (its mean, the coverage of a bootstrap interval of δ, the share
of σ(M⁰)² that is event noise), which is why Table 2 prints no interval of δ over events; then patching's "stops
mattering" and steering's two controls. Prints a table and writes a JSON file.

A synthetic run is I[p, x, e] for 5 identities (religion's one-to-one grid without "a person") and E events. Worlds
where H0 (no positive gap) holds:
- normal N(70, 10²), uniform integers 0..100, skewed 85 or, with probability 0.05, 50 (the development model answers
  80-85 and now and then far lower), each cell drawn independently;
- tied: greedy answers 80 or 85 (probabilities 0.6, 0.4), so matchings tie within events;
- off-diagonal: N(70, 1) with one perceiver rating one other identity 10 points higher and every in-group cell 0.4
  higher: the population gap is 0.4 - 10/20 = -0.1 points (the rank test the toolkit used before rejected here in
  0.30 of 200 runs at 12 events).
Planted worlds add `gap` rating points to the in-group cells of N(70, 10²) answers: the true gap is `gap` and the
true δ (the z-scored gap of the infinite-event matrix) is gap / σ(gap · same) = 2.5 for any gap > 0.

A steered pair is an unsteered and a steered rerun on the same events: they share a cell × event part (N(70, 10²)),
each adds N(0, 2²) noise of its own, and steering closes half of a 3-point in-group gap (true change -1.5 points);
per event count, the coverage of the steer study's paired t-interval of the change (`stats.gap_change`) beside the
paired event-bootstrap percentile interval it replaced.

Patching worlds (`behavioral.suites.intergroup.synthetic`: event noise sd 2, patch noise sd 1 per prompt, a 1.5-point
gap) patch layers 0, 10 and 20: "half" closes 50% of the gap at every layer (nothing stops mattering), "stops at 10"
closes 100%, 0 and 0, "10% from 10" closes 100%, 10% and 10% (the equivalence margin: a test at 0.05 may declare
it in at most 0.05 of runs). Per world: the share of runs whose headline says patching stops mattering (Fieller's
interval of the share closed within ±10%, `interp.patching.claims.stops_mattering`) and the share the old rule (every
later interval includes 0) would have said it; where half the gap is closed at one layer, the coverage of the
patched gap's t-interval in points (`covers_gap`), of the share closed's Fieller interval (`covers_share`, with the
share of runs where it is unbounded) and of 1 − δ ratio's event-bootstrap interval it replaced (`covers_delta`).

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

from behavioral.analysis.bootstrap import percentile_interval, resamples
from behavioral.analysis.paired import UNBOUNDED
from behavioral.suites.intergroup import stats
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.patch_gap import event_tensor, gap_table
from behavioral.suites.intergroup import steering
from behavioral.suites.intergroup.synthetic import GAP, base_matrix, patched_rows, projection_rows, steering_states
from interp.matchings import wrong_matchings
from interp.patching.claims import stops_mattering, undetermined_from
from interp.steering import mean_difference, span_direction

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


def rejection(rng: np.random.Generator, world: World, events: int, runs: int, draws: int) -> float:
    """Share of `runs` runs of `world` whose gap test rejects at 0.05."""
    return float(np.mean([stats.gap_test(world(rng, events), SAME, draws, seed=k).p_value <= 0.05
                          for k in range(runs)]))


def coverage(rng: np.random.Generator, world: World, true_gap: float, events: int, runs: int,
             resamples: int) -> dict:
    """Over `runs` runs of `world`: the share whose 95% t-interval of the gap (`stats.gap_interval`, what Table 2
    prints) and whose 95% event-bootstrap percentile interval of the gap (what it printed before) hold the true gap,
    δ's mean, the share whose bootstrap interval of δ holds the infinite-event δ (planted worlds), the mean
    event-noise share."""
    gap_hits, boot_hits, delta_hits, deltas, noise = [], [], [], [], []
    for k in range(runs):
        I = world(rng, events)
        low, high = stats.gap_interval(I, SAME)
        gap_hits.append(low <= true_gap <= high)
        boot = stats.event_bootstrap(I, SAME, resamples, seed=k)
        low, high = boot.interval(boot.gap_points)
        boot_hits.append(low <= true_gap <= high)
        deltas.append(stats.empathy_gap(stats.zscore(I.mean(axis=2)), SAME))
        noise.append(stats.event_noise_share(I))
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
    """Over `runs` steered pairs: the share whose 95% paired t-interval of the gap's change (`stats.gap_change`, what
    the steer study prints) and whose paired event-bootstrap percentile interval (what it printed before) hold the
    true change, -closure x gap."""
    truth, hits, boot_hits = -closure * gap, [], []
    for k in range(runs):
        before, after = steered_pair(rng, events, gap, closure)
        _, low, high = stats.gap_change(before, after, SAME)
        hits.append(low <= truth <= high)
        draws = resamples(events, n_resamples, k)
        changes = [steering._gap(after[:, :, d], SAME) - steering._gap(before[:, :, d], SAME) for d in draws]
        low, high = percentile_interval(np.array(changes))
        boot_hits.append(low <= truth <= high)
    return {"true_gap": truth, "covers_gap": float(np.mean(hits)), "covers_gap_bootstrap": float(np.mean(boot_hits))}


PATCH_WORLDS = {"half": {0: 0.5, 10: 0.5, 20: 0.5}, "stops at 10": {0: 1.0, 10: 0.0, 20: 0.0},
                "10% from 10 (the margin)": {0: 1.0, 10: 0.1, 20: 0.1}}


def patch_claims(world: dict[int, float], events: int, runs: int) -> dict:
    """Over `runs` synthetic patching runs: the share whose profile is read as stopping to matter (equivalence of the
    share closed within ±10%) and the share the old rule (every later interval includes 0) would have read so."""
    new, old = [], []
    for seed in range(runs):
        table = gap_table(patched_rows(world, events, 2.0, seed, patch_noise=1.0), get_category("religion"))
        bounds = table["layer"].tolist(), table["gap_closed_low"].tolist(), table["gap_closed_high"].tolist()
        new.append(stops_mattering(*bounds) is not None)
        old.append(undetermined_from(*bounds) is not None)
    return {"stops_mattering": float(np.mean(new)), "old_rule": float(np.mean(old))}


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
    truth_delta = 1 - (stats.empathy_gap(stats.zscore(patched), same)
                       / stats.empathy_gap(stats.zscore(base + GAP * same), same))
    gap_hits, share_hits, unbounded, delta_hits = [], [], [], []
    for seed in range(runs):
        frame = patched_rows({10: 0.5}, events, 2.0, seed, patch_noise=1.0)
        row = gap_table(frame, category).iloc[0]
        gap_hits.append(row["gap_raw_patched_low"] <= truth_gap <= row["gap_raw_patched_high"])
        unbounded.append(row["interval_note"] == UNBOUNDED)
        if not unbounded[-1]:
            share_hits.append(row["gap_closed_low"] <= 0.5 <= row["gap_closed_high"])
        clean, after = (event_tensor(frame, category, c) for c in ("expected_clean", "expected"))
        b0, b1 = (stats.event_bootstrap(I, same, resamples, seed) for I in (clean, after))
        low, high = percentile_interval(1 - b1.delta / b0.delta)
        delta_hits.append(low <= truth_delta <= high)
    return {"true_gap": float(truth_gap), "covers_gap": float(np.mean(gap_hits)),
            "covers_share": float(np.mean(share_hits)) if share_hits else None,
            "unbounded": float(np.mean(unbounded)),
            "covers_delta": float(np.mean(delta_hits))}


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
            label = steering.matched_cells(cells, selection, matching, without)
            return mean_difference(means, counts, label.eq(True).fillna(False), label.eq(False).fillna(False))[0]

        directions = {"L1 project": fit(), **{f"L1 project matching {m}": fit(matching) for m, matching
                                              in enumerate(matchings)},
                      **{f"L1 project held out {j}": fit(without=j) for j in range(5)}}
        rows = projection_rows(states[:, 15:], cells, 3 * readout, directions, events[15:])
        control = steering.matching_control(rows, matchings)
        held = steering.held_out_control(rows)
        control = control[control["measure"] == "intensity"]
        real, wrong = control[control["matching"] == "real"].iloc[0], control[control["matching"] != "real"]
        by_points = (1 + (wrong["closed_points"] >= real["closed_points"]).sum()) / (len(wrong) + 1)
        transfer = held.loc[(held["identity"] == "pooled") & (held["measure"] == "intensity"), "transfer"].iloc[0]
        passed.append((by_points <= 0.05, real["p_real"] <= 0.05, transfer > 0.5))
        transfers.append(transfer)
    shares = np.mean(passed, axis=0)
    return {"matching_by_points_passes": float(shares[0]), "matching_control_passes": float(shares[1]),
            "held_out_passes": float(shares[2]), "transfer_mean": float(np.mean(transfers))}


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
        label = steering.matched_cells(cells, selection, None)
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
        first = steering.random_control(rows).query("measure == 'intensity'").iloc[0]
        passed.append(bool(first["p_matched"] <= 0.05))
        silent.append(first["n_matched"] == 0)
        matched.append(first["n_matched"])
    return {"random_control_passes": float(np.mean(passed)), "random_control_silent": float(np.mean(silent)),
            "random_matched_mean": float(np.mean(matched))}


def rows(args: argparse.Namespace) -> list[dict]:
    """Every row of the table."""
    rng = np.random.default_rng(args.seed)
    out = []
    for events in (int(e) for e in args.events.split(",") if e):
        for name, world in NULLS.items():
            out.append({"events": events, "world": f"{name} null", "true_gap": TRUE_GAP.get(name, 0.0),
                        "rejects": rejection(rng, world, events, args.runs, args.draws)})
        for gap in (3.0, 5.0):
            out.append({"events": events, "world": f"planted {gap:g} points", "true_gap": gap,
                        "rejects": rejection(rng, planted(gap), events, args.runs // 2, args.draws)})
        for name, world, gap in (("normal null", planted(0.0), 0.0), ("tied null", NULLS["tied"], 0.0),
                                 ("planted 5 points", planted(5.0), 5.0)):
            out.append({"events": events, "world": f"{name}, intervals", "true_gap": gap,
                        **coverage(rng, world, gap, events, args.coverage_runs, args.resamples)})
        out.append({"events": events, "world": "steering, gap change (3 points, half closed), intervals",
                    **change_coverage(rng, events, args.coverage_runs, args.resamples)})
        for name, world in PATCH_WORLDS.items():
            out.append({"events": events, "world": f"patching, {name}",
                        **patch_claims(world, events, args.coverage_runs)})
        out.append({"events": events, "world": "patching, half at one layer, intervals",
                    **patch_intervals(events, args.coverage_runs, args.resamples // 5)})
        print(f"{events} events done", flush=True)
    if not args.steering_runs:
        return out
    for name, shared in (("steering, shared feature", True), ("steering, per-identity features", False)):
        out.append({"events": 15, "world": name, **steering_controls(shared, args.steering_runs)})
    for n_random in (39, 199):
        for name in RANDOM_WORLDS:
            out.append({"events": 15, "world": f"steering random control ({n_random} directions), {name}",
                        **random_control_world(name, args.steering_runs, n_random)})
    return out


COLUMNS = ("events", "world", "true_gap", "rejects", "covers_gap", "covers_gap_bootstrap", "covers_share",
           "unbounded", "delta_mean", "covers_delta", "noise_share", "stops_mattering", "old_rule",
           "matching_by_points_passes",
           "matching_control_passes", "held_out_passes", "transfer_mean", "random_control_passes",
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
    parser.add_argument("--steering-runs", type=int, default=20, help="synthetic worlds per steering row (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("inference_calibration.json"))
    args = parser.parse_args()
    started = time.perf_counter()
    result_rows = rows(args)
    print(table(result_rows))
    result = {"rows": result_rows, **{k: getattr(args, k) for k in ("runs", "draws", "coverage_runs", "resamples",
                                                                     "steering_runs", "seed")},
              "true_delta": TRUE_DELTA, "seconds": time.perf_counter() - started, "machine": platform.platform()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
