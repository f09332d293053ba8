"""The command line: `python -m manga_page_analysis ...` (`manga_page_analysis.cli:main` returns the exit code;
`manga_page_analysis.cli:run` is the console entry point that exits with it)."""

from manga_page_analysis.cli.commands import main, run

__all__ = ["main", "run"]
