"""Seed 000, the intergroup empathy gap: groups, settings, prompts, events, the statistics and their report."""

from behavioral.suites.intergroup.suite import SUITE, AnalyzeOptions, IntergroupItem, Options, results

__all__ = ["SUITE", "AnalyzeOptions", "IntergroupItem", "Options", "results"]
