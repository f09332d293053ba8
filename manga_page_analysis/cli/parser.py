"""The command line's arguments: every command and option says what it does (`--help`);
usage errors exit 2."""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from importlib import metadata
from pathlib import Path
from typing import Final, NoReturn

from manga_page_analysis import admin
from manga_page_analysis.cli.invocation import command_name, docs_folder
from manga_page_analysis.cli.shutdown import EXIT_USAGE
from manga_page_analysis.config import MAX_RETENTION_DAYS, MAX_TIMEOUT_SECONDS
from manga_page_analysis.models import JOB_STATES
from manga_page_analysis.queue.requests import BATCH_SIZE

DEFAULT_COPY_JOBS: Final = 8
"""`storage copy --jobs`: objects copied at once."""
MAX_COPY_JOBS: Final = 64

HELP_WIDTH: Final = 79
"""Where the top-level help's paragraphs are wrapped."""

DISTRIBUTION: Final = "manga-page-analysis"
"""The installed package's name (for `--version`)."""

DESCRIPTION: Final = (
    "Manga page analysis: a Postgres job queue and the workers that analyse manga pages "
    "(OCR text, tags, description, NSFW verdict) with a vision model server or in-process OCR."
)


def epilog(prog: str) -> str:
    """The top-level help's last paragraph: where the settings are documented (the
    installed copy of the docs, or the checkout's) and how to ask each command."""
    return (
        "Configuration comes from the environment (and a .env file): DATABASE_URL (unset: an "
        "embedded PostgreSQL under .dev/), DATABASE_SCHEMA, VISION_URL (unset: in-process "
        f"OCR), STORAGE_ROOT or STORAGE_URL, ... See {docs_folder() / 'environment.md'} "
        f"(all the documentation: {docs_folder() / 'index.md'}). `{prog} COMMAND --help` "
        "describes each command."
    )


def _wrapped(text: str) -> str:
    return textwrap.fill(text, width=HELP_WIDTH, break_on_hyphens=False, break_long_words=False)


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


def title_arg(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("a manga needs a title: give a non-empty --title")
    return value


def uuid_arg(what: str) -> Callable[[str], uuid.UUID]:
    def parse(value: str) -> uuid.UUID:
        try:
            return uuid.UUID(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a {what} id: give a UUID such as "
                "0b6f4c4e-6a0e-4d55-9a39-2f6f6d3c1a7e"
            ) from None

    parse.__name__ = f"{what} id"
    return parse


def limit_arg(value: str) -> int:
    try:
        return admin.parse_limit(value)
    except admin.BadRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def days_arg(value: str) -> int:
    """`--days`: plain digits, 1 to `MAX_RETENTION_DAYS`."""
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 9) or not (
        1 <= int(digits) <= MAX_RETENTION_DAYS
    ):
        raise argparse.ArgumentTypeError(
            f"--days must be a whole number of days from 1 to {MAX_RETENTION_DAYS}, "
            f"not {value[:40]!r}"
        )
    return int(digits)


def seconds_arg(value: str) -> float:
    """A duration in seconds: more than 0, at most `MAX_TIMEOUT_SECONDS`."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:  # nan fails too
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds, more than 0 and at most {MAX_TIMEOUT_SECONDS:g}, "
            f"not {value[:40]!r}"
        )
    return seconds


def copy_jobs_arg(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if not 1 <= jobs <= MAX_COPY_JOBS:
        raise argparse.ArgumentTypeError(
            f"--jobs must be a whole number from 1 to {MAX_COPY_JOBS}, not {value!r}"
        )
    return jobs


def build_parser(prog: str | None = None) -> UsageParser:
    """The parser of every command; `prog`: the name in usage lines (default: the
    name this process was run by, `command_name()`)."""
    prog = prog or command_name()
    # Wrapped here, not by argparse, which breaks a long path at its hyphens
    # (`site- packages`): a path a reader copies stays whole on its line.
    parser = UsageParser(
        prog=prog,
        description=_wrapped(DESCRIPTION),
        epilog=_wrapped(epilog(prog)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        "or SIGHUP; then release the jobs in flight and exit 0 (a second signal exits at "
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
    request.add_argument("page_id", type=uuid_arg("page"), metavar="PAGE_ID", help="the page's id")
    request.add_argument(
        "--force", action="store_true", help="analyse again even if already analysed"
    )

    importer = commands.add_parser(
        "import-pages",
        help="import a folder of page images as a chapter and request their analysis",
        description="Copy the images of FOLDER (sorted by name: .png, .jpg, .webp, ...) into "
        "the page store (STORAGE_ROOT) as pages 1..n of a chapter, create the rows, request "
        "analysis of each page, and print the page ids. Files that are not page images "
        "(other names, undecodable, larger than MAX_IMAGE_BYTES, symbolic links out of "
        "FOLDER) are skipped and listed with the reason. The chapter goes into the manga "
        "with that title (created if there is none); if that manga already has that "
        "chapter, nothing is imported unless --new-manga is given.",
    )
    importer.add_argument("folder", type=Path, metavar="FOLDER", help="folder of page images")
    importer.add_argument("--title", required=True, type=title_arg, help="the manga's title")
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
        type=seconds_arg,
        default=300.0,
        help="give up after this many seconds (default 300)",
    )

    storage = commands.add_parser(
        "storage",
        help="page image storage: move a local store into a bucket",
        description="Page image storage (STORAGE_ROOT, STORAGE_URL).",
    )
    storage_commands = storage.add_subparsers(
        dest="storage_command", metavar="COMMAND", required=True
    )
    copy = storage_commands.add_parser(
        "copy",
        help="copy the page images of a folder into an S3-compatible bucket, verified",
        description="Copy every image the pages table references from a local folder into "
        "an S3-compatible bucket, with its page's content type, and verify each one (its "
        "bytes read back and compared). Objects already there with the same bytes are "
        "skipped: run it again to resume; a different object under the same key is left "
        "alone (and counted failed) unless --overwrite. Endpoint, region and credentials come from the "
        "AWS_* variables or a profile (AWS_ENDPOINT_URL for a store that is not AWS). Exit "
        "0 when every referenced image is in the bucket, 1 when some are missing from the "
        "folder or failed (each is named on stderr), 2 on bad usage.",
    )
    copy.add_argument(
        "--to",
        metavar="s3://BUCKET/PREFIX",
        help="where to copy to (default: STORAGE_URL)",
    )
    copy.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="DIR",
        help="the folder to copy from (default: STORAGE_ROOT)",
    )
    copy.add_argument(
        "--jobs",
        type=copy_jobs_arg,
        default=DEFAULT_COPY_JOBS,
        help=f"objects copied at once, 1-64 (default {DEFAULT_COPY_JOBS})",
    )
    copy.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an object already in the bucket whose bytes differ from the file's",
    )
    copy.set_defaults(copy_parser=copy)

    jobs = commands.add_parser(
        "jobs",
        help="inspect and steer the job queue (stats, list, retry, reap, reclaim)",
        description="Inspect and steer the job queue.",
    )
    sub = jobs.add_subparsers(dest="jobs_command", metavar="COMMAND", required=True)

    stats = sub.add_parser(
        "stats",
        help="counts by kind and state, oldest pending age",
        description="Job counts by kind and state, and how long the oldest due pending job "
        "has waited. --json prints the body of GET api/stats.",
    )
    stats.add_argument("--json", action="store_true", help="print the admin API's JSON")

    listing = sub.add_parser(
        "list",
        help="jobs newest first, with labels and last_error",
        description="Jobs, most recently updated first. --json prints the body of GET api/jobs "
        "(last_error in full; next_cursor continues the listing with --cursor).",
    )
    listing.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    listing.add_argument("--kind", help="only jobs of this kind, e.g. analyze_page")
    listing.add_argument(
        "--limit", type=limit_arg, default=admin.DEFAULT_LIMIT, help="how many, 1-500 (default 50)"
    )
    listing.add_argument("--cursor", help="continue after a listing's next_cursor")
    listing.add_argument("--json", action="store_true", help="print the admin API's JSON")

    retry = sub.add_parser(
        "retry",
        help="dead jobs back to pending, attempts reset",
        description="Move dead jobs back to pending, attempts reset, due now. Give job ids, "
        "or --all-dead (optionally with --kind). A dead job whose page already has a job "
        "pending or running is left dead.",
    )
    retry.add_argument(
        "job_ids", nargs="*", type=uuid_arg("job"), metavar="ID", help="ids of dead jobs"
    )
    retry.add_argument("--all-dead", action="store_true", help="retry every dead job")
    retry.add_argument("--kind", help="with --all-dead: only dead jobs of this kind")
    retry.set_defaults(retry_parser=retry)

    reap = sub.add_parser(
        "reap",
        help="delete done jobs older than N days",
        description="Delete done jobs last updated more than N days ago.",
    )
    reap.add_argument(
        "--days",
        type=days_arg,
        help=f"retention in days, 1 to {MAX_RETENTION_DAYS} (default: REAP_RETENTION_DAYS, 7)",
    )

    sub.add_parser(
        "reclaim",
        help="release running jobs whose lease expired (dead-letter crash loops)",
        description="Running jobs whose lease has expired (their worker died) go back to "
        "pending with the attempt refunded.",
    )

    analyze = commands.add_parser(
        "analyze",
        help="request analysis of a page, chapter, manga or every page missing one",
        description="Request analysis (dedup respected: a page with a job already pending or "
        "running gets no second one). Without --force, pages already analysed are skipped. "
        "--missing takes every page without a done analysis, including those whose analysis "
        f"failed, in batches of {BATCH_SIZE}; on a terminal it shows a progress bar.",
    )
    target = analyze.add_mutually_exclusive_group(required=True)
    target.add_argument("--page", type=uuid_arg("page"), metavar="ID", help="this one page")
    target.add_argument(
        "--chapter", type=uuid_arg("chapter"), metavar="ID", help="every page of this chapter"
    )
    target.add_argument(
        "--manga", type=uuid_arg("manga"), metavar="ID", help="every page of this manga"
    )
    target.add_argument("--missing", action="store_true", help="every page with no done analysis")
    analyze.add_argument(
        "--force", action="store_true", help="re-analyse pages even if already analysed"
    )
    return parser


def check_usage(args: argparse.Namespace) -> None:
    """Usage errors argparse cannot see; exits 2 with a message (before any database work)."""
    if args.command == "storage" and args.to is not None:
        from manga_page_analysis.storage.s3 import S3Location

        try:
            S3Location.parse(args.to)
        except ValueError as exc:
            args.copy_parser.error(f"--to: {exc}")
    if args.command == "jobs" and args.jobs_command == "retry":
        if bool(args.job_ids) == bool(args.all_dead):
            args.retry_parser.error("give job ids or --all-dead (not both)")
        if args.kind is not None and not args.all_dead:
            args.retry_parser.error("--kind only goes with --all-dead")
