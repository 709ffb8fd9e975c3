"""Seed 000, the intergroup empathy gap: groups, settings, prompts, events, the statistics and their report."""

from behavioral.suites.intergroup.analysis import AnalyzeOptions
from behavioral.suites.intergroup.items import IntergroupItem, Options, results
from behavioral.suites.intergroup.suite import SUITE

__all__ = ["SUITE", "AnalyzeOptions", "IntergroupItem", "Options", "results"]
