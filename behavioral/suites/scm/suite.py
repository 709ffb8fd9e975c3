"""Seed 004 as a suite: every (template, group, trait) question of Tables 1, 2 and 6, answered A-E."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from behavioral.suite import Suite, comma_values
from behavioral.suites.scm.groups import GROUPS, group_set
from behavioral.suites.scm.items import FIELDS, ScmItem, items
from behavioral.suites.scm.prompts import TEMPLATES, check_template
from behavioral.suites.scm.traits import TRAITS, check_trait



@dataclass(frozen=True)
class Options:
    """What decides an scm run's items: the group set, traits (Table 2) and templates (Table 6)."""

    groups: str = "seed"
    traits: tuple[str, ...] = tuple(TRAITS)
    templates: tuple[str, ...] = TEMPLATES

    def __post_init__(self):
        group_set(self.groups)
        for flag, names, known in (("--traits", self.traits, "Table 2's traits (" + ", ".join(TRAITS) + ")"),
                                   ("--templates", self.templates, "Table 6's question ids f01..f10, i01..i10")):
            if not names:
                raise ValueError(f"{flag} names none; expected a comma list of {known}, or no {flag} for all")
        for name in self.traits:
            check_trait(name)
        for name in self.templates:
            check_template(name)
        object.__setattr__(self, "traits", tuple(self.traits))
        object.__setattr__(self, "templates", tuple(self.templates))


class Scm(Suite):
    """Seed 004: stereotype content (warmth, competence) of 50 intersectional groups, fidelity to human raters."""

    name = "scm"
    description = "seed 004: stereotype content A-E ratings of groups × traits, W1 fidelity to humans, FPR, quadrants"
    fields = FIELDS
    Options = Options
    # the seed's sampling: raw text, temperature 1, two samples per template (its two runs); replies are short (a
    # letter, cut at the first `###`)
    run_defaults = {"prompt_format": "plain", "temperature": 1.0, "samples": 2, "max_new_tokens": 16}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--groups", default="seed", choices=tuple(GROUPS),
                            help="seed: Table 1's 50 groups; us-stereotypes: the 16 groups of the shipped ratings")
        parser.add_argument("--traits", help="comma list of Table 2's traits (default: all 20)")
        parser.add_argument("--templates", help="comma list of Table 6's question ids f01..f10, i01..i10 "
                                                "(default: all 20)")
        parser.add_argument("--format", dest="prompt_format", choices=("plain", "chat"),
                            help="plain (default, as the seed): the raw text; chat: one user turn, no system message "
                                 "(same as --prompt-format)")
        parser.add_argument("--samples-per-template", dest="samples", type=int,
                            help="sampled replies per item (default 2, the seed's two runs; 1 with --mode score; "
                                 "same as --samples)")

    def options(self, args: argparse.Namespace) -> Options:
        return Options(groups=args.groups,
                       traits=tuple(TRAITS) if args.traits is None else tuple(comma_values(args.traits)),
                       templates=TEMPLATES if args.templates is None else tuple(comma_values(args.templates)))

    def dataset(self, config) -> list[ScmItem]:
        options = config.options or Options()
        return items(group_set(options.groups), options.traits, options.templates)

    def facts(self, data: list[ScmItem]) -> dict:
        return {"n_items": len(data), "n_groups": len({i.group.name for i in data})}

    def groups(self, data: list[ScmItem]) -> Iterable[tuple[str, list[ScmItem]]]:
        """One group per (template, group): its traits share the prompt up to the question's first slot."""
        cells: dict[str, list[ScmItem]] = {}
        for item in data:
            cells.setdefault(f"{item.template}|{item.group.name}", []).append(item)
        return cells.items()

    def add_analyze_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--human", help="us-stereotypes or a CSV of group,trait,rater,rating (default: "
                                            "us-stereotypes for that group set; none for the seed's groups)")
        parser.add_argument("--measure", choices=("samples", "score"),
                            help="what a --mode both run is read by (default samples; generate and score runs are "
                                 "read by their own)")

    def analyze(self, run_dirs: Sequence[Path], out: Path | None, args: argparse.Namespace) -> Path:
        from behavioral.suites.scm.analysis import analyze

        return analyze(run_dirs, out, human=args.human, measure=args.measure, allow_partial=args.allow_partial)


SUITE = Scm()
