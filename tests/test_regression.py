"""Seed 000's rows pinned: a small fp32 run of the real SmolLM2 gives the same rows as when the pin was taken.

The pin (tests/data/seed000_smollm2_rows.csv) was written by this test with EMPATHY_GAP_REPIN=1 before the suite
moved into the suite framework (the rows are read through `intergroup.results`, seed 000's column names); answers
and replies must match exactly, score-mode floats to 1e-4: installed on 2026-11-24, transformers 5.23.0 moved the
expected intensities (0..10) by up to 3.1e-5 and the numeric mass by up to 1.8e-6 in fp32 with every answer and reply
unchanged, so float drift across releases is that size, while a change to the scoring itself moves them far more.
Repinned on 2026-12-02 when the event sampler began drawing every event with the same chance (its 2 events are now
anger-5 and shame-63, were anger-7 and disgust-19); before the repin, the old pin's two events scored by the new code
(the sampler patched to draw them) matched every answer and reply, the floats to 2.2e-5.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from behavioral.runner.run import RunConfig, run
from behavioral.suites.intergroup import Options, results

PIN = Path(__file__).parent / "data" / "seed000_smollm2_rows.csv"
EXACT = ["unit_id", "event_id", "setting", "perceiver", "experiencer", "response", "intensity", "refused",
         "truncated", "score_intensity"]
FLOATS = ["expected_intensity", "numeric_mass"]


def test_a_small_fp32_run_gives_the_pinned_rows(smollm2, tmp_path):
    options = Options(categories=("religion",), settings=("P0S1T0",), limit_events=2)
    config = RunConfig(suite="intergroup", model="smollm2-135m", options=options, mode="both", device="cpu",
                       dtype="fp32", batch_size=8)
    rows = results(run(config, tmp_path / "run", progress=False))
    rows = rows[EXACT + FLOATS].sort_values(["unit_id", "event_id"]).reset_index(drop=True)
    if os.environ.get("EMPATHY_GAP_REPIN"):
        rows.to_csv(PIN, index=False)
    pinned = pd.read_csv(PIN, keep_default_na=False, na_values=[""])
    assert len(rows) == len(pinned) == 72
    pd.testing.assert_frame_equal(rows[EXACT].astype(str), pinned[EXACT].astype(str))
    pd.testing.assert_frame_equal(rows[FLOATS], pinned[FLOATS], check_exact=False, rtol=0, atol=1e-4)
