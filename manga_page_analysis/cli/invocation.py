"""How the person reading our output runs things here: the command's name as they
typed it (`manga-analysis` or `python -m manga_page_analysis`), `make` only in a
source checkout, and where the documentation is (the installed package carries
a copy, so a wheel user is never sent to a checkout's `docs/`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

CONSOLE_SCRIPT: Final = "manga-analysis"
"""The console script `pip install` puts on the PATH (pyproject.toml)."""
MODULE_COMMAND: Final = "python -m manga_page_analysis"


def command_name(argv0: str | None = None) -> str:
    """`manga-analysis` when that is what ran (`sys.argv[0]`), else the module form,
    which works wherever the package is importable."""
    program = Path(argv0 if argv0 is not None else (sys.argv[0] if sys.argv else "")).name
    return CONSOLE_SCRIPT if program.startswith(CONSOLE_SCRIPT) else MODULE_COMMAND


def command_line(command: str, *, make_target: str | None = None) -> str:
    """How to run `command` here: `make TARGET` in a checkout when there is one,
    else the command under the name it was run by (`manga-analysis demo`)."""
    from manga_page_analysis.migrations import in_checkout  # alembic: only when asked

    if make_target is not None and in_checkout():
        return f"make {make_target}"
    return f"{command_name()} {command}"


def command_text(command: str, *, make_target: str | None = None) -> str:
    """`command_line(...)` in backquotes, for a sentence."""
    return f"`{command_line(command, make_target=make_target)}`"


def docs_folder() -> Path:
    """The documentation's folder: the installed package's copy (`_docs`, see
    setup.py), else the checkout's `docs/`."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "_docs"
    return packaged if (packaged / "index.md").is_file() else package.parent / "docs"
