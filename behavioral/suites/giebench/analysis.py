"""GIEBench's analysis, declared: items and answer rates, accuracy (and the paper's denominators), shifts and swaps of
every run, the paper's Tables 1, 2, 6 and 4, 5 across runs where there are several, figures and method notes;
behavioral.analysis writes them."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from behavioral.analysis import Analysis, Run, Section, Table
from behavioral.suites.giebench import figures, metrics
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.prompts import PROMPT_TYPES

TITLE = "GIEBench analysis"
SOURCE = ("Seed 001: Wang et al., *GIEBench: Towards Holistic Evaluation of Group Identity-based Empathy for Large "
          "Language Models* (arXiv 2406.14903). The card (behavioral/suites/giebench/README.md) lists every deviation "
          "from the authors.")
NOTES = (
    "The answer (the suite's view): a generate row selects the letter of eval.py's verdict rule in the reply; a score "
    "row the most probable of A..D after the prefilled `[[` (`argmax_letter`, ties to the earliest); a `both` run is "
    "analysed as one run of each mode (`mode`).",
    "`accuracy` = correct / n per category and Overall; a reply without a verdict, or naming another letter, is wrong "
    "and stays in the denominator.",
    "`accuracy_paper`: the paper's tables fit the authors' first eval.py, which counted each category's first item "
    "twice: correct / (n + 1) per category, rounded to 3 places; Overall correct / N.",
    "`shift` = accuracy(type) − accuracy(raw) in points, items paired by id; `shift_paper` the difference of the "
    "rounded paper accuracies; `plus`: items right under the type and wrong under Raw, `minus` the reverse; "
    "`mcnemar_p` the exact two-sided McNemar test on them (our addition; the paper has no test).",
    "A swap (S_i, S_j): S_i's COT and ID prompts name S_j and are scored against S_i's correct letter; `no_mismatch` "
    "is the unswapped COT accuracy (our reading of the paper's column), `id` the unswapped ID accuracy.",
)
CATEGORY_COLUMNS = (*CATEGORIES, metrics.OVERALL)
PERCENT = dict.fromkeys(CATEGORY_COLUMNS, "percent")
SETTING_ORDER = {"generate": 0, "score": 1, **{t: k for k, t in enumerate(PROMPT_TYPES)}}


def wide(frame: pd.DataFrame, value: str) -> pd.DataFrame:
    """`value` of rows run × mode × prompt type × category as the paper's tables: categories as columns."""
    table = frame.pivot_table(index=["run", "mode", "prompt_type"], columns="category", values=value, sort=False)
    return table[[c for c in CATEGORY_COLUMNS if c in table.columns]].reset_index()


def by_setting(table: pd.DataFrame) -> pd.DataFrame:
    """A wide table laid out as the paper's across models: per mode and prompt type, a row per run."""
    table = table[["mode", "prompt_type", "run", *table.columns.drop(["mode", "prompt_type", "run"])]]
    return table.sort_values(["mode", "prompt_type"], key=lambda column: column.map(SETTING_ORDER), kind="stable",
                             ignore_index=True)


def _items(runs: Sequence[Run], rows: pd.DataFrame) -> Section:
    lines = [f"- **{run.name}**: {run.config.get('n_items')} items from "
             f"`{run.config.get('imported_from') or run.config.get('items_source')}`" for run in runs]
    first = runs[0].rows
    counts = first[first["prompt_type"] == first["prompt_type"].iloc[0]].drop_duplicates("item_id")["category"]
    answers = Table("answers", "Answers read per run and mode", metrics.answer_rates(rows),
                    {"n": "count", "with_verdict": "percent"},
                    note="`with_verdict`: replies holding a verdict eval.py reads (the others count as wrong); "
                         "`letter_mass`: mean mass of the four letters after `[[` before renormalising.")
    return Section("Items and answers", "\n".join(lines), (answers,),
                   (figures.category_shares(counts.value_counts()),))


def _accuracy(acc: pd.DataFrame) -> Section:
    tables = [Table("accuracy", "Accuracy (correct / n; Tables 1, 2, 6)", wide(acc, "accuracy"), PERCENT),
              Table("accuracy_paper", "Accuracy as the paper computed it (correct / (n + 1) per category)",
                    wide(acc, "accuracy_paper"), PERCENT)]
    scored = acc[acc["mode"] == "score"]
    if not scored.empty:
        tables.append(Table("p_correct", "Mean probability of the correct letter (score mode)",
                            wide(scored, "p_correct"), PERCENT))
    cot = (figures.cot_accuracy(acc),) if (acc["prompt_type"] == "cot").any() else ()
    return Section("Accuracy (Tables 1, 2, 6)", "Rows run × mode × prompt type, categories as columns.",
                   tuple(tables), cot)


def _shift(shifts: pd.DataFrame) -> Section:
    table = Table("shift", "Shift from Raw (Tables 4, 5)", shifts,
                  {"n": "count", "shift": "points", "shift_paper": "points", "plus": "count", "minus": "count",
                   "mcnemar_p": "p"})
    return Section("Shift from Raw (Tables 4, 5)", "Points; `plus`/`minus`: items gained/lost against Raw.",
                   (table,), tuple(figures.shift_heatmaps(shifts)))


def _swap(swaps: pd.DataFrame) -> Section:
    table = Table("swap", "Identity swaps (Tables 3, 7)", swaps,
                  {"n": "count", "cot_swap": "percent", "id_swap": "percent", "no_mismatch": "percent",
                   "id": "percent"})
    return Section("Identity swaps (Tables 3, 7)", "S_i's COT and ID prompts name S_j; the correct letter is S_i's.",
                   (table,))


def _comparison(acc: pd.DataFrame, shifts: pd.DataFrame) -> Section:
    tables = [Table("compare_accuracy", "Accuracy across runs (the layout of Tables 1, 2, 6: a row per run)",
                    by_setting(wide(acc, "accuracy")), PERCENT)]
    if not shifts.empty:
        tables.append(Table("compare_shift", "Shift from Raw across runs (the layout of Tables 4, 5: a row per run)",
                            by_setting(wide(shifts, "shift")), dict.fromkeys(CATEGORY_COLUMNS, "points")))
    return Section("Across runs", "Per mode and prompt type, one row per run.", tuple(tables))


def analyze(runs: Sequence[Run]) -> Analysis:
    """The analysis of GIEBench runs: every run's tables (a `run` column), their comparison where there are two or
    more, figures and notes."""
    rows = pd.concat([run.rows.assign(run=run.name) for run in runs], ignore_index=True)
    acc = metrics.accuracy(rows)
    shifts = metrics.shift(rows, acc)
    swaps = metrics.swap(rows)
    counts = Table("accuracy_counts", "Correct, n and accuracy per run, mode, prompt type and category (tidy)", acc,
                   {"correct": "count", "n": "count", "accuracy": "percent", "accuracy_paper": "percent",
                    "p_correct": "percent"})
    sections, files = [_items(runs, rows), _accuracy(acc)], [counts]
    for section in (_shift(shifts), _swap(swaps)):
        if section.tables[0].frame.empty:  # runs without Raw or without swaps: the empty table, written unprinted
            files.append(section.tables[0])
        else:
            sections.append(section)
    sections += [_comparison(acc, shifts)] if len(runs) > 1 else []
    return Analysis(TITLE, SOURCE, sections, list(NOTES), files=files)
