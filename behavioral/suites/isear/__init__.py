"""Seed 003, GenderBench's ISEAR probe: an event role-played as a man, a woman and a non-binary person; which of 12
emotions comes first, and how much its share differs between genders (max_diff)."""

from behavioral.suites.isear.attempts import run_generator
from behavioral.suites.isear.evaluator import evaluate, tokenize
from behavioral.suites.isear.events import load_events, sample_indices
from behavioral.suites.isear.metrics import emotion_table, metrics
from behavioral.suites.isear.prompts import EMOTIONS, GENDERS, TEMPLATE, prompt
from behavioral.suites.isear.suite import SUITE, AnalyzeOptions, IsearItem, Options

__all__ = ["EMOTIONS", "GENDERS", "SUITE", "TEMPLATE", "AnalyzeOptions", "IsearItem", "Options", "emotion_table",
           "evaluate", "load_events", "metrics", "prompt", "run_generator", "sample_indices", "tokenize"]
