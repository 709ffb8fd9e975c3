"""The command line's argparse parser: bad input is one line, `empathy-gap: error: ...`, naming the flag and what was
expected (a misspelt flag: the command's own flag it is close to), and exit status 2, without the usage text that
argparse prints above its error; --help prints as argparse prints it."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import NoReturn

from behavioral.core.options import quoted

PROG = "empathy-gap"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose refusals are one line; its sub-commands' parsers are Parsers too."""

    def error(self, message: str) -> NoReturn:
        """Print one line and exit with status 2 (argparse's status for bad input)."""
        self.exit(2, f"{PROG}: error: {' '.join(message.split())}\n")

    def parse_args(self, args: Sequence[str] | None = None,
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """argparse's parse_args, where unknown arguments are refused (a long one cut) with the close flags of the
        command they were given to."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            given = " ".join(quoted(word) if len(word) > 40 else word for word in extra)
            self.error(f"unrecognized arguments: {given}{_suggestion(_chosen(self, parsed), extra)}")
        return parsed


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub-)command `args` were parsed by: `parser`, or the sub-command's it chose, recursively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return _chosen(action.choices[getattr(args, action.dest)], args)
    return parser


def _suggestion(parser: argparse.ArgumentParser, extra: Sequence[str]) -> str:
    """'; did you mean --x?' for the unknown flags among `extra` close to one of `parser`'s own, else ''."""
    own = [flag for flag in parser._option_string_actions if flag.startswith("--")]
    close = [match for word in extra if word.startswith("--")
             for match in difflib.get_close_matches(word.partition("=")[0], own, 1)]
    return f"; did you mean {', '.join(dict.fromkeys(close))}?" if close else ""
