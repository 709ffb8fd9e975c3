"""Seed 001, GIEBench: identity-conditioned judging of four answers under COT, ID and Raw prompts."""

from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.items import GieItem, ItemsError, default_items, load_jsonl, load_release
from behavioral.suites.giebench.prompts import render
from behavioral.suites.giebench.analysis import AnalyzeOptions
from behavioral.suites.giebench.items import GieRunItem
from behavioral.suites.giebench.suite import SUITE, Options, results
from behavioral.suites.giebench.verdict import parse_verdict

__all__ = ["CATEGORIES", "SUITE", "AnalyzeOptions", "GieItem", "GieRunItem", "ItemsError", "Options",
           "default_items", "load_jsonl", "load_release", "parse_verdict", "render", "results"]
