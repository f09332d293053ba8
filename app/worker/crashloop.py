"""Start-up reclaim, with crash-loop protection.

`reclaim_expired` (app.queue) gives back the jobs of workers that died and
dead-letters those reclaimed `RECLAIM_LIMIT` times in a row. The queue knows
no job kind, so the failure a handler would record after a last attempt
(`save_failure`: for page analysis a `failed` page_analysis row) is written
here, in the same transaction, for the kinds this runner handles.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine

from app.queue import Lease, Reclaim, reclaim_expired
from app.worker.handler import JobContext, JobHandler

logger = logging.getLogger(__name__)

AnyHandler = JobHandler[Any, Any]


@dataclass(frozen=True)
class CrashLoop:
    """A job dead-lettered as a crash loop; `breadcrumb` is `None` when its
    handler is not this runner's, had nothing to record, or failed to."""

    lease: Lease
    error: str
    breadcrumb: Mapping[str, Any] | None


def reclaim_at_start(engine: Engine, handlers: Mapping[str, AnyHandler]) -> list[CrashLoop]:
    """Reclaim expired leases in one transaction and record the crash loops'
    failures through their handlers. Raises `SQLAlchemyError` if the database
    cannot be reached (nothing is then changed)."""
    with engine.begin() as conn:
        reclaim = reclaim_expired(conn)
        return [
            CrashLoop(lease, reclaim.error, _save_failure(conn, handlers, lease, reclaim))
            for lease in reclaim.dead_lettered
        ]


def _save_failure(
    conn: Connection, handlers: Mapping[str, AnyHandler], lease: Lease, reclaim: Reclaim
) -> Mapping[str, Any] | None:
    handler = handlers.get(lease.payload.kind)
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
                conn, item, reclaim.error, JobContext(lease, now, threading.Event(), now, label)
            )
        return handler.breadcrumb(item)
    except Exception:
        logger.exception("%s: could not record its crash-loop failure", label)
        return None
