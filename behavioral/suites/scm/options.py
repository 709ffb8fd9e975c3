"""Seed 004's options and what the suite declares without its data or analysis: the group set, traits and templates
that decide a run's items, and the name, the seed's run defaults, capture kinds and flags of `empathy-gap run scm`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from behavioral.core.options import option, whole_number
from behavioral.suite.protocol import CaptureSpec, SuiteDeclaration
from behavioral.suites.scm.groups import GROUPS, group_set
from behavioral.suites.scm.prompts import TEMPLATES, check_template
from behavioral.suites.scm.traits import TRAITS, check_trait

GROUP = "group"  # the capture kind of the group a question asks about


@dataclass(frozen=True)
class Options:
    """What decides an scm run's items: the group set, traits (Table 2) and templates (Table 6)."""

    groups: str = option("seed", "seed: Table 1's 50 groups; us-stereotypes: the 16 groups of the shipped ratings",
                         choices=tuple(GROUPS))
    traits: tuple[str, ...] = option(tuple(TRAITS), "comma list of Table 2's traits", metavar="TRAITS")
    templates: tuple[str, ...] = option(TEMPLATES, "comma list of Table 6's question ids f01..f10, i01..i10",
                                        metavar="TEMPLATES")

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


FIELDS = ("group", "trait", "template")


class ScmDeclaration(SuiteDeclaration):
    """Seed 004's name, options, sampling and names of two run flags, and capture kinds."""

    name = "scm"
    fields = FIELDS  # item fields stored as columns
    description = "seed 004: stereotype content A-E ratings of groups × traits, W1 fidelity to humans, FPR, quadrants"
    # `group`: the group a question asks about, decided up to its end by the phrasing (template), the trait (which
    # some phrasings put first) and the group. A final-token cell pools one group's question on one trait over the
    # phrasings.
    capture = CaptureSpec(spans={GROUP: ("identity", ("template", "trait", "group"))}, cell=("group", "trait"))
    Options = Options
    # the seed's sampling: raw text, temperature 1, two samples per template (its two runs); replies are short (a
    # letter, cut at the first `###`)
    run_defaults = {"prompt_format": "plain", "temperature": 1.0, "samples": 2, "max_new_tokens": 16}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The Options' flags, and the seed's names of two shared run flags (they set RunConfig fields, not
        Options, so no option declares them)."""
        super().add_arguments(parser)
        parser.add_argument("--format", dest="prompt_format", choices=("plain", "chat"),
                            help="plain (default, as the seed): the raw text; chat: one user turn, no system message "
                                 "(same as --prompt-format)")
        parser.add_argument("--samples-per-template", dest="samples", type=whole_number,
                            help="sampled replies per item (default 2, the seed's two runs; 1 with --mode score; "
                                 "same as --samples)")


DECLARATION = ScmDeclaration()
