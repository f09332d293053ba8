"""Command line: `python -m manga_page_analysis run-worker | migrate | demo | import-pages FOLDER |
request-analysis PAGE_ID | jobs ... | analyze ... | storage copy`; `python -m manga_page_analysis COMMAND --help`
for each (the arguments are in `manga_page_analysis.cli.parser`, signals in `manga_page_analysis.cli.shutdown`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Final, NoReturn, TextIO

from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError

from manga_page_analysis.cli import operator_commands as operator_cli
from manga_page_analysis.cli.parser import build_parser, check_usage
from manga_page_analysis.cli.shutdown import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    GracefulStop,
    exit_process,
    interrupt_on_stop_signals,
)
from manga_page_analysis.config import Settings
from manga_page_analysis.db import database_url, make_engine
from manga_page_analysis.errors import ServiceError
from manga_page_analysis.observability.logs import configure_logging
from manga_page_analysis.observability.terminal import visible

if TYPE_CHECKING:
    from manga_page_analysis.cli.importer import SkippedFile

logger = logging.getLogger("manga_page_analysis.cli")

EXIT_MIGRATIONS_PENDING = 2

OPERATOR_COMMANDS = ("jobs", "analyze", "request-analysis", "storage")
"""Commands whose output is for a person: their logging defaults to WARNING."""
LONG_RUNNING = ("run-worker", "demo")
"""Commands that stop gracefully on a signal (`GracefulStop`); the others are interrupted."""
DB_CONNECT_TIMEOUT_SECONDS = 10
"""An operator command gives up on an unreachable database after this long."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (0 ok, 1 failed, 2 bad usage or
    configuration, 130 interrupted)."""
    args = build_parser().parse_args(argv)
    check_usage(args)
    if args.command not in LONG_RUNNING:
        interrupt_on_stop_signals()
    try:
        try:
            settings = Settings()
        except ValidationError as exc:
            print(f"error: {_settings_problem(exc)}", file=sys.stderr)
            return EXIT_USAGE
        default_level = "WARNING" if args.command in OPERATOR_COMMANDS else "INFO"
        configure_logging((args.log_level or default_level).upper(), settings.log_format)
        return _run_command(args, settings)
    except OperationalError as exc:
        _fatal(args.command, f"cannot reach the database: {_first_line(exc.orig)}")
    except ServiceError as exc:
        # A start-up error (the `ocr` backend's model missing, the metrics port
        # taken): no job was touched.
        _fatal(args.command, str(exc))
    except ProgrammingError as exc:
        if getattr(exc.orig, "sqlstate", None) != "42P01":  # undefined_table
            raise
        _fatal(
            args.command,
            "the database has no job tables: run `python -m manga_page_analysis migrate` (alembic upgrade head)",
        )
    except KeyboardInterrupt:
        print(f"{args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_FAILED


def run() -> NoReturn:
    """The console entry point: `main()`, then exit with its code."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Whoever read stdout went away (`... | head`): nothing left to say. Point
        # stdout at /dev/null so the interpreter's own final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_FAILED
    exit_process(code)


def _settings_problem(exc: ValidationError) -> str:
    """One line naming each bad variable and what it accepts."""
    problems = []
    for error in exc.errors():
        variable = "_".join(str(part) for part in error["loc"]).upper()
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{variable}: {message}" if variable else message)
    return "bad setting: " + "; ".join(problems)


def _run_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "migrate":
        return migrate(settings)
    if args.command == "import-pages":
        return import_pages_command(settings, args)
    if args.command == "demo":
        return demo_command(settings, args.timeout)
    if args.command == "storage":
        return storage_copy_command(settings, args)
    if args.command in OPERATOR_COMMANDS:
        engine = make_engine(settings, connect_args={"connect_timeout": DB_CONNECT_TIMEOUT_SECONDS})
        try:
            return operator_cli.run(args, engine, reap_retention_days=settings.reap_retention_days)
        finally:
            engine.dispose()
    return run_worker(settings, migrate_first=args.migrate)


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip() if error is not None else ""
    return text.splitlines()[0] if text else type(error).__name__


def _fatal(command: str, message: str) -> None:
    """One line on stderr, no traceback: plain for the operator commands, a log line
    (text or JSON, as configured) for the commands that log as they go."""
    if command in OPERATOR_COMMANDS:
        print(f"error: {visible(message)}", file=sys.stderr)
    elif command == "run-worker":
        logger.error("run-worker cannot start: %s", message)
    else:
        logger.error("%s failed: %s", command, message)


def _safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def migrate(settings: Settings) -> int:
    from manga_page_analysis.migrations import SchemaConflict
    from manga_page_analysis.migrations import migrate as migrate_database

    url = database_url(settings)
    schema = settings.database_schema
    logger.info("applying migrations to %s (schema %s)", _safe_url(url), schema)
    # Alembic's own INFO lines say little here; the line printed below says what happened.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        before, after = migrate_database(url, schema)
    except SchemaConflict as exc:
        logger.error("migrate failed: %s", exc)
        return EXIT_FAILED
    except SQLAlchemyError as exc:
        unreachable = "cannot reach the database: " if isinstance(exc, OperationalError) else ""
        cause = getattr(exc, "orig", None) or exc
        # DDL may outlast a pooler's timeouts or need a session; said only when
        # the failure can be the pooler's (not a missing database, a bad password).
        hint = (
            " (migrations need a direct connection: if DATABASE_URL goes through "
            "PgBouncer, run `migrate` with DATABASE_URL set to Postgres itself)"
            if could_be_the_pooler(cause)
            else ""
        )
        logger.error("migrate failed: %s%s%s", unreachable, _first_line(cause), hint)
        return EXIT_FAILED
    if before == after:
        print(f"database at revision {after} (head): nothing to do")
    else:
        print(f"database migrated from {revision_text(before)} to revision {after} (head)")
    return 0


def revision_text(revision: str | None) -> str:
    """`revision 0004`, or `an empty database` for a database never migrated."""
    return f"revision {revision}" if revision else "an empty database"


def migrate_command_text() -> str:
    """How to run `migrate` here: `make migrate` in a checkout, the module or the
    console script where the package is installed."""
    from manga_page_analysis.migrations import in_checkout

    if in_checkout():
        return "`make migrate`"
    return "`python -m manga_page_analysis migrate` (or `manga-analysis migrate`)"


_NOT_THE_POOLER: Final = (
    "does not exist",
    "authentication failed",
    "no password supplied",
    "connection refused",
    "could not translate host name",
    "name or service not known",
    "no route to host",
    "already exists",
    "permission denied",
)


def could_be_the_pooler(error: BaseException) -> bool:
    """Whether a `migrate` failure can come from a pooler in between (a dropped
    server connection, a timeout, a refused feature), not from the database,
    the credentials or the address themselves."""
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate and (sqlstate.startswith(("28", "3D", "42", "23")) or sqlstate == "42501"):
        return False
    message = str(error).lower()
    if "prepared statement" in message:  # one prepared on another server connection
        return True
    return not any(phrase in message for phrase in _NOT_THE_POOLER)


def import_pages_command(settings: Settings, args: argparse.Namespace) -> int:
    """Import `args.folder` as a chapter; print what was created (ids people look for)
    and what was skipped, and why."""
    from manga_page_analysis.cli.importer import NoPages, import_folder
    from manga_page_analysis.storage import open_storage

    engine = make_engine(database_url(settings), schema=settings.database_schema)
    try:
        result = import_folder(
            engine,
            open_storage(settings),
            args.folder,
            title=args.title,
            chapter=args.chapter,
            new_manga=args.new_manga,
            max_bytes=settings.max_image_bytes,
        )
    except NoPages as exc:
        print(f"error: {exc}", file=sys.stderr)
        _print_skipped(exc.skipped, file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError, ServiceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        engine.dispose()
    if args.json:
        print(json.dumps(asdict(result), indent=2, default=str))
        return 0
    manga = "new manga" if result.created_manga else "existing manga"
    print(
        f"imported {len(result.pages)} page(s) of {args.title!r} chapter {args.chapter} "
        f"into {manga} {result.manga_id} (chapter {result.chapter_id}); analysis requested"
    )
    for page in result.pages:
        print(f"  page {page.number:>3}  {page.page_id}  {page.file}")
    _print_skipped(result.skipped, file=sys.stdout)
    return 0


def _print_skipped(skipped: Sequence[SkippedFile], *, file: TextIO) -> None:
    if skipped:
        print(f"skipped {len(skipped)} file(s):", file=file)
    for entry in skipped:
        print(f"  {entry.file}: {entry.reason}", file=file)


def storage_copy_command(settings: Settings, args: argparse.Namespace) -> int:
    """`storage copy`: the pages' images from a folder into a bucket; 0 when all are there."""
    from manga_page_analysis.cli.storage_copy import copy_store
    from manga_page_analysis.storage import LocalStorage
    from manga_page_analysis.storage.s3 import S3Storage

    to = args.to or settings.storage_url
    if not to:
        print("error: give --to s3://bucket/prefix, or set STORAGE_URL", file=sys.stderr)
        return EXIT_USAGE
    source = LocalStorage(args.source or settings.storage_root)
    if not source.root.is_dir():
        print(f"error: {source.root} is not a folder (--from, STORAGE_ROOT)", file=sys.stderr)
        return EXIT_FAILED
    target = S3Storage(to, max_pool_connections=args.jobs)
    engine = make_engine(settings, connect_args={"connect_timeout": DB_CONNECT_TIMEOUT_SECONDS})
    try:
        report = copy_store(engine, source, target, jobs=args.jobs)
    finally:
        engine.dispose()
    print(
        f"storage copy {source.root} -> {target.location}: {report.copied} copied, "
        f"{report.present} already there, {report.missing} missing from the folder, "
        f"{report.failed} failed"
    )
    return 0 if report.complete else EXIT_FAILED


def demo_command(settings: Settings, timeout: float) -> int:
    from manga_page_analysis.cli.demo import run_demo
    from manga_page_analysis.migrations import upgrade_head

    # The demo prints its own progress; the worker's INFO lines would bury it.
    for chatty in (
        "manga_page_analysis.worker",
        "manga_page_analysis.analysis",
        "manga_page_analysis.devdb",
        "alembic",
    ):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    # Why nothing is leased (a model server refusing, loading) must show; the OCR
    # model's loading is announced by the demo itself.
    readiness_level = logging.WARNING if settings.backend == "ocr" else logging.INFO
    logging.getLogger("manga_page_analysis.worker.readiness").setLevel(readiness_level)
    # Pick up the jobs as soon as the model is loaded, not a poll interval later.
    settings = settings.model_copy(update={"readiness_poll_seconds": 0.2, "idle_poll_seconds": 0.2})
    graceful = GracefulStop(
        f"stopping; the demo's running jobs may finish for {settings.shutdown_grace_seconds:g} "
        "s, then are given back"
    )
    with graceful.installed():
        print("Starting the database..." if not settings.database_url else "Using DATABASE_URL...")
        url = database_url(settings)
        upgrade_head(url, settings.database_schema)
        if graceful.requested.is_set():
            return EXIT_INTERRUPTED
        engine = make_engine(
            url, schema=settings.database_schema, pool_size=settings.analysis_workers * 2 + 2
        )
        try:
            return run_demo(settings, engine, _safe_url(url), timeout, graceful)
        except (ServiceError, OSError, ValueError) as exc:
            logger.error("demo failed: %s", exc)
            return EXIT_FAILED
        finally:
            engine.dispose()


def _analyzer_label(settings: Settings) -> str:
    if settings.backend == "ocr":
        return "ocr (in-process rapidocr, no model server)"
    return (
        f"http {settings.vision_url} (model {settings.vision_model}, health {settings.health_url})"
    )


def run_worker(settings: Settings, *, migrate_first: bool | None = None) -> int:
    """Run the workers until a stop signal; 0 after a graceful stop."""
    from manga_page_analysis.analysis.wiring import analysis_runner
    from manga_page_analysis.migrations import revisions, upgrade_head
    from manga_page_analysis.observability.metrics import serving_metrics
    from manga_page_analysis.queue import KIND_ANALYZE_PAGE
    from manga_page_analysis.worker.runner import SHUTDOWN_JOIN_SECONDS

    if migrate_first is None:
        migrate_first = not settings.database_url
    graceful = GracefulStop(
        f"stopping; running jobs may finish for {settings.shutdown_grace_seconds:g} s, "
        "then are released"
    )
    with graceful.installed():
        engine = make_engine(settings)
        url = engine.url.render_as_string(hide_password=False)
        try:
            revision, head = revisions(engine)
            if revision != head:
                if not migrate_first:
                    logger.error(
                        "the database (schema %s) is %s but the code needs revision %s: "
                        "run %s, or start with --migrate",
                        settings.database_schema,
                        f"at revision {revision}" if revision else "empty",
                        head,
                        migrate_command_text(),
                    )
                    return EXIT_MIGRATIONS_PENDING
                logger.info(
                    "applying migrations (%s -> revision %s)", revision_text(revision), head
                )
                upgrade_head(url, settings.database_schema)
            if graceful.requested.is_set():
                logger.info("run-worker stopped before it started")
                return 0

            with (
                serving_metrics(settings, engine, kinds=[KIND_ANALYZE_PAGE]) as metrics,
                analysis_runner(
                    settings, engine=engine, observer=metrics, vision_observer=metrics
                ) as runner,
            ):
                logger.info(
                    "run-worker: database %s, analyzer %s, storage %s, "
                    "%d worker(s), job timeout %.0f s; runner id %s (leased_by of its jobs)",
                    _safe_url(url),
                    _analyzer_label(settings),
                    settings.storage_url or settings.storage_root.resolve(),
                    settings.analysis_workers,
                    settings.job_timeout_seconds,
                    runner.runner_id,
                )
                graceful.on_stop(runner.stop, now=runner.stop_now)
                runner.start()
                while not runner.wait_stopping(0.5):
                    pass
                runner.join(settings.shutdown_grace_seconds + SHUTDOWN_JOIN_SECONDS)
            logger.info("run-worker stopped")
            return 0
        finally:
            engine.dispose()


if __name__ == "__main__":  # pragma: no cover
    run()
