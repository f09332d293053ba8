"""The command line's arguments: every command and option says what it does (`--help`)."""

from __future__ import annotations

import argparse
import os
import sys
from decimal import Decimal, InvalidOperation
from importlib import metadata
from pathlib import Path
from typing import Final, NoReturn

from app.cli import operator_commands as operator_cli

EXIT_USAGE: Final = 2
DISTRIBUTION: Final = "manga-page-analysis"
"""The installed package's name (for `--version`)."""

DESCRIPTION: Final = (
    "Manga page analysis: a Postgres job queue and the workers that analyse manga pages "
    "(OCR text, tags, description, NSFW verdict) with a vision model server or in-process OCR."
)
EPILOG: Final = (
    "Configuration comes from the environment (and a .env file): DATABASE_URL (unset: an "
    "embedded PostgreSQL under .dev/), VISION_URL (unset: in-process OCR), STORAGE_ROOT, ... "
    "See docs/environment.md. `python -m app COMMAND --help` describes each command."
)


class UsageParser(argparse.ArgumentParser):
    """Bad usage exits 2 with the error and where to look (subparsers inherit this)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(
            EXIT_USAGE,
            f"{self.prog}: error: {message}\nsee `{self.prog} --help` for what it accepts\n",
        )


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def chapter_number(value: str) -> Decimal:
    try:
        number = Decimal(value)
    except InvalidOperation:
        number = Decimal(-1)
    if not number.is_finite() or number < 0:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a chapter number: give one such as 1, 12 or 10.5"
        )
    return number


def build_parser() -> UsageParser:
    parser = UsageParser(prog="python -m app", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"{DISTRIBUTION} {version()}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("LOG_LEVEL"),
        help="DEBUG, INFO, WARNING, ... (default: LOG_LEVEL, else INFO; WARNING for "
        "jobs, analyze and request-analysis)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    worker = commands.add_parser(
        "run-worker",
        help="run the page-analysis workers until stopped",
        description="Lease analyze_page jobs and analyse their pages until SIGINT, SIGTERM "
        "or SIGHUP; then give back the jobs in flight and exit 0 (a second signal exits at "
        "once). The analyzer is the model server at VISION_URL, or in-process OCR when it "
        "is unset. Without DATABASE_URL, an embedded PostgreSQL under .dev/ is started and "
        "migrated.",
    )
    worker.add_argument(
        "--migrate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply pending migrations first (default: only on the embedded dev database; "
        "against DATABASE_URL it refuses to start on an old schema)",
    )

    commands.add_parser(
        "migrate",
        help="bring the database schema to the newest revision",
        description="Apply pending migrations (alembic upgrade head) to DATABASE_URL, or to "
        "the embedded dev database, and say which revision the database is at.",
    )

    request = commands.add_parser(
        "request-analysis",
        help="enqueue analysis of one page and print the job id",
        description="Enqueue analysis of a page and print the id of the job that will "
        "analyse it (a job already pending or running for the page is reused). Same as "
        "POST api/pages/<id>/analysis; `analyze --page` says more.",
    )
    request.add_argument(
        "page_id", type=operator_cli.uuid_arg("page"), metavar="PAGE_ID", help="the page's id"
    )
    request.add_argument(
        "--force", action="store_true", help="analyse again even if already analysed"
    )

    importer = commands.add_parser(
        "import-pages",
        help="import a folder of page images as a chapter and request their analysis",
        description="Copy the images of FOLDER (sorted by name: .png, .jpg, .webp, ...) into "
        "STORAGE_ROOT as pages 1..n of a chapter, create the rows, request analysis of each "
        "page, and print the page ids. The chapter goes into the manga with that title "
        "(created if there is none); if that manga already has that chapter, nothing is "
        "imported unless --new-manga is given.",
    )
    importer.add_argument("folder", type=Path, metavar="FOLDER", help="folder of page images")
    importer.add_argument("--title", required=True, help="the manga's title")
    importer.add_argument(
        "--chapter",
        type=chapter_number,
        default=Decimal(1),
        help="the chapter's number (default 1; 10.5 is fine)",
    )
    importer.add_argument(
        "--new-manga",
        action="store_true",
        help="import into a new manga even if one with this title already has this chapter",
    )
    importer.add_argument(
        "--json",
        action="store_true",
        help="print the manga, chapter, page and job ids as JSON",
    )

    demo = commands.add_parser(
        "demo",
        help="analyse the sample manga and show the results (no model server needed)",
        description="Start the database (embedded unless DATABASE_URL is set), migrate it, "
        "import the sample manga (once; later runs analyse the same pages again), run the "
        "workers until its pages are analysed while printing each event, then show page, "
        "status, time and OCR text, and where the data lives. VISION_URL set: the model "
        "server analyses them instead of in-process OCR.",
    )
    demo.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="give up after this many seconds (default 300)",
    )
    operator_cli.add_commands(commands)
    return parser
