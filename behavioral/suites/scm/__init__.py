"""Seed 004: stereotype-content fidelity of LLM surrogates. Groups × traits rated A-E in Table 6's 20 phrasings,
compared with human ratings by Wasserstein-1 distance, the Fidelity Parity Ratio and SCM quadrants."""

from behavioral.suites.scm.answers import parse_reply
from behavioral.suites.scm.fidelity import fidelity, inter_trait_baseline, w1
from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.human import load_human
from behavioral.suites.scm.items import items
from behavioral.suites.scm.parity import fpr, fpr_by_attribute
from behavioral.suites.scm.quadrants import quadrants
from behavioral.suites.scm.runs import ratings, view
from behavioral.suites.scm.suite import SUITE, AnalyzeOptions, Options
from behavioral.suites.scm.traits import TRAITS

__all__ = ["GROUPS", "TRAITS", "SUITE", "Options", "AnalyzeOptions", "items", "load_human", "view", "ratings", "w1",
           "fidelity", "fpr", "fpr_by_attribute", "quadrants", "inter_trait_baseline", "parse_reply"]
