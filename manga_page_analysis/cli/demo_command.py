"""`demo`: the sample manga analysed by the in-process OCR, with its progress printed."""

from __future__ import annotations

import logging

from manga_page_analysis.cli.output import safe_url
from manga_page_analysis.cli.shutdown import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    GracefulStop,
)
from manga_page_analysis.config import Settings
from manga_page_analysis.db import database_url, make_engine
from manga_page_analysis.errors import ServiceError

logger = logging.getLogger("manga_page_analysis.cli")


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
    logging.getLogger("manga_page_analysis.worker.gates.readiness").setLevel(readiness_level)
    # Pick up the jobs as soon as the model is loaded, not a poll interval later.
    settings = settings.model_copy(update={"readiness_poll_seconds": 0.2, "idle_poll_seconds": 0.2})
    graceful = GracefulStop(
        f"stopping; the demo's running jobs may finish for {settings.shutdown_grace_seconds:g} "
        "s, then are released"
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
            return run_demo(settings, engine, safe_url(url), timeout, graceful)
        except (ServiceError, OSError, ValueError) as exc:
            logger.error("demo failed: %s", exc)
            return EXIT_FAILED
        finally:
            engine.dispose()
