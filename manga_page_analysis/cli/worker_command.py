"""`run-worker`: the analysis workers until a stop signal."""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Engine

from manga_page_analysis.cli.migrate_command import migrate_command_text, revision_text
from manga_page_analysis.cli.output import safe_url
from manga_page_analysis.cli.shutdown import (
    GracefulStop,
)
from manga_page_analysis.config import Settings
from manga_page_analysis.db import make_engine
from manga_page_analysis.schema_errors import foreign_revision_advice

logger = logging.getLogger("manga_page_analysis.cli")

EXIT_MIGRATIONS_PENDING = 2
EXIT_MISCONFIGURED = 2
"""A start-up check found the store refusing the worker's credentials or the model missing."""


def _analyzer_label(settings: Settings) -> str:
    if settings.backend == "ocr":
        return "ocr (in-process rapidocr, no model server)"
    return (
        f"http {settings.vision_url} (model {settings.vision_model}, health {settings.health_url})"
    )


def run_worker(settings: Settings, *, migrate_first: bool | None = None) -> int:
    """Run the workers until a stop signal; 0 after a graceful stop."""
    from manga_page_analysis.analysis.wiring import analysis_runner
    from manga_page_analysis.migrations import is_ours, revisions, upgrade_head
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
            if revision is not None and not is_ours(revision):
                logger.error(
                    "run-worker cannot start: %s",
                    foreign_revision_advice(
                        settings.database_schema, revision, command=migrate_command_text()
                    ),
                )
                return EXIT_MIGRATIONS_PENDING
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
            if not _configured(settings, engine, graceful.requested):
                if graceful.requested.is_set():
                    logger.info("run-worker stopped before it started")
                    return 0
                return EXIT_MISCONFIGURED
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
                    "run-worker: database %s (schema %s), analyzer %s, storage %s, "
                    "%d worker(s), job timeout %.0f s; runner id %s (leased_by of its jobs)",
                    safe_url(url),
                    settings.database_schema,
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


def _configured(settings: Settings, engine: Engine, stop: threading.Event) -> bool:
    """The start-up checks (`STARTUP_CHECKS`): `False` when one failed and run-worker
    is to exit (each problem said in one line), or a stop came while waiting."""
    if settings.startup_checks == "off":
        return True
    from manga_page_analysis.analysis.startup_checks import (
        hold_until_configured,
        startup_problems,
    )
    from manga_page_analysis.storage import open_storage

    storage = open_storage(settings)
    if settings.startup_checks == "wait":
        return hold_until_configured(settings, engine, storage, stop)
    problems = startup_problems(settings, engine, storage)
    for problem in problems:
        logger.error(
            "run-worker cannot start: %s (or set STARTUP_CHECKS=wait to hold until it is fixed)",
            problem,
        )
    return not problems
