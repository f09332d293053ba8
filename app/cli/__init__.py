"""The command line: `python -m app ...` (`app.cli:main` returns the exit code;
`app.cli:run` is the console entry point that exits with it)."""

from app.cli.commands import main, run

__all__ = ["main", "run"]
