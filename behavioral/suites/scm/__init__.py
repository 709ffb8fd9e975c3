"""Seed 004: stereotype-content fidelity of LLM surrogates. Groups × traits rated A-E in Table 6's 20 phrasings,
compared with human ratings by Wasserstein-1 distance, the Fidelity Parity Ratio and SCM quadrants. Its light modules
are imported with the package; the suite, answers and statistics on first use (the command line reads a run's flags
from the options alone). `items`, `fidelity` and `quadrants` are modules (their functions: `items.items`,
`fidelity.fidelity`, `quadrants.quadrants`)."""

from behavioral.core.exports import lazy_exports
from behavioral.suites.scm.groups import GROUPS
from behavioral.suites.scm.options import Options
from behavioral.suites.scm.traits import TRAITS

__all__ = ["GROUPS", "TRAITS", "SUITE", "Options", "AnalyzeOptions", "load_human", "view", "ratings", "w1", "fpr",
           "fpr_by_attribute", "inter_trait_baseline", "parse_reply"]
__getattr__ = lazy_exports(__name__, {
    "behavioral.suites.scm.answers": ("parse_reply",),
    "behavioral.suites.scm.fidelity": ("inter_trait_baseline", "w1"),
    "behavioral.suites.scm.human": ("load_human",),
    "behavioral.suites.scm.parity": ("fpr", "fpr_by_attribute"),
    "behavioral.suites.scm.runs": ("ratings", "view"),
    "behavioral.suites.scm.suite": ("SUITE", "AnalyzeOptions"),
})
