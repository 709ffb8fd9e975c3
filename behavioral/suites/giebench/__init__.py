"""Seed 001, GIEBench: identity-conditioned judging of four answers under COT, ID and Raw prompts. Its light modules
are imported with the package; the suite, items, verdicts and analysis on first use (the command line reads a run's
flags from the options alone). A run's rows under the suite's names: `suite.results` (`results` is the module of its
columns)."""

from behavioral.core.exports import lazy_exports
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.options import Options
from behavioral.suites.giebench.prompts import render

__all__ = ["CATEGORIES", "SUITE", "AnalyzeOptions", "GieItem", "GieRunItem", "ItemsError", "Options",
           "default_items", "load_jsonl", "load_release", "parse_verdict", "render"]
__getattr__ = lazy_exports(__name__, {
    "behavioral.suites.giebench.analysis": ("AnalyzeOptions",),
    "behavioral.suites.giebench.items": ("GieItem", "GieRunItem", "ItemsError", "default_items", "load_jsonl",
                                         "load_release"),
    "behavioral.suites.giebench.suite": ("SUITE",),
    "behavioral.suites.giebench.verdict": ("parse_verdict",),
})
