"""Seed 002, JaEm-ST (Formánek & Sotolář): templates filled with intersectional attributes; cognitive empathy by
multiple choice, affective empathy by VAD distance, response appropriateness by EPITOME-style classifiers."""

from behavioral.suites.jaem.answers import cut_reply, parse_letter
from behavioral.suites.jaem.dimensions import ATTRIBUTES, PROJECT_DIMENSIONS, load_dimensions
from behavioral.suites.jaem.effects import attribute_effects
from behavioral.suites.jaem.era import EraScorer, HFEraScorer
from behavioral.suites.jaem.errors import JaemInputError
from behavioral.suites.jaem.lexicon import VadDistance, VadLexicon, load_vad_lexicon
from behavioral.suites.jaem.metrics import sample_metrics
from behavioral.suites.jaem.samples import Sample, build_samples
from behavioral.suites.jaem.suite import SUITE, AnalyzeOptions, JaemItem, Options
from behavioral.suites.jaem.templates import LABELS, Template, load_templates, parse_template, project_templates

__all__ = ["ATTRIBUTES", "LABELS", "PROJECT_DIMENSIONS", "SUITE", "AnalyzeOptions", "EraScorer", "HFEraScorer",
           "JaemInputError", "JaemItem", "Options", "Sample", "Template", "VadDistance", "VadLexicon",
           "attribute_effects", "build_samples", "cut_reply", "load_dimensions", "load_templates", "load_vad_lexicon",
           "parse_letter", "parse_template", "project_templates", "sample_metrics"]
