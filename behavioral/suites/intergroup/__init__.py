"""Seed 000, the intergroup empathy gap: groups, settings, prompts, events, the statistics and their report. Its
options are imported with the package; the suite, its items and analysis on first use (the command line reads a
run's flags from the options alone)."""

from behavioral.core.exports import lazy_exports
from behavioral.suites.intergroup.options import Options

__all__ = ["SUITE", "AnalyzeOptions", "IntergroupItem", "Options", "results"]
__getattr__ = lazy_exports(__name__, {
    "behavioral.suites.intergroup.setting_analysis": ("AnalyzeOptions",),
    "behavioral.suites.intergroup.items": ("IntergroupItem", "results"),
    "behavioral.suites.intergroup.suite": ("SUITE",),
})
