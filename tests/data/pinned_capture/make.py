"""Make the pinned capture run and its expected numbers with the code of commit adeb179 (before the interp refactor).

    git worktree add /tmp/pin-base adeb179
    cp tests/data/pinned_capture/make.py /tmp/pin-base/tests/data/pinned_capture/   # if not there yet
    cd /tmp/pin-base && PYTHONPATH=/tmp/pin-base python tests/data/pinned_capture/make.py

Writes, beside this script:
- model/: the tests' tiny random 2-layer Llama (conftest.make_tiny_model, seed 0) with the tokenizer trained in the
  tests (tests/tiny_tokenizer.py; experiments/ at adeb179), saved once, so the pins do not depend on the tokenizer's
  training corpus;
- run/: an intergroup score-mode capture run on it (religion and race, setting P0S0T0, 3 events, capture persona,
  experiencer and final with 2 samples per cell, fp32 on CPU);
- expected.json: every number tests/test_pinned_mechanisms.py recomputes, computed here through the OLD API
  (ActivationStore.persona/experiencer/final/final_samples(category, setting), interp.* on the store).

An existing model/ or run/ is kept (delete them to rebuild); expected.json is always rewritten. Arrays are pinned as
checksums (`checksum`): shape, float64 sum, sum of squares and the first five values of the flattened array.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

MODEL = HERE / "model"
RUN = HERE / "run"
EXPECTED = HERE / "expected.json"

SETTING = "P0S0T0"
CATEGORIES = ("religion", "race")
N_EVENTS = 3
PER_CELL_SAMPLES = 2
BATCH_SIZE = 16
N_PERMUTATIONS = 50  # cluster statistics and RSA
SEED = 0
RELIGION_LABELS = {"a Christian": "A", "a Muslim": "B", "a Jew": "A", "a Buddhist": "B", "a Hindu": "A"}
STEER_LAYER, STEER_COEF = 0, 2.0  # the unit in-group direction of religion, added at decoder layer 0
PATCH_LAYERS = (0, 1)
PATCH_SETTING = "P0S1T0"  # the 0..10 scale: a small answer trie keeps the patching pin fast


def checksum(array) -> dict:
    """Shape, float64 sum and sum of squares, and the first five values of the flattened array."""
    a = np.asarray(array, dtype=np.float64)
    flat = a.ravel()
    return {"shape": list(a.shape), "sum": float(flat.sum()), "sumsq": float((flat * flat).sum()),
            "first": [float(x) for x in flat[:5]]}


def records(frame: pd.DataFrame) -> dict:
    """A table as {column: [values]} (numpy scalars made plain)."""
    return {c: [v.item() if hasattr(v, "item") else v for v in frame[c].tolist()] for c in frame.columns}


def make_model() -> None:
    from tests.conftest import make_tiny_model
    try:
        from tests.tiny_tokenizer import build_tiny_tokenizer
    except ImportError:  # the tree of commit adeb179, where it was experiments/tiny_tokenizer.py
        from experiments.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    make_tiny_model(len(tokenizer)).save_pretrained(MODEL)
    tokenizer.save_pretrained(MODEL)


def run_config():
    from behavioral.runner import run as run_mod
    from behavioral.suites.intergroup import Options

    return run_mod.RunConfig(
        suite="intergroup", model=str(MODEL.relative_to(ROOT)),
        options=Options(categories=CATEGORIES, settings=(SETTING,), limit_events=N_EVENTS), unit_size=32,
        mode="score", device="cpu", dtype="fp32", batch_size=BATCH_SIZE, capture=("persona", "experiencer", "final"),
        per_cell_samples=PER_CELL_SAMPLES, max_new_tokens=8)


def make_run() -> None:
    from behavioral.runner import run as run_mod

    run_mod.run(run_config(), RUN.relative_to(ROOT), progress=False)


def behaviour_matrix(category: str) -> np.ndarray:
    """M0[p, x]: mean expected intensity over the events (every identity, "a person" first, Table 1 order)."""
    from behavioral.suites.intergroup.groups import get_category
    from behavioral.suites.intergroup.items import results

    rows = results(RUN)
    rows = rows[(rows["category"] == category) & (rows["setting"] == SETTING)]
    names = list(get_category(category).with_unspecified)
    M0 = rows.pivot_table(index="perceiver", columns="experiencer", values="expected_intensity", aggfunc="mean")
    return M0.reindex(index=names, columns=names).to_numpy(dtype=np.float64)


def expected() -> dict:
    import torch

    from activations import store as activation_store
    from behavioral.inference import chat
    from behavioral.inference import models
    from behavioral.inference.engine import Engine
    from behavioral.suites.intergroup.corpus import embedded_events, sample_events
    from behavioral.suites.intergroup.groups import get_category
    from interp import clusters, probes, rsa, steering
    from interp import patching as P

    torch.set_num_threads(int(os.environ.get("PIN_THREADS", "1")))
    store = activation_store.load(RUN)
    out: dict = {"setting": SETTING, "hooks": list(store.hooks), "store": {}, "clusters": {}, "behaviour": {},
                 "rsa": {}, "probes": {}, "steering": {}, "patching": {}}

    # --- the store (old API) ---
    for category in CATEGORIES:
        entry = {}
        for reduction in ("mean", "last"):
            vectors, names = store.persona(category, SETTING, reduction)
            entry[f"persona_{reduction}"] = {"vectors": checksum(vectors), "names": list(names)}
            vectors, pairs = store.experiencer(category, SETTING, reduction)
            entry[f"experiencer_{reduction}"] = {"vectors": checksum(vectors), "pairs": records(pairs)}
        means, cells = store.final(category, SETTING)
        entry["final"] = {"means": checksum(means), "cells": records(cells)}
        samples, sampled = store.final_samples(category, SETTING)
        entry["final_samples"] = {"samples": checksum(samples),
                                  "index": records(sampled[["perceiver", "experiencer", "event_id"]]),
                                  "columns": list(sampled.columns)}
        out["store"][category] = entry

    # --- clusters ---
    for category in CATEGORIES:
        entry = {}
        for span, perceiver in (("persona", "a person"), ("experiencer", "a person"), ("experiencer", "mean")):
            for reduction in ("mean", "last"):
                vectors, names = clusters.identity_vectors(store, category, SETTING, span, reduction, perceiver)
                key = f"{span}_{reduction}" + ("_mean_perceiver" if perceiver == "mean" else "")
                entry[f"identity_vectors_{key}"] = {"vectors": checksum(vectors), "names": names}
        names = list(get_category(category).identities)
        entry["category_labels"] = clusters.category_labels(category, names)
        for span in ("persona", "experiencer"):
            labels = None if category == "race" else RELIGION_LABELS
            table = clusters.layer_stats(store, labels, category=category, setting=SETTING, span=span,
                                         n_permutations=N_PERMUTATIONS, seed=SEED)
            entry[f"layer_stats_{span}"] = records(table)
        out["clusters"][category] = entry

    # --- behaviour (the matrix RSA compares against) and RSA ---
    for category in CATEGORIES:
        M0 = behaviour_matrix(category)
        out["behaviour"][category] = {"M0": M0.tolist()}
        persona, names = clusters.identity_vectors(store, category, SETTING, "persona", "mean")
        control = rsa.difference_matrix([len(n) for n in names])
        table = rsa.layer_rsa(persona, M0[1:], store.hooks, n_permutations=N_PERMUTATIONS, seed=SEED,
                              control=control)
        out["rsa"][category] = records(table)

    # --- probes ---
    probe_runs = {"religion_ingroup_sample": ("religion", "ingroup", "sample"),
                  "race_ingroup_sample": ("race", "ingroup", "sample"),
                  "race_ingroup_cell": ("race", "ingroup", "cell"),
                  "race_perceiver_group_event": ("race", "perceiver_group", "event")}
    for key, (category, target, split) in probe_runs.items():
        table = probes.layer_probes(store, category, SETTING, target, cv=2, seed=SEED, split=split, n_shuffles=1)
        out["probes"][key] = records(table)

    # --- steering ---
    model, tokenizer, _ = models.load(str(MODEL), "cpu", "fp32")
    engine = Engine(model, tokenizer, batch_size=BATCH_SIZE)
    for category in CATEGORIES:
        out["steering"][category] = {
            "direction": checksum(steering.ingroup_direction(store, category, SETTING)),
            "unit_direction": checksum(steering.ingroup_direction(store, category, SETTING, unit=True)),
        }
    event = sample_events(embedded_events(), N_EVENTS)[0]
    target = P.build(tokenizer, SETTING, "a Christian", "a Muslim", event, chat.detect_format(tokenizer))
    trie = P.get_trie(tokenizer, SETTING)
    direction = steering.ingroup_direction(store, "religion", SETTING, unit=True)[
        steering.hook_row(store.hooks, STEER_LAYER)]

    def score() -> dict:
        (s,) = engine.score([list(target.ids)], trie)
        return {"greedy": s.greedy, "expected": float(s.expected), "valid_mass": float(s.valid_mass),
                "start_mass": float(s.start_mass)}

    plain = score()
    with steering.steer(model, STEER_LAYER, direction, coef=STEER_COEF, engine=engine):
        steered = score()
    out["steering"]["score"] = {"perceiver": "a Christian", "experiencer": "a Muslim", "event_id": event.event_id,
                                "layer": STEER_LAYER, "coef": STEER_COEF, "plain": plain, "steered": steered}

    # --- patching ---
    frame = P.patched_gap_prompts(engine, "religion", PATCH_SETTING, [event], PATCH_LAYERS, positions="system")
    out["patching"] = {"setting": PATCH_SETTING, "event_id": event.event_id, "layers": list(PATCH_LAYERS),
                       "positions": "system",
                       "prompts": {"n": len(frame), "expected": checksum(frame["expected"]),
                                   "expected_clean": checksum(frame["expected_clean"]),
                                   "keys": records(frame[["mode", "layer", "perceiver", "experiencer",
                                                          "source_perceiver"]])},
                       "gap_table": records(P.gap_table(frame, "religion"))}
    return out


def main() -> None:
    os.chdir(ROOT)  # the run's manifest names the model and run by paths relative to the repository root
    start = time.perf_counter()
    if not MODEL.is_dir():
        make_model()
    if not RUN.is_dir():
        make_run()
    print(f"model and run: {time.perf_counter() - start:.1f}s")
    EXPECTED.write_text(json.dumps(expected(), indent=1, allow_nan=True) + "\n")
    print(f"total: {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
