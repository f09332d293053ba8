"""Command line: `manga-analysis` (or `python -m manga_page_analysis`) `run-worker | migrate |
demo | import-pages FOLDER | request-analysis PAGE_ID | jobs ... | analyze ... | storage copy`;
`manga-analysis COMMAND --help` for each (the arguments are in `manga_page_analysis.cli.parser`,
signals in `manga_page_analysis.cli.shutdown`).
This module reads the settings and dispatches; each command family has a module of its own,
which imports what only it needs when it runs (an operator's `jobs` loads no alembic, numpy,
OCR stack or prometheus_client).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from pydantic import ValidationError
from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from manga_page_analysis.cli import operator_commands as operator_cli
from manga_page_analysis.cli.demo_command import demo_command
from manga_page_analysis.cli.import_command import import_pages_command
from manga_page_analysis.cli.migrate_command import migrate, migrate_command_text
from manga_page_analysis.cli.output import DB_CONNECT_TIMEOUT_SECONDS, first_line
from manga_page_analysis.cli.parser import build_parser, check_usage
from manga_page_analysis.cli.shutdown import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    exit_process,
    interrupt_on_stop_signals,
)
from manga_page_analysis.cli.storage_command import storage_copy_command
from manga_page_analysis.cli.worker_command import run_worker
from manga_page_analysis.config import Settings
from manga_page_analysis.db import make_engine
from manga_page_analysis.errors import ServiceError
from manga_page_analysis.observability.logs import configure_logging
from manga_page_analysis.observability.terminal import visible
from manga_page_analysis.schema_errors import not_our_schema

logger = logging.getLogger("manga_page_analysis.cli")

OPERATOR_COMMANDS = ("jobs", "analyze", "request-analysis", "storage")
"""Commands whose output is for a person: their logging defaults to WARNING."""


LONG_RUNNING = ("run-worker", "demo")
"""Commands that stop gracefully on a signal (`GracefulStop`); the others are interrupted."""


def main(argv: Sequence[str] | None = None, settings: Settings | None = None) -> int:
    """Run one command; returns its exit code (0 ok, 1 failed, 2 bad usage or
    configuration, 130 interrupted). `settings`: by default read from the environment
    (and `.env`); a host that has its own (Django's `run_worker`) passes them."""
    args = build_parser().parse_args(argv)
    check_usage(args)
    if args.command not in LONG_RUNNING:
        interrupt_on_stop_signals()
    try:
        try:
            if settings is None:
                settings = Settings()
        except ValidationError as exc:
            print(f"error: {settings_problem(exc)}", file=sys.stderr)
            return EXIT_USAGE
        default_level = "WARNING" if args.command in OPERATOR_COMMANDS else "INFO"
        configure_logging((args.log_level or default_level).upper(), settings.log_format)
        return _run_command(args, settings)
    except OperationalError as exc:
        _fatal(args.command, f"cannot reach the database: {first_line(exc.orig)}")
    except ServiceError as exc:
        # A start-up error (the `ocr` backend's model missing, the metrics port
        # taken): no job was touched.
        _fatal(args.command, str(exc))
    except ProgrammingError as exc:
        if settings is None or not not_our_schema(exc):
            raise
        _fatal(args.command, _schema_missing(settings, exc))
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


def settings_problem(exc: ValidationError) -> str:
    """One line naming each bad variable and what it accepts."""
    problems = []
    for error in exc.errors():
        variable = "_".join(str(part) for part in error["loc"]).upper()
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{variable}: {message}" if variable else message)
    return "bad setting: " + "; ".join(problems)


def _schema_missing(settings: Settings, error: ProgrammingError) -> str:
    """One line for a statement that found no table (or column) of ours: another
    project's alembic revision in the schema, or a schema never migrated."""
    from manga_page_analysis.schema_check import schema_problem

    engine = make_engine(
        settings, poolclass=NullPool, connect_args={"connect_timeout": DB_CONNECT_TIMEOUT_SECONDS}
    )
    try:
        problem = schema_problem(engine, command=migrate_command_text())
    except SQLAlchemyError:
        problem = None
    finally:
        engine.dispose()
    return problem or (
        f"{first_line(error.orig)} (schema {settings.database_schema}): run "
        f"{migrate_command_text()}, or set DATABASE_SCHEMA to the schema it put them in"
    )


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


def _fatal(command: str, message: str) -> None:
    """One line on stderr, no traceback: plain for the operator commands, a log line
    (text or JSON, as configured) for the commands that log as they go."""
    if command in OPERATOR_COMMANDS:
        print(f"error: {visible(message)}", file=sys.stderr)
    elif command == "run-worker":
        logger.error("run-worker cannot start: %s", message)
    else:
        logger.error("%s failed: %s", command, message)


if __name__ == "__main__":  # pragma: no cover
    run()
