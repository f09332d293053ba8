"""Start-up reclaim, with crash-loop protection.

`reclaim_expired` (app.queue) dead-letters a job reclaimed `RECLAIM_LIMIT`
times in a row. The queue knows no job kind, so the handler's `save_failure`
for such a job is written here, in the same transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from app.queue import Lease, reclaim_expired
from app.worker.dbsession import short_error
from app.worker.handler import AnyHandler, JobContext
from app.worker.outcomes import Outcomes

logger = logging.getLogger(__name__)


def reclaim_at_start(
    engine: Engine, handlers: Mapping[str, AnyHandler], outcomes: Outcomes
) -> None:
    """Reclaim expired leases in one transaction, with the crash loops' failures
    recorded by their handlers; then report those like a last attempt. If the
    database cannot be reached, that is logged and nothing is changed."""
    try:
        with engine.begin() as conn:
            reclaim = reclaim_expired(conn)
            breadcrumbs = [
                _save_failure(conn, handlers.get(lease.payload.kind), lease, reclaim.error)
                for lease in reclaim.dead_lettered
            ]
    except SQLAlchemyError as exc:
        logger.warning("could not reclaim orphaned jobs at start-up: %s", short_error(exc))
        return
    for lease, breadcrumb in zip(reclaim.dead_lettered, breadcrumbs, strict=True):
        outcomes.crash_loop(lease, breadcrumb, reclaim.error)


def _save_failure(
    conn: Connection, handler: AnyHandler | None, lease: Lease, error: str
) -> Mapping[str, Any] | None:
    """The job's breadcrumb, or `None` when its handler is not this runner's,
    had nothing to record, or failed to."""
    if handler is None:
        return None  # another runner's kind: the dead row is the whole record
    label = f"job {lease.id}"
    try:
        # A savepoint: a handler that cannot record this must not undo the reclaim.
        with conn.begin_nested():
            item = handler.load(conn, lease)
            if item is None:
                return None
            now = time.monotonic()
            handler.save_failure(
                conn, item, error, JobContext(lease, now, threading.Event(), now, label)
            )
        return handler.breadcrumb(item)
    except Exception:
        logger.exception("%s: could not record its crash-loop failure", label)
        return None
