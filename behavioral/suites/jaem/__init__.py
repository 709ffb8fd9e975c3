"""Seed 002, JaEm-ST (Formánek & Sotolář): templates filled with intersectional attributes; cognitive empathy by
multiple choice, affective empathy by VAD distance, response appropriateness by EPITOME-style classifiers. Its light
modules are imported with the package; the suite, effects, ERA classifiers, lexicon and metrics on first use (the
command line reads a run's flags from the options alone)."""

from behavioral.core.exports import lazy_exports
from behavioral.suites.jaem.answers import cut_reply, parse_letter
from behavioral.suites.jaem.dimensions import ATTRIBUTES, PROJECT_DIMENSIONS, load_dimensions
from behavioral.suites.jaem.errors import JaemInputError
from behavioral.suites.jaem.options import Options
from behavioral.suites.jaem.samples import Sample, build_samples
from behavioral.suites.jaem.templates import LABELS, Template, load_templates, parse_template, project_templates

__all__ = ["ATTRIBUTES", "LABELS", "PROJECT_DIMENSIONS", "SUITE", "AnalyzeOptions", "EraScorer", "HFEraScorer",
           "JaemInputError", "JaemItem", "Options", "Sample", "Template", "VadDistance", "VadLexicon",
           "attribute_effects", "build_samples", "cut_reply", "load_dimensions", "load_templates", "load_vad_lexicon",
           "parse_letter", "parse_template", "project_templates", "sample_metrics"]
__getattr__ = lazy_exports(__name__, {
    "behavioral.suites.jaem.effects": ("attribute_effects",),
    "behavioral.suites.jaem.era": ("EraScorer", "HFEraScorer"),
    "behavioral.suites.jaem.lexicon": ("VadDistance", "VadLexicon", "load_vad_lexicon"),
    "behavioral.suites.jaem.metrics": ("sample_metrics",),
    "behavioral.suites.jaem.suite": ("SUITE", "AnalyzeOptions", "JaemItem"),
})
