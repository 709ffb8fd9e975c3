"""GIEBench's analysis, declared: items and answer rates, accuracy (and the paper's denominators), shifts and swaps of
every run, the paper's Tables 1, 2, 6 and 4, 5 across runs where there are several, figures and method notes;
behavioral.analysis writes them. Every table names its measure (the answer it reads) in a `measure` column; each
accuracy carries n and its Wilson interval over the questions, each shift its bootstrap interval over the paired
questions and McNemar's p its Holm adjustment (our additions)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from behavioral.analysis import Analysis, Run, Section, Table
from behavioral.analysis.caveats import few_parsed, joined, low_mass, one_answer
from behavioral.report.formats import code_span, literal
from behavioral.analysis.headline import Headline, headline_section
from behavioral.core.options import SEED, check_bounds, option
from behavioral.suites.giebench import figures, metrics
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.prompts import PROMPT_TYPES
from behavioral.suites.giebench.results import measure_name

TITLE = "GIEBench analysis"
SOURCE = ("Seed 001: Wang et al., *GIEBench: Towards Holistic Evaluation of Group Identity-based Empathy for Large "
          "Language Models* (arXiv 2406.14903). The card (behavioral/suites/giebench/README.md) lists every deviation "
          "from the authors.")
NOTES = (
    "The answer (the suite's view): a generate row selects the letter of `eval.py`'s verdict rule in the reply; a "
    "score row the most probable of A..D after the prefilled `[[` (`argmax_letter`, ties to the earliest); a `both` "
    "run is analysed as one run of each mode (`mode`), and every table names the answer it reads in `measure`.",
    "`accuracy` = correct / n per category and Overall; a reply without a verdict, or naming another letter, is wrong "
    "and stays in the denominator.",
    "`accuracy_paper`: the paper's tables fit the authors' first `eval.py`, which counted each category's first item "
    "twice: correct / (n + 1) per category, rounded to 3 places; Overall correct / N.",
    "`shift` = accuracy(type) − accuracy(raw) in points, items paired by id; `shift_paper` the difference of the "
    "rounded paper accuracies; `plus`: items right under the type and wrong under Raw, `minus` the reverse; "
    "`mcnemar_p` the exact two-sided McNemar test on them (our addition; the paper has no test).",
    "A swap (S_i, S_j): S_i's COT and ID prompts name S_j and are scored against S_i's correct letter; `no_mismatch` "
    "is the unswapped COT accuracy (our reading of the paper's column), `id` the unswapped ID accuracy.",
    "Our additions for reading the numbers: each accuracy's 95% Wilson interval over its n questions (a proportion "
    "of independent questions; none where a question has several sampled replies), each shift's 95% percentile "
    "bootstrap interval over resamples of its paired questions, and `mcnemar_p_holm`, Holm over the categories and "
    "Overall of one run, mode and prompt type. They cover which questions were drawn, not the choice of prompts, "
    "identities or the judge's decoding.",
)
CATEGORY_COLUMNS = (*CATEGORIES, metrics.OVERALL)
PERCENT = dict.fromkeys(CATEGORY_COLUMNS, "percent")
SETTING_ORDER = {"generate": 0, "score": 1, **{t: k for k, t in enumerate(PROMPT_TYPES)}}
INDEX = ["run", "mode", "measure", "prompt_type"]
ACCURACY_INTERVAL = {"_low": "accuracy_low", "_high": "accuracy_high", "_n": "n"}
SHIFT_INTERVAL = {"_low": "shift_low", "_high": "shift_high", "_n": "n"}
def _wide_formats(fmt: str, interval: str) -> dict:
    """A wide table's formats and definitions: each category's value and interval ends in `fmt`, its n as a count,
    and what the suffixed columns hold (`interval` names the interval)."""
    formats = {f"{c}{s}": fmt for c in CATEGORY_COLUMNS for s in ("", "_low", "_high")}
    return {"formats": formats | {f"{c}_n": "count" for c in CATEGORY_COLUMNS},
            "definitions": {"<category>_low, <category>_high": interval,
                            "<category>_n": "the questions it is over."}}


WIDE_ACCURACY = _wide_formats("percent", "the accuracy's 95% Wilson interval over the questions.")
WIDE_SHIFT = _wide_formats("points", "the shift's 95% percentile bootstrap interval over the paired questions.")
SHIFT_NOTE = ("the interval covers which questions were drawn, not the choice of prompts or identities, the judge's "
              "decoding or the authors' correct letters")



@dataclass(frozen=True)
class AnalyzeOptions:
    """How GIEBench's analysis draws each shift's interval: resamples of the paired questions and their seed."""

    bootstrap: int = option(1000, "resamples of the paired questions (with replacement) for each shift's percentile "
                                  "interval", metavar="N", minimum=1)
    seed: int = option(0, "seed of the resamples", name="--bootstrap-seed", metavar="N", **SEED)

    def __post_init__(self):
        check_bounds(self)


def with_measure(frame: pd.DataFrame, measures: Mapping[tuple[str, str], str]) -> pd.DataFrame:
    """`frame` (run and mode columns) with the measure of each run and mode after `mode`."""
    frame = frame.copy()
    frame.insert(frame.columns.get_loc("mode") + 1, "measure",
                 [measures[(run, mode)] for run, mode in zip(frame["run"], frame["mode"])])
    return frame


def wide(frame: pd.DataFrame, value: str, extra: Mapping[str, str] | None = None) -> pd.DataFrame:
    """`value` of rows run × mode × prompt type × category as the paper's tables: categories as columns, each
    followed by its `extra` columns (suffix -> the tidy column it holds, e.g. `_low` -> `accuracy_low`), named
    category + suffix."""
    extra = extra or {}
    rows = []
    for key, group in frame.groupby(INDEX, sort=False):
        cells = group.set_index("category")
        rows.append(dict(zip(INDEX, key)) | {f"{c}{suffix}": cells.at[c, column] for c in cells.index
                                             for suffix, column in {"": value, **extra}.items()})
    present = [c for c in CATEGORY_COLUMNS if any(c in row for row in rows)]
    return pd.DataFrame(rows, columns=INDEX + [f"{c}{suffix}" for c in present for suffix in ("", *extra)])


def by_setting(table: pd.DataFrame) -> pd.DataFrame:
    """A wide table laid out as the paper's across models: per mode and prompt type, a row per run."""
    table = table[["mode", "prompt_type", "run", *table.columns.drop(["mode", "prompt_type", "run"])]]
    return table.sort_values(["mode", "prompt_type"], key=lambda column: column.map(SETTING_ORDER), kind="stable",
                             ignore_index=True)


def _items(runs: Sequence[Run], rows: pd.DataFrame, rates: pd.DataFrame) -> Section:
    lines = [f"- **{literal(run.name)}**: {literal(run.config.get('n_items'))} items from "
             f"{code_span(run.config.get('imported_from') or run.config.get('items_source'))}" for run in runs]
    first = runs[0].rows
    counts = first[first["prompt_type"] == first["prompt_type"].iloc[0]].drop_duplicates("item_id")["category"]
    answers = Table("answers", "Answers read per run and mode", rates, {"n": "count", "with_verdict": "percent"},
                    definitions={"with_verdict": "replies holding a verdict `eval.py` reads (the others count as "
                                                 "wrong).",
                                 "letter_mass": "mean mass of the four letters after `[[` before renormalising."})
    return Section("Items and answers", "\n".join(lines), (answers,),
                   (figures.category_shares(counts.value_counts()),))


def _accuracy(acc: pd.DataFrame) -> tuple[Section, list[Table]]:
    """The accuracy section (a row per run, mode, prompt type and category, with n and the Wilson interval; the
    paper's accuracies and, scored, the correct letter's probability, categories as columns) and the wide table
    written beside it."""
    counts = Table("accuracy_counts", "Accuracy per run, mode, prompt type and category (Tables 1, 2, 6)", acc,
                   dict.fromkeys(INDEX + ["category"], "text") | {
                       "correct": "count", "n": "count", "accuracy": "percent", "accuracy_low": "percent",
                       "accuracy_high": "percent"},
                   columns={c: c for c in (*INDEX, "category", "correct", "n", "accuracy", "accuracy_low",
                                           "accuracy_high")},
                   definitions={"measure": "the answer the row reads.",
                                "accuracy": "correct / n; a reply without a verdict, or naming another letter, is "
                                            "wrong and stays in n.",
                                "accuracy_low, accuracy_high": "its 95% Wilson interval over the n questions."})
    tables = [counts, Table("accuracy_paper", "Accuracy as the paper computed it, correct / (n + 1) per category",
                            wide(acc, "accuracy_paper"), PERCENT)]
    scored = acc[acc["mode"] == "score"]
    if not scored.empty:
        tables.append(Table("p_correct", "Mean probability of the correct letter after `[[` (score mode)",
                            wide(scored, "p_correct"), PERCENT))
    cot = (figures.cot_accuracy(acc),) if (acc["prompt_type"] == "cot").any() else ()
    wide_accuracy = Table("accuracy", "Accuracy with its Wilson interval and n, categories as columns (the layout of "
                          "Tables 1, 2, 6)", wide(acc, "accuracy", ACCURACY_INTERVAL), **WIDE_ACCURACY)
    return Section("Accuracy (Tables 1, 2, 6)", "Accuracy per category, then the paper's accuracies with categories as "
                   "columns.", tuple(tables), cot), [wide_accuracy]


def _shift(shifts: pd.DataFrame) -> Section:
    table = Table("shift", "Shift from Raw per run, mode, prompt type and category (Tables 4, 5)", shifts,
                  {"n": "count", "shift": "points", "shift_low": "points", "shift_high": "points",
                   "shift_paper": "points", "plus": "count", "minus": "count", "mcnemar_p": "p",
                   "mcnemar_p_holm": "p"},
                  definitions={"shift": "accuracy under the prompt type minus under Raw, in points, over the n "
                                        "questions paired by id.",
                               "shift_low, shift_high": "its 95% percentile bootstrap interval over the paired "
                                                        "questions.",
                               "shift_paper": "the difference of the paper's rounded accuracies.",
                               "plus, minus": "questions right under the type and wrong under Raw, and the reverse.",
                               "mcnemar_p": "the exact two-sided McNemar test on plus and minus (our addition).",
                               "mcnemar_p_holm": "Holm over the categories and Overall of one run, mode and prompt "
                                                 "type."})
    return Section("Shift from Raw (Tables 4, 5)", "Points; `plus`/`minus`: items gained/lost against Raw.",
                   (table,), tuple(figures.shift_heatmaps(shifts)))


def _swap(swaps: pd.DataFrame) -> Section:
    table = Table("swap", "Identity swaps (Tables 3, 7)", swaps,
                  {"n": "count"} | dict.fromkeys([c for c in swaps.columns if c.startswith(metrics.SWAP_ACCURACIES)],
                                                 "percent"),
                  definitions={"n": "the questions of S_i.",
                               "*_low, *_high": "each accuracy's 95% Wilson interval over the n questions."})
    return Section("Identity swaps (Tables 3, 7)", "S_i's COT and ID prompts name S_j; the correct letter is S_i's.",
                   (table,))


def _comparison(acc: pd.DataFrame, shifts: pd.DataFrame) -> list[Table]:
    """The paper's layout across runs (a row per run, mode and prompt type; each category's value, interval and n as
    columns), written beside the report, whose tables hold every run."""
    tables = [Table("compare_accuracy", "Accuracy across runs (the layout of Tables 1, 2, 6)",
                    by_setting(wide(acc, "accuracy", ACCURACY_INTERVAL)), **WIDE_ACCURACY)]
    if not shifts.empty:
        tables.append(Table("compare_shift", "Shift from Raw across runs (the layout of Tables 4, 5)",
                            by_setting(wide(shifts, "shift", SHIFT_INTERVAL)), **WIDE_SHIFT))
    return tables


def _warnings(rows: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Per run and mode, what makes its numbers doubtful: few replies with a verdict (generate), little mass on the
    four letters (score), one letter for almost every prompt."""
    rates = metrics.answer_rates(rows).set_index(metrics.RUN_KEYS)
    return {(run, mode): joined((few_parsed(rates.at[(run, mode), "with_verdict"], "a verdict"),
                                 low_mass(rates.at[(run, mode), "letter_mass"], None, "the four letters"),
                                 one_answer(part["answer_select"], "prompts")))
            for (run, mode), part in rows.groupby(metrics.RUN_KEYS, sort=False)}


def headlines(shifts: pd.DataFrame, named: Mapping[tuple[str, str], str], n_resamples: int,
              rows: pd.DataFrame) -> list[Headline]:
    """Per run and mode (`named`'s keys), the Overall shift from Raw of each identity-naming prompt type (COT, ID)
    with its bootstrap interval over the paired questions, and what makes it doubtful (from the result `rows`); a run
    and mode with no question paired with Raw gets a row without a number."""
    overall = shifts[shifts["category"] == metrics.OVERALL]
    warned = _warnings(rows)
    out = []
    for run, mode in named:
        mine = overall[(overall["run"] == run) & (overall["mode"] == mode)]
        out += [Headline(run, f"accuracy shift {r.prompt_type} − raw (share), Overall, {mode}", r.shift, r.shift_low,
                         r.shift_high, f"95% percentile bootstrap over {r.n} paired questions ({n_resamples} "
                         "resamples)", int(r.n), "questions", SHIFT_NOTE, warned.get((run, mode), ""))
                for r in mine.itertuples(index=False)] or \
               [Headline(run, f"accuracy shift (share), Overall, {mode}", math.nan, math.nan, math.nan, "none", 0,
                         "questions", "no shift: no question has a Raw and a COT or ID prompt",
                         warned.get((run, mode), ""))]
    return out


def measures(runs: Sequence[Run]) -> dict[tuple[str, str], str]:
    """(run, mode) -> the answer that run's rows of that mode read."""
    return {(run.name, mode): measure_name(mode, run.config) for run in runs for mode in run.rows["mode"].unique()}


def analyze(runs: Sequence[Run], options: AnalyzeOptions) -> Analysis:
    """The analysis of GIEBench runs: every run's tables (a `run` column), their comparison where there are two or
    more, figures and notes; `options`: the shifts' bootstrap."""
    rows = pd.concat([run.rows.assign(run=run.name) for run in runs], ignore_index=True)
    named = measures(runs)
    acc = with_measure(metrics.accuracy(rows), named)
    shifts = with_measure(metrics.shift(rows, acc, options.bootstrap, options.seed), named)
    swaps = with_measure(metrics.swap(rows), named)
    accuracy, files = _accuracy(acc)
    sections = [headline_section(headlines(shifts, named, options.bootstrap, rows), runs),
                _items(runs, rows, with_measure(metrics.answer_rates(rows), named)), accuracy]
    for section in (_shift(shifts), _swap(swaps)):
        if section.tables[0].frame.empty:  # runs without Raw or without swaps: the empty table, written unprinted
            files.append(section.tables[0])
        else:
            sections.append(section)
    files += _comparison(acc, shifts) if len(runs) > 1 else []
    return Analysis(TITLE, SOURCE, sections, list(NOTES), files=files)
