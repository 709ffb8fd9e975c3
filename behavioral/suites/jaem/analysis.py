"""jaem's analysis of one or more runs, declared: the runs' items, answer rates, Table 1 (run × template),
per-attribute effects and omnibus tests, comparisons between templates, and across runs CE accuracy, attribute
effects side by side and tests between runs; the measures' provenance as method notes. Every table names the answer
its metrics read (`ce_measure`/`gen_measure`, or `measure` per metric) and the family its Holm p corrects over."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from behavioral.analysis import Analysis, Figure, Run, Section, Table
from behavioral.analysis.caveats import few_parsed, joined, one_answer
from behavioral.report.formats import code_span
from behavioral.analysis.headline import Headline, headline_section
from behavioral.core.options import check_bounds, option
from behavioral.suites.jaem import figures, tables
from behavioral.suites.jaem.dimensions import PROJECT_DIMENSIONS, load_dimensions
from behavioral.suites.jaem.effects import BINARY, METRICS
from behavioral.suites.jaem.era import EraScorer, HFEraScorer, parse_era_models
from behavioral.suites.jaem.errors import JaemInputError
from behavioral.suites.jaem.lexicon import LEE_RULE, RULE, VadLexicon, load_vad_lexicon
from behavioral.suites.jaem.metrics import ANSWER_RULE, measure_names, sample_metrics

SOURCE = ("Seed 002: Formánek & Sotolář, *Quantitative Assessment of Intersectional Empathetic Bias and "
          "Understanding*. The card (behavioral/suites/jaem/README.md) lists every deviation from the authors.")
UNAVAILABLE = "unavailable"
RATES_TEXT = ("*ce_from*: where CE answers came from (generate: parsed replies; score: the scored distribution); "
              "*ce_unparsed*: generated CE replies with no letter (a leading letter, else `Answer: X` or `answer is "
              "X`), counted as wrong; *gen_empty*: gen replies empty after the cut at the speaker's next turn; "
              "*vad_unmatched*: gen samples whose reply or utterance holds no lexicon word (NaN, left out of means).")
EFFECTS_TEXT = ("z = (mean of a value − run mean) / (run sd / √n), normal p, Holm over the values of the attribute; "
                "omnibus χ² (CE) or Kruskal-Wallis (others), Holm over the 8 attributes (7 and sexuality × pronoun). "
                "**The paper names no test: these are ours.** Every value's z is in `attributes.csv`.")
PAIRS_TEXT = "χ² (CE) or Mann-Whitney (others), Holm over the 7 metrics of each pair. **Ours, not the paper's.**"
VALUES_HOLM = {"p_holm": "Holm over the values of one run, metric and attribute."}
OMNIBUS_HOLM = "Holm over the 8 attributes (7 and sexuality × pronoun) of one run and metric."
PAIRS_HOLM = {"p_holm": "Holm over the 7 metrics of one pair."}
MEASURE = {"measure": "the answer the metric reads."}
WILSON = {"ce_correct_low, ce_correct_high": "ce_correct's 95% Wilson interval over the ce_samples CE samples (our "
                                             "addition).",
          "ce_measure, gen_measure": "the CE answer, and what the reply's VAD and ERA read."}
P = {"p": "p", "p_holm": "p"}
METRIC_FORMATS = {"ce_correct": "percent", "ce_correct_low": "percent", "ce_correct_high": "percent",
                  "ce_samples": "count", "count": "count"}
RATE_FORMATS = {"samples": "count", "ce_unparsed": "percent", "gen_empty": "percent", "vad_unmatched": "count",
                "gen_samples": "count"}
LARGEST_FORMATS = {"values_significant": "count", "attributes_significant": "count", "n": "count", "z": "signed",
                   "p_holm": "p"}
CE_NOTE = ("pools the templates, whose samples share a story, so they are less independent than the interval assumes; "
           "the interval covers which samples were drawn, not the templates, the CE prompt's wording or decoding")
Measures = dict[str, dict[str, str | None]]  # run -> measure_names of its samples


@dataclass(frozen=True)
class AnalyzeOptions:
    """How a jaem analysis reads generated replies: the VAD lexicon (AE) and the ERA classifiers; without them that
    measure is reported unavailable."""

    vad_lexicon: str | None = option(None, "NRC-VAD style TSV (term, valence, arousal, dominance) or `demo` (the "
                                           "project's ~80 words); none: AE unavailable", metavar="TSV")
    era_model: str | None = option(None, "IP=ID,EX=ID,ER=ID: 3-label sequence classifiers (folders or hub ids); "
                                         "none: ERA unavailable", metavar="IP=ID,EX=ID,ER=ID")
    era_batch_size: int = option(16, "pairs per ERA classifier batch", metavar="N")
    era: EraScorer | None = None  # no flag: a scorer object from Python (any EraScorer) in place of era_model

    def __post_init__(self):
        if self.era_model is not None:
            parse_era_models(self.era_model)
        if self.era_batch_size < 1:
            raise JaemInputError(f"--era-batch-size must be at least 1, got {self.era_batch_size}")
        check_bounds(self)


def _measures(lexicon: VadLexicon | None, era: str | None) -> list[str]:
    """How each measure was obtained, or why it is unavailable."""
    if lexicon is None:
        ae = f"AE (VAD): {UNAVAILABLE}: no --vad-lexicon given (the NRC VAD Lexicon is research-only; supply it)."
    else:
        ae = (f"AE (VAD): {code_span(lexicon.source)}, {len(lexicon.terms)} terms on {lexicon.scale}, sha256 "
              f"`{lexicon.sha256[:16]}…`. Scoring rule: {RULE}. {LEE_RULE}.")
        if lexicon.demo:
            ae += (" **Demo lexicon: ~80 words written by this project; the VAD numbers below only show the "
                   "pipeline working and are not research results.**")
    era_line = (f"ERA (EPITOME IP/EX/ER): {UNAVAILABLE}: no --era-model given (no EPITOME weights ship)."
                if era is None else f"ERA (EPITOME IP/EX/ER): classifiers {code_span(era)}; labels 0/1/2, argmax.")
    return [f"Answers: {ANSWER_RULE}.",
            "CE: accuracy of choosing the Empathetic answer (unparsed replies count as wrong).", ae, era_line]


def _with_measure(frame: pd.DataFrame, named: Measures, runs: str = "run", column: str = "measure",
                  after: str = "metric") -> pd.DataFrame:
    """`frame` with, after column `after`, the answer each row's metric reads in the run its column `runs` names."""
    frame = frame.copy()
    frame.insert(frame.columns.get_loc(after) + 1, column,
                 [named[run]["ce_measure" if metric in BINARY else "gen_measure"]
                  for run, metric in zip(frame[runs], frame["metric"])])
    return frame


def _with_run_measures(frames: dict[str, pd.DataFrame], named: Measures) -> pd.DataFrame:
    """One frame per run (run name -> frame) stacked, each row with its run's ce_measure and gen_measure."""
    return tables.stack({name: frame.assign(**named[name]) for name, frame in frames.items()})


def _warning(samples: pd.DataFrame) -> str:
    """What makes a run's CE accuracy doubtful: few CE replies with a letter, or one letter for almost every
    sample (chance accuracy from a constant answer)."""
    ce = samples[samples["ce_source"].notna()]
    unparsed = tables.answer_rates(samples)["ce_unparsed"].iloc[0]
    return joined((few_parsed(1 - unparsed, "a letter"), one_answer(ce["ce_letter"], "CE samples")))


def headlines(samples: dict[str, pd.DataFrame]) -> list[Headline]:
    """Per run, CE accuracy with every template pooled (compare_ce's) and its Wilson interval over the CE samples."""
    rows = []
    for name, s in samples.items():
        ce = tables.ce_correct(s)
        n, templates = int(ce["ce_samples"]), s.loc[s["ce_correct"].notna(), "template"].nunique()
        wilson = not math.isnan(ce["ce_correct_low"])
        interval = f"95% Wilson interval over {n} CE samples" if wilson else "none"
        note = CE_NOTE if wilson else "no CE task in this run" if not n else \
            "no interval: a sample has several CE answers, and Wilson's interval needs one per sample"
        rows.append(Headline(name, f"CE accuracy (share), {templates} templates pooled", ce["ce_correct"],
                             ce["ce_correct_low"], ce["ce_correct_high"], interval, n, "CE samples", note,
                             _warning(s)))
    return rows


def _items(runs: Sequence[Run]) -> Table:
    """What each run asked: tasks, templates, samples and how they were drawn, the prompt layout."""
    rows = [{"run": run.name, "tasks": ", ".join(run.options.get("tasks") or []),
             "templates": ", ".join(sorted(run.config.get("templates") or {})), "samples": run.config.get("n_samples"),
             "full_dims": ", ".join(run.options.get("full_dims") or []), "repeats": run.options.get("repeats"),
             "limit": run.options.get("limit"), "layout": run.options.get("layout")} for run in runs]
    return Table("items", "Items per run", pd.DataFrame(rows), formats={"samples": "count", "repeats": "count",
                                                                        "limit": "count"})


def _axes(run: Run) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The sexuality and pronoun values a run was made with (the heatmap's rows and columns)."""
    path = run.options.get("dimensions")
    dims = load_dimensions(path) if path and Path(path).is_file() else PROJECT_DIMENSIONS
    return dims["sexuality"], dims["pronoun"]


def _figures(runs: Sequence[Run], samples: dict[str, pd.DataFrame], per_value: pd.DataFrame) -> list[Figure]:
    """A z heatmap per metric (a panel per run that has it) and the chosen CE answers of the runs with CE."""
    out = []
    for metric in METRICS:
        axes = {run.name: _axes(run) for run in runs if metric in tables.available(samples[run.name])}
        if axes:
            read = "the CE answer (`ce_measure`)" if metric in BINARY else "the generated reply (`gen_measure`)"
            out.append(Figure(f"z_{metric}", f"z of {metric} per sexuality × pronoun cell; {metric} reads {read}",
                              figures.z_heatmap(per_value, metric, axes)))
    with_ce = {name: s for name, s in samples.items() if s["ce_correct"].notna().any()}
    if with_ce:
        out.append(Figure("choices", "Chosen CE label and letter per template (the CE answer: `ce_measure`)",
                          figures.choices(with_ce)))
    return out


def _per_run(runs: Sequence[Run], samples: dict[str, pd.DataFrame], named: Measures, per_value: pd.DataFrame,
             per_attr: pd.DataFrame) -> list[Section]:
    """Each run's own tables (a `run` column tells them apart) and figures (a panel per run)."""
    figs = _figures(runs, samples, per_value)
    answers = _with_run_measures({name: tables.answer_rates(s) for name, s in samples.items()}, named)
    table1 = _with_run_measures({name: tables.table1(s) for name, s in samples.items()}, named)
    largest = _with_measure(tables.largest_effects(per_value, per_attr), named)
    none = [name for name, s in samples.items() if not tables.available(s)]
    return [
        Section("Items", "", (_items(runs),)),
        Section("Answers", RATES_TEXT, (Table("answers", "Answers per run (`ce_measure`: the CE answer, "
                                              "`gen_measure`: the generated reply)", answers, formats=RATE_FORMATS),),
                tuple(f for f in figs if f.name == "choices")),
        Section("Table 1", "", (Table("table1", "Table 1: run × template", table1, definitions=WILSON,
                                      formats=METRIC_FORMATS),)),
        Section("Per attribute", EFFECTS_TEXT + (f" No metric available: {', '.join(none)}." if none else ""),
                (Table("largest_effects", "Per run and metric: values and attributes with p_holm below 0.05, the "
                       "largest |z| first", largest, formats=LARGEST_FORMATS, definitions=MEASURE | {
                           "p_holm": "Holm over the values of one run, metric and attribute, and over the 8 "
                                     "attributes of one run and metric."}),
                 Table("omnibus", "Omnibus tests per attribute", per_attr, formats=P,
                       definitions=MEASURE | {"p_holm": OMNIBUS_HOLM})),
                tuple(f for f in figs if f.name != "choices")),
        Section("Between templates", PAIRS_TEXT + " Every pair of templates of each run is in `template_pairs.csv`."),
    ]


def _across(samples: dict[str, pd.DataFrame], named: Measures, per_value: pd.DataFrame,
            per_attr: pd.DataFrame) -> Section:
    """The comparison of two or more runs: CE accuracy, omnibus p_holm side by side and tests between runs."""
    names = list(samples)
    accuracy = _with_run_measures({name: tables.ce_accuracy(s) for name, s in samples.items()}, named)
    omnibus = tables.side_by_side(per_attr, ["metric", "attribute"], "p_holm", names)
    shares = {c: "percent" for c in accuracy.columns if c.startswith("chose_")}
    pairs = _with_measure(_with_measure(tables.run_pairs(samples), named, "a", "measure_a"), named, "b", "measure_b",
                          after="measure_a")
    return Section("Across runs", "Every template pooled; every value's z side by side is in `compare_z.csv`. "
                   + PAIRS_TEXT, (
                       Table("compare_ce", "CE accuracy and chosen labels per run", accuracy, definitions=WILSON,
                             formats={"ce_samples": "count", "ce_correct": "percent", "ce_correct_low": "percent",
                                      "ce_correct_high": "percent"} | shares),
                       Table("compare_omnibus", "Omnibus p_holm per attribute, a column per run", omnibus,
                             formats=dict.fromkeys(names, "p"),
                             definitions={"a column per run": f"its omnibus p_holm: {OMNIBUS_HOLM} Each run's "
                                                              "measures are in omnibus.csv."}),
                       Table("run_pairs", "Tests between runs", pairs, formats=P, definitions=PAIRS_HOLM | {
                           "measure_a, measure_b": "the answer the metric reads in each run."})))


def _files(samples: dict[str, pd.DataFrame], named: Measures, per_value: pd.DataFrame) -> list[Table]:
    """The long tables, written but not printed: every value's effect, template pairs, samples, and with several
    runs every value's z side by side."""
    template_pairs = _with_measure(tables.stack({name: tables.template_pairs(s) for name, s in samples.items()}),
                                   named)
    files = [Table("attributes", "Per-attribute effects", per_value, definitions=VALUES_HOLM | MEASURE,
                   formats={"n": "count", "z": "signed"} | P),
             Table("template_pairs", "Tests between templates", template_pairs, formats=P,
                   definitions=PAIRS_HOLM | MEASURE),
             Table("samples", "Every sample with its metrics (`ce_source`: where its CE answer came from)",
                   tables.stack(samples), formats=METRIC_FORMATS)]
    if len(samples) > 1:
        z = tables.side_by_side(per_value, ["metric", "attribute", "value"], "z", list(samples))
        files.append(Table("compare_z", "z per attribute value, a column per run (each run's measures in "
                           "attributes.csv)", z, formats=dict.fromkeys(samples, "signed")))
    return files


def analysis(runs: Sequence[Run], options: AnalyzeOptions) -> Analysis:
    """jaem's analysis of `runs` with the measures of `options` (its `era` scorer object, else its era_model)."""
    lexicon = load_vad_lexicon(options.vad_lexicon) if options.vad_lexicon else None
    era = options.era
    era_name = options.era_model or (type(era).__name__ if era is not None else None)
    if era is None and options.era_model:
        era = HFEraScorer(parse_era_models(options.era_model), batch_size=options.era_batch_size)
    samples = {run.name: sample_metrics(run.rows, lexicon, era) for run in runs}
    named = {run.name: measure_names(samples[run.name], run.config) for run in runs}
    effects = {name: tables.effects(s) for name, s in samples.items()}
    per_value = _with_measure(tables.stack({name: values for name, (values, _) in effects.items()}), named)
    per_attr = _with_measure(tables.stack({name: omnibus for name, (_, omnibus) in effects.items()}), named)
    sections = [headline_section(headlines(samples), runs), *_per_run(runs, samples, named, per_value, per_attr)]
    if len(runs) > 1:
        sections.append(_across(samples, named, per_value, per_attr))
    measures = {"vad_lexicon": None if lexicon is None else
                {"source": lexicon.source, "sha256": lexicon.sha256, "scale": lexicon.scale, "demo": lexicon.demo,
                 "terms": len(lexicon.terms)}, "era_model": era_name}
    return Analysis("JaEm-ST: intersectional empathy", SOURCE, sections, _measures(lexicon, era_name),
                    _files(samples, named, per_value), record={"measures": measures})
