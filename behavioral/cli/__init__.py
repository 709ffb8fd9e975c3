"""The command line, `empathy-gap` (`python -m behavioral.cli`): run, analyze, sweep, export and the studies."""

from behavioral.cli.commands import main

__all__ = ["main"]
