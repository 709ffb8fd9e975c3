"""Seed 001's options and what the suite declares without its data or analysis: the item source, prompt types,
categories, sample and swaps that decide a run's rows, and the name, run defaults, capture kinds and flags of
`empathy-gap run giebench` and `empathy-gap import giebench`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from behavioral.core.options import check_bounds, option
from behavioral.suite.protocol import CaptureSpec, SuiteDeclaration, local_path
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.prompts import PROMPT_TYPES

MAX_NEW_TOKENS = 1024  # the authors allowed 8192
USER = "user"  # the capture kind of the group a COT or ID prompt names as the user's


@dataclass(frozen=True)
class Options:
    """What decides a GIEBench run's rows: the item source, prompt types, categories, sample and swaps."""

    data: str | None = option(None, "the authors' release folder (COT-Prompt.json, ID-Prompt.json, "
                                    "Raw-Prompt.json); neither --data nor --items: the project's 44 items",
                              metavar="DIR")
    items: str | None = option(None, "a JSONL file of items: id, category, identity, question, answers, correct",
                               metavar="FILE")
    prompt_types: tuple[str, ...] = option(PROMPT_TYPES, "the prompt types", choices=PROMPT_TYPES, fold=str.lower,
                                           metavar="TYPE")
    categories: tuple[str, ...] = option(CATEGORIES, "the identity categories", choices=CATEGORIES, fold=str.lower,
                                         metavar="CATEGORY")
    limit_items: int | None = option(None, "seeded sample of N items, stratified by category", metavar="N")
    swap: str = option("none", 'identity swaps: none, paper (Tables 3 and 7) or "Si=Sj;..." (S_i\'s prompts name '
                               "S_j)", metavar="SWAPS")

    def __post_init__(self):
        if self.data and self.items:
            raise ValueError("--data and --items both given; expected one source of items")
        for t in self.prompt_types:
            if t not in PROMPT_TYPES:
                raise ValueError(f"unknown --prompt-types {t!r}; expected one of {', '.join(PROMPT_TYPES)} or all")
        for c in self.categories:
            if c not in CATEGORIES:
                raise ValueError(f"unknown --categories {c!r}; expected one of {', '.join(CATEGORIES)} or all")
        if self.limit_items is not None and self.limit_items < 1:
            raise ValueError(f"--limit-items must be a positive number of items, got {self.limit_items}")
        check_bounds(self)
        object.__setattr__(self, "prompt_types", tuple(self.prompt_types))
        object.__setattr__(self, "categories", tuple(self.categories))
        object.__setattr__(self, "data", local_path(self.data))
        object.__setattr__(self, "items", local_path(self.items))


FIELDS = ("question_id", "prompt_type", "category", "identity", "swap_to", "correct")  # a run's item columns


class GieBenchDeclaration(SuiteDeclaration):
    """Seed 001's name, options, decoding limit, capture kinds and import of the authors' results."""

    name = "giebench"
    fields = FIELDS  # item fields stored as columns
    description = "seed 001: pick the answer that fits a user's group (COT, ID, Raw prompts), accuracy and shifts"
    # `user`: the group an unswapped COT or ID prompt names, decided up to its end by the prompt type and the group
    # (every prompt of a type opens alike; Raw and swap prompts have no `identity` slot). A final-token cell pools
    # the questions of one group under one prompt type.
    capture = CaptureSpec(spans={USER: ("identity", ("prompt_type", "identity"))}, cell=("prompt_type", "identity"))
    Options = Options
    run_defaults = {"max_new_tokens": MAX_NEW_TOKENS}
    imports = "the authors' result files (*-COT-Prompt.json, *-ID-Prompt.json, *-Raw-Prompt.json with 'answer')"

    def add_import_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--results", required=True, help="folder of the authors' result JSON files")
        parser.add_argument("--name", required=True, help="the model's name in tables (and in the file names)")
        parser.add_argument("--out", required=True, help="new run directory")


DECLARATION = GieBenchDeclaration()
