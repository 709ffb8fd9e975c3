"""`empathy-gap interp STUDY RUN_DIR... [flags]`: the studies on the command line, each study's flags derived from
its Options (only the named study is imported)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from behavioral.core.options import add_flags, comma_values, from_flags
from behavioral.analysis.studies import get_study, study_names


def add_parser(sub: argparse._SubParsersAction, argv: Sequence[str]) -> None:
    """Add `interp` and a sub-command per study; the flags of the study `argv` names (or of all, for help)."""
    interp = sub.add_parser("interp", help="mechanistic studies of run directories with --capture "
                                           f"({', '.join(study_names())})")
    studies = interp.add_subparsers(dest="study", required=True, metavar="STUDY")
    # a study's flags (and its imports) only where the command line asks for that study or for help on all
    asked = argv[1] if argv[:1] == ["interp"] and len(argv) > 1 else ("-h" if argv[:1] == ["interp"] else None)
    for name in study_names():
        study = get_study(name) if asked in (name, "-h", "--help") else None
        p = studies.add_parser(name, help=study.description if study else None,
                               description=study.description if study else None)
        p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
        p.add_argument("--out", help="output directory (default RUN_DIR/interp/STUDY of the first run)")
        p.add_argument("--names", help="the runs' names in tables, comma-separated in the order of the run directories")
        p.add_argument("--allow-partial", action="store_true", help="read runs that have not finished every unit")
        p.add_argument("--no-progress", action="store_true")
        if study is not None and study.Options is not None:
            add_flags(p.add_argument_group(f"{name} options"), study.Options)


def run(args: argparse.Namespace) -> None:
    """Run the study the parsed `args` name and print where its report is."""
    from behavioral.analysis.study import run_study

    study = get_study(args.study)
    options = from_flags(study.Options, args) if study.Options is not None else None
    result = run_study(study, args.run_dirs, options, args.out, comma_values(args.names) or None, args.allow_partial,
                       progress=not args.no_progress)
    print(f"report in {result.report}")
