"""Command line: `python -m app run-worker | migrate | jobs ... | analyze ... |
request-analysis PAGE_ID | import-pages FOLDER`; `python -m app COMMAND --help` for each.

Signal handlers live here, on the main thread, never in the library: a host
web server owns its own signals.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import uuid
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import NoReturn

from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError

from app.config import Settings
from app.db import database_url, make_engine
from app.errors import ServiceError
from app.observability.logs import configure_logging

logger = logging.getLogger("app.cli")

EXIT_MIGRATIONS_PENDING = 2
EXIT_SECOND_SIGNAL = 130
EXIT_FAILED = 1
EXIT_USAGE = 2

OPERATOR_COMMANDS = ("jobs", "analyze", "request-analysis")
"""Commands whose output is for a person: their logging defaults to WARNING."""
DB_CONNECT_TIMEOUT_SECONDS = 10
"""An operator command gives up on an unreachable database after this long."""


class UsageParser(argparse.ArgumentParser):
    """Bad usage exits 2 with the error and where to look (subparsers inherit this)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(
            EXIT_USAGE,
            f"{self.prog}: error: {message}\nsee `{self.prog} --help` for what it accepts\n",
        )


def main(argv: Sequence[str] | None = None) -> int:
    from app.cli import operator_commands as operator_cli

    parser = UsageParser(prog="python -m app", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--log-level",
        default=os.environ.get("LOG_LEVEL"),
        help="DEBUG, INFO, ... (default: LOG_LEVEL, else INFO; WARNING for operator commands)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    worker = commands.add_parser("run-worker", help="run the page-analysis workers")
    worker.add_argument(
        "--migrate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply pending migrations first (default: only on the embedded dev database)",
    )
    commands.add_parser("migrate", help="alembic upgrade head on the configured database")
    request = commands.add_parser(
        "request-analysis",
        help="enqueue analysis of a page and print the job id (POST api/pages/<id>/analysis)",
    )
    request.add_argument("page_id", type=operator_cli.uuid_arg("page"), metavar="PAGE_ID")
    request.add_argument("--force", action="store_true", help="re-analyse even if done")
    importer = commands.add_parser(
        "import-pages", help="import a folder of images as a chapter and request analysis"
    )
    importer.add_argument("folder", type=Path)
    importer.add_argument("--title", required=True)
    importer.add_argument("--chapter", type=Decimal, default=Decimal(1))
    demo = commands.add_parser(
        "demo", help="import the sample manga, analyse it (no model server needed), show results"
    )
    demo.add_argument("--timeout", type=float, default=300.0, help="give up after this many s")
    operator_cli.add_commands(commands)
    args = parser.parse_args(argv)
    operator_cli.check_usage(args)

    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']).upper()}: {error['msg']}"
            for error in exc.errors()
        )
        print(f"error: bad setting: {problems}", file=sys.stderr)
        return EXIT_USAGE
    default_level = "WARNING" if args.command in OPERATOR_COMMANDS else "INFO"
    configure_logging((args.log_level or default_level).upper(), settings.log_format)
    try:
        return _dispatch(args, settings)
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
            "the database has no job tables: run `python -m app migrate` (alembic upgrade head)",
        )
    return EXIT_FAILED


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    from app.cli import operator_commands as operator_cli

    if args.command == "migrate":
        return migrate(settings)
    if args.command == "request-analysis":
        return request_analysis_command(settings, args.page_id, args.force)
    if args.command == "import-pages":
        return import_pages_command(settings, args.folder, args.title, args.chapter)
    if args.command == "demo":
        return demo_command(settings, args.timeout)
    if args.command in ("jobs", "analyze"):
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
        print(f"error: {message}", file=sys.stderr)
    elif command == "run-worker":
        logger.error("run-worker cannot start: %s", message)
    else:
        logger.error("%s failed: %s", command, message)


def _safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


MIGRATE_THROUGH_POOLER_HINT = (
    "migrations need a direct connection: if DATABASE_URL goes through PgBouncer, "
    "run `migrate` with DATABASE_URL set to Postgres itself"
)
"""Said with a failed `migrate`: DDL may outlast a pooler's timeouts or need a session."""


def migrate(settings: Settings) -> int:
    from app.migrations import upgrade_head

    url = database_url(settings)
    logger.info("applying migrations to %s", _safe_url(url))
    try:
        upgrade_head(url)
    except SQLAlchemyError as exc:
        unreachable = "cannot reach the database: " if isinstance(exc, OperationalError) else ""
        cause = _first_line(getattr(exc, "orig", None) or exc)
        logger.error("migrate failed: %s%s (%s)", unreachable, cause, MIGRATE_THROUGH_POOLER_HINT)
        return EXIT_FAILED
    return 0


def request_analysis_command(settings: Settings, page_id: uuid.UUID, force: bool) -> int:
    """What `POST api/pages/<id>/analysis` does: prints the id of the job that will
    analyse the page (an in-flight one is reused). Kept for scripts; `analyze
    --page` is the operator's command and says what it enqueued or skipped."""
    from app import admin

    engine = make_engine(settings, connect_args={"connect_timeout": DB_CONNECT_TIMEOUT_SECONDS})
    try:
        with engine.begin() as conn:
            job_id = admin.request_page_analysis(conn, page_id, force=force)["job_id"]
    except admin.NotFound:
        print(f"error: no such page {page_id}", file=sys.stderr)
        return EXIT_FAILED
    except admin.Conflict as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        engine.dispose()
    print(job_id)
    return 0


def import_pages_command(settings: Settings, folder: Path, title: str, chapter: Decimal) -> int:
    from app.cli.importer import import_folder

    engine = make_engine(database_url(settings))
    try:
        result = import_folder(engine, settings.storage_root, folder, title=title, chapter=chapter)
    except (OSError, ValueError) as exc:
        logger.error("import failed: %s", exc)
        return 1
    finally:
        engine.dispose()
    logger.info(
        "imported %d page(s) of %r chapter %s (manga %s); analysis requested",
        len(result.page_ids),
        title,
        chapter,
        result.manga_id,
    )
    return 0


def demo_command(settings: Settings, timeout: float) -> int:
    from app.cli.demo import run_demo
    from app.migrations import upgrade_head

    # The demo prints its own progress; the worker's INFO lines would bury it.
    for chatty in ("app.worker", "app.analysis", "app.devdb", "alembic"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    # It warns while the OCR model loads; the demo says so itself.
    logging.getLogger("app.worker.readiness").setLevel(logging.ERROR)
    # Pick up the jobs as soon as the model is loaded, not a poll interval later.
    settings = settings.model_copy(update={"readiness_poll_seconds": 0.2, "idle_poll_seconds": 0.2})
    print("Starting the database..." if not settings.database_url else "Using DATABASE_URL...")
    url = database_url(settings)
    upgrade_head(url)
    engine = make_engine(url, pool_size=settings.analysis_workers * 2 + 2)
    try:
        return run_demo(
            settings, engine, database_label=_safe_url(url), timeout=timeout, out=sys.stdout
        )
    except (ServiceError, OSError, ValueError) as exc:
        logger.error("demo failed: %s", exc)
        return 1
    finally:
        engine.dispose()


def _analyzer_label(settings: Settings) -> str:
    if settings.backend == "ocr":
        return "ocr (in-process rapidocr, no model server)"
    return (
        f"http {settings.vision_url} (model {settings.vision_model}, health {settings.health_url})"
    )


def run_worker(settings: Settings, *, migrate_first: bool | None = None) -> int:
    from app.analysis.wiring import analysis_runner
    from app.migrations import revisions, upgrade_head
    from app.observability.metrics import serving_metrics, worker_metrics
    from app.queue import KIND_ANALYZE_PAGE

    if migrate_first is None:
        migrate_first = not settings.database_url
    engine = make_engine(settings)
    url = engine.url.render_as_string(hide_password=False)
    try:
        revision, head = revisions(engine)
        if revision != head:
            if not migrate_first:
                logger.error(
                    "the database is at revision %s but the code needs %s: run `make migrate` "
                    "(alembic upgrade head), or start with --migrate",
                    revision,
                    head,
                )
                return EXIT_MIGRATIONS_PENDING
            logger.info("applying migrations (%s -> %s)", revision, head)
            upgrade_head(url)

        metrics = worker_metrics(settings, kinds=[KIND_ANALYZE_PAGE])
        with (
            serving_metrics(settings, engine, metrics),
            analysis_runner(
                settings, engine=engine, observer=metrics, vision_observer=metrics
            ) as runner,
        ):
            logger.info(
                "run-worker: database %s, analyzer %s, storage %s, "
                "%d worker(s), job timeout %.0f s",
                _safe_url(url),
                _analyzer_label(settings),
                settings.storage_root.resolve(),
                settings.analysis_workers,
                settings.job_timeout_seconds,
            )
            signals_seen = 0

            def on_signal(signum: int, _frame: FrameType | None) -> None:
                nonlocal signals_seen
                signals_seen += 1
                name = signal.Signals(signum).name
                if signals_seen == 1:
                    logger.info("%s received: stopping; in-flight jobs are released", name)
                    runner.stop()
                else:
                    logger.warning("second %s: exiting now", name)
                    os._exit(EXIT_SECOND_SIGNAL)

            previous = {
                sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
            }
            try:
                runner.start()
                while not runner.wait_stopping(0.5):
                    pass
                runner.join(settings.shutdown_grace_seconds)
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        logger.info("run-worker stopped")
        return 0
    finally:
        engine.dispose()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
