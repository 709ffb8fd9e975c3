"""Seed 000's analysis of one or more runs, declared: per run the statistics of every category and setting, Tables
2, 3, 6, 7, the answer rates, matrices and figures; across runs Table 2 by model and δ by setting per model."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from behavioral.analysis import Analysis, Figure, Run, Section, Table
from behavioral.analysis.caveats import few_parsed, joined, low_mass, refused
from behavioral.report.formats import cell, is_missing, literal, readable
from behavioral.analysis.headline import Headline, headline_section
from behavioral.suites.intergroup import distributions, figures, tables
from behavioral.suites.intergroup.setting_analysis import AnalyzeOptions, analyses_of, measure_of
from behavioral.suites.intergroup.corpus import emotions_drawn
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.strata import event_emotions
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting, setting_label

SOURCE = ("Seed 000: Hou, Daumé & Rudinger, *Language Models Predict Empathy Gaps Between Social In-groups and "
          "Out-groups* (NAACL 2025). The card (behavioral/suites/intergroup/README.md) lists every deviation.")
EXCLUSION = (
    "M0, M, the t-test mask and Tables 3/6/7: an event refused in any cell of the category and setting, \"a person\" "
    "included, is dropped from every cell; δ, its permutation test and the t-SNE: refusals in the \"a person\" "
    "row and column are ignored, on the matrix without \"a person\" z-scored on its own (the authors' notebook)"
)
# Columns of the rates table: its name and the per-analysis rate pooled over prompts.
RATES = (("parsable", "parsable_rate"), ("truncated", "truncated_rate"), ("numeric_mass", "numeric_mass_mean"),
         ("numeric_mass_above_half", "numeric_mass_share"), ("refused", "refusal_rate"))


def _weighted(analyses: Sequence[SettingAnalysis], attr: str) -> float:
    """Mean of a per-analysis rate over prompts, pooling categories; NaN where no analysis measured it."""
    pairs = [(getattr(a, attr), a.n_prompts) for a in analyses if getattr(a, attr) is not None and a.n_prompts]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else float("nan")


def rates(per_run: Mapping[str, Sequence[SettingAnalysis]]) -> Table:
    """Numeric-answer and refusal rates per run and setting, pooled over categories."""
    rows = []
    for run, analyses in per_run.items():
        for setting in SETTING_NAMES:
            group = [a for a in analyses if a.setting == setting]
            if group:
                excluded = sum(int((~a.keep).sum()) for a in group) / sum(len(a.keep) for a in group)
                rows.append({"run": run, "setting": setting, "prompts": sum(a.n_prompts for a in group),
                             "missing": sum(a.n_missing for a in group),
                             **{name: _weighted(group, attr) for name, attr in RATES}, "events_excluded": excluded})
    frame = pd.DataFrame(rows)
    frame = frame[[c for c in frame.columns if not frame[c].isna().all()]]  # a rate no run measured
    return Table("rates", "Numeric answers and refusals per setting, pooled over categories", frame,
                 formats={name: "percent" for name, _ in RATES} | {"events_excluded": "percent", "prompts": "count",
                                                                   "missing": "count"})


RATES_TEXT = (
    "*prompts*: prompts with a result row; *missing*: prompts of the run's plan without one (a partial run, analyzed "
    "with --allow-partial: they count as refused); *parsable*: generated responses holding a parsable number; *truncated*: generated responses that reached "
    "--max-new-tokens before the answer was decided or the turn ended; *numeric_mass*: mean probability that the "
    "model's unconstrained first answer token starts a number (and the share of prompts where it exceeds 0.5); "
    "*refused*: prompts with no value of the measure (refused or no parsable number); *events_excluded*: events "
    "dropped from every cell because some cell refused them.")


GAP_NOTE = ("one row per category and setting, as Table 2 reports them (it pools none); the interval covers which "
            "events were sampled, not the choice of identities, prompts or decoding")
DELTA_NOTE = ("no interval over events: with few events the event noise in σ(M⁰) shrinks δ (noise_share {share}); "
              "compare δ only between runs with the same events, else the gap in points; its permutation test, "
              "within these events, is in Table 2")


def _warning(numeric, refusals) -> str:
    """What makes one category and setting's numbers doubtful: little probability on numbers (score mode), few
    parsable replies (generate mode), many events excluded (rows of the numeric-answer table and Table 6)."""
    return joined((low_mass(numeric.numeric_mass_mean_pct / 100, numeric.numeric_mass_above_half_pct / 100, "numbers"),
                   low_mass(numeric.answer_mass_mean_pct / 100, None, "ratings in range",
                            of="the probability of a whole answer"),
                   few_parsed(numeric.parsable_pct / 100, "a rating"),
                   refused(refusals.excluded_events_delta_pct / 100, "events")))


def _units(r) -> str:
    """What a Table 2 row's interval is over: its events, or its clusters of events, and their emotions where they
    lack some of the corpus's ("2 events of these emotions (anger 1, disgust 1; 2 of the corpus's 12)")."""
    events = f"{r.n_events} events"
    events = events if is_missing(r.n_clusters) else f"{int(r.n_clusters)} clusters of {events}"
    return events if r.covers_corpus or not r.emotions else f"{events} of these emotions ({r.emotions})"


def _gap_note(r) -> str:
    """The gap's note: what its interval covers, and p gap with the size its test was measured to have."""
    if is_missing(r.p_gap):
        return GAP_NOTE
    units = f"{r.n_events} events" if is_missing(r.n_clusters) else f"{int(r.n_clusters)} clusters"
    size = ("its size was not measured with so few" if is_missing(r.p_gap_size) else
            f"on synthetic null runs of {units} it fell below 0.05 in up to {cell(r.p_gap_size, 'p')} of them")
    return f"{GAP_NOTE}; p gap {cell(r.p_gap, 'p')}: {size} (docs/BENCHMARKS.md)"


def headlines(frames: Mapping[str, pd.DataFrame]) -> list[Headline]:
    """Per run, category and setting of Table 2 (`frames`: the tidy frames by table name): the gap in points with its
    t-interval over the events, and δ over the same events, which has no interval; each with the setting's
    warning."""
    rows = []
    for r, numeric, refusals in zip(*(frames[name].itertuples(index=False) for name in (
            "table2_delta", "numeric_rate", "table6_refusal"))):
        where, events, warned = f"{r.category} {r.setting}", int(r.n_events), _warning(numeric, refusals)
        interval = "none" if is_missing(r.gap_points_low) else f"95% t-interval over {_units(r)}"
        rows += [Headline(r.run, f"gap in points ({r.measure}), {where}", r.gap_points, r.gap_points_low,
                          r.gap_points_high, interval, events, "events", r.note or _gap_note(r), warned),
                 Headline(r.run, f"δ ({r.measure}), {where}", r.delta, math.nan, math.nan, "none", events, "events",
                          r.note or DELTA_NOTE.format(share=cell(r.noise_share)), warned)]
    return rows


def _scoring(run: str, analyses: Sequence[SettingAnalysis], mode: str | None, measure: str) -> str:
    """Why intensities come from the distribution over valid answers, with the measured numeric mass."""
    if mode != "score" and measure == "intensity":
        return ""
    scales = " or ".join(f"0..{m}" for m in sorted({get_setting(a.setting).max_rating for a in analyses},
                                                     reverse=True))
    mass, share = _weighted(analyses, "numeric_mass_mean"), _weighted(analyses, "numeric_mass_share")
    text = (f"**{literal(run)}**: intensities come from the model's probability distribution over the valid answers "
            f"{scales}, read in a tree-masked forward pass over every valid answer string, not from free generation: "
            "`intensity` is the answer greedy decoding reaches when made to start with a number (the same number "
            "plain greedy generation gives wherever that generation starts with one), `expected_intensity` the mean "
            f"of the distribution. This analysis uses `{measure}`. ")
    if pd.isna(mass):
        return text + "The run recorded no numeric mass, so how often the model answers with a number is not known."
    verdict = ("mostly does not answer with a number, which is why the scores are read from the distribution"
               if share < 0.5 else "mostly starts its answer with a number")
    return text + (f"Under plain greedy decoding this model {verdict}: the probability that its unconstrained first "
                   f"answer token starts a number averages {cell(mass, 'percent')} and exceeds 0.5 for "
                   f"{cell(share, 'percent')} of prompts.")


def _notes(options: AnalyzeOptions, measures: Mapping[str, str]) -> list[str]:
    """How the statistics were computed where the authors' notebook leaves a choice (`measures`: run -> its
    measure)."""
    rounding = (f"M⁰ cells are rounded to {options.round_cells} decimals before z-scoring, as the authors' notebook "
                "does." if options.round_cells is not None else
                "M⁰ cells are not rounded (the authors' notebook rounds each cell to 2 decimals before z-scoring; "
                "`--round-cells 2` reproduces their printed digits).")
    tsne = figures.tsne_settings()
    params = ", ".join(f"{k}={readable(v)}" for k, v in sorted(tsne["params"].items()))
    return [f"Exclusion: {EXCLUSION}.", f"Rounding: {rounding}",
            f"Figure 4 (t-SNE of the perceiver rows of δ's matrix): scikit-learn {tsne['sklearn']}, {params}.",
            f"Measure: {_measures_text(options, measures)}; permutations: {options.permutations} (seed "
            f"{options.seed}).",
            "Runs are compared on the same scale only where they share settings and measure: δ is z-scored within "
            "each run, category and setting, so it compares gaps relative to each run's own spread of ratings."]


def _measures_text(options: AnalyzeOptions, measures: Mapping[str, str]) -> str:
    """The measure as the notes state it: the one asked for, else each run's by its mode."""
    if options.measure is not None:
        return f"`{options.measure}`"
    used = set(measures.values())
    each = f"`{used.pop()}`" if len(used) == 1 else ", ".join(f"{literal(r)} `{m}`" for r, m in measures.items())
    return f"{each} (none asked for: the default for the run's mode)"


def _figures(run: Run, analyses: Sequence[SettingAnalysis], several: bool) -> list[Figure]:
    """The run's heatmaps and t-SNE plots, named by the run where there are several."""
    prefix = f"figures/{run.stem}_" if several else "figures/"
    return [Figure(f"{prefix}{name}", title, fig) for name, title, fig in figures.figures(analyses)]


DISTRIBUTIONS_TEXT = (
    "The toolkit's addition, for runs that scored the answer set: the mean distribution over the ratings behind the "
    "expected intensity, for δ's in-group and out-group cells (the mean is what `--measure expected_intensity` "
    "averages; the mode is what the greedy answer mostly is), and each cell's distribution in "
    "distributions/cells.csv. The figures set them side by side, pooled over δ's cells and for the perceiver whose "
    "own cell departs most from its row's out-group cells. Distributions are of the scored answer set, renormalised: "
    "they say nothing about the probability of not answering with a number (see numeric_mass).")


def _distribution_figures(runs: Sequence[Run], cells: Mapping, several: bool) -> list[Figure]:
    """Per run, category and setting with stored distributions, the in-group against out-group figure."""
    out = []
    for run in runs:
        analyses, dists = cells[run.name]
        prefix = f"figures/{run.stem}_" if several else "figures/"
        for a in analyses:
            fig = distributions.figure(a, dists)
            if fig is not None:
                out.append(Figure(f"{prefix}distributions_{a.category.name}_{a.setting}",
                                  f"Answer distributions, {a.category.title}, {setting_label(a.setting)}", fig))
    return out


def analysis(runs: Sequence[Run], options: AnalyzeOptions) -> Analysis:
    """Seed 000's analysis of `runs` (each complete, or partial where the reader allowed it)."""
    per_run = {run.name: analyses_of(run.run_dir, run.config, run.rows, options, not run.completeness.complete)
               for run in runs}
    several = len(runs) > 1
    table_list = tables.tables(per_run)
    measures = {run.name: measure_of(run.config, options.measure) for run in runs}
    scoring = [t for run in runs if (t := _scoring(run.name, per_run[run.name], run.config.get("mode"),
                                                    measures[run.name]))]
    missing = [f"- {literal(run)}, {a.category.title}, {setting_label(a.setting)}: {note}"
               for run, analyses in per_run.items() for a in analyses for note in a.notes]
    frames = {t.name: t.frame for t in table_list}
    table2 = frames["table2_delta"]
    sections = [headline_section(headlines(frames), runs),
                Section("Numeric answers and refusals", "\n\n".join([RATES_TEXT, *scoring]), (rates(per_run),))]
    if missing:
        sections.append(Section("Statistics not available", "\n".join(missing)))
    sections.append(Section("Tables", "A row per run, category and setting; \"How to read the tables\" below defines "
                                      "each column.", tuple(table_list)))
    if several:
        sections.append(Section("Across runs", "δ per setting and run; bars: the 95% interval of each δ's "
                                               "permutation null (where δ lies above it, p < 0.025).",
                                figures=(Figure("figures/delta_by_setting", "δ by setting per run",
                                                figures.delta_by_setting(table2)),)))
    sections.append(Section("Figures", "", figures=tuple(f for run in runs
                                                          for f in _figures(run, per_run[run.name], several))))
    cells = {run.name: (per_run[run.name], distributions.cell_distributions(run.rows)) for run in runs}
    shown = distributions.tables(cells)
    if shown is not None:
        sections.append(Section("Answer distributions", DISTRIBUTIONS_TEXT, (shown[1],),
                                tuple(_distribution_figures(runs, cells, several))))
    return Analysis("Empathy-gap analysis", SOURCE, sections, _notes(options, measures),
                    files=[*tables.matrices(per_run), *(shown[:1] if shown else ())],
                    record={"exclusion": EXCLUSION, "tsne": figures.tsne_settings(), "measures": measures,
                            "prompts_missing": {r: sum(a.n_missing for a in an) for r, an in per_run.items()},
                            "emotions_drawn": {run.name: emotions_drawn(event_emotions(run.rows).values())
                                               for run in runs}})
