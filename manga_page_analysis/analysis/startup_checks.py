"""`run-worker`'s start-up checks: before it leases anything, does the page store let
this worker read page images with its credentials, and does the model server serve
the configured model? A failure here is the worker's configuration, found once,
rather than every page's failed attempt.

Only refusals count (credentials, rights, a missing bucket, a missing model or
route): a store or model server that is down or loading is not configuration, and
the readiness gate waits for it as usual.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Engine

from manga_page_analysis.analysis.model_server.client import VisionClient
from manga_page_analysis.config import Settings
from manga_page_analysis.repos.pages import some_storage_key
from manga_page_analysis.storage import Storage

logger = logging.getLogger(__name__)


def startup_problems(settings: Settings, engine: Engine, storage: Storage) -> list[str]:
    """One line per configuration problem found; empty when there is none."""
    problems: list[str] = []
    store = _store_problem(engine, storage)
    if store is not None:
        problems.append(store)
    if settings.backend == "http" and settings.vision_url:
        with VisionClient(
            base_url=settings.vision_url,
            model=settings.vision_model,
            api_key=settings.vision_api_key,
            health_url=settings.health_url,
            connect_timeout=settings.vision_connect_timeout_seconds,
        ) as client:
            model = client.check_model()
        if model is not None:
            problems.append(model)
    return problems


def _store_problem(engine: Engine, storage: Storage) -> str | None:
    probe_read = getattr(storage, "probe_read", None)
    if probe_read is None:
        return None  # a folder on disk: a missing file is the page's own problem
    with engine.connect() as conn:
        key = some_storage_key(conn)
    answer = probe_read(key)
    if answer.ready or not answer.refused:
        return None
    read = f" reading {key!r}" if key is not None else ""
    return f"page store {getattr(storage, 'name', storage)} {answer.reason}{read}"


def hold_until_configured(
    settings: Settings, engine: Engine, storage: Storage, stop: threading.Event
) -> bool:
    """`STARTUP_CHECKS=wait`: check every `READINESS_POLL_SECONDS` until nothing is
    wrong (`True`) or `stop` is set (`False`); each new problem is logged once."""
    said: set[str] = set()
    while not stop.is_set():
        problems = startup_problems(settings, engine, storage)
        if not problems:
            if said:
                logger.info("start-up checks pass now; starting the workers")
            return True
        for problem in problems:
            if problem not in said:
                logger.warning("%s; waiting until it is fixed (STARTUP_CHECKS=wait)", problem)
        said.update(problems)
        stop.wait(settings.readiness_poll_seconds)
    return False
