"""The command line: `python -m app ...` (`app.cli:main`)."""

from app.cli.commands import main

__all__ = ["main"]
