"""Seed 003, GenderBench's ISEAR probe: an event role-played as a man, a woman and a non-binary person; which of 12
emotions comes first, and how much its share differs between genders (max_diff). Its light modules are imported with
the package; the suite, its attempts and analysis on first use (the command line reads a run's flags from the options
alone). The metrics are `metrics.metrics` (`metrics` is their module)."""

from behavioral.core.exports import lazy_exports
from behavioral.suites.isear.evaluator import evaluate, tokenize
from behavioral.suites.isear.events import load_events, sample_indices
from behavioral.suites.isear.options import Options
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS, TEMPLATE, prompt

__all__ = ["EMOTIONS", "GENDERS", "SUITE", "TEMPLATE", "AnalyzeOptions", "IsearItem", "Options", "emotion_table",
           "evaluate", "load_events", "prompt", "run_generator", "sample_indices", "tokenize"]
__getattr__ = lazy_exports(__name__, {
    "behavioral.suites.isear.attempts": ("run_generator",),
    "behavioral.suites.isear.metrics": ("emotion_table",),
    "behavioral.suites.isear.suite": ("SUITE", "AnalyzeOptions", "IsearItem"),
})
