"""The queue's maintenance, run by one elected leader among every runner that
shares the database: reclaiming expired leases (and dead-lettering crash
loops, `reclaim_expired`) and reaping old `done` jobs.

Every runner starts a `Maintainer`; each tries to take or renew the
`maintenance` row of `queue_leader` every third of `leader_lease`. The one
that holds it does the work right after each successful renewal (so it never
works on a lapsed lease) and gives the row up when it stops; a leader that
dies without resigning is replaced once its lease has run out.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Engine

from manga_page_analysis.queue import Lease, reap_done, reclaim_expired
from manga_page_analysis.queue.leader import MAINTENANCE, elect, resign
from manga_page_analysis.worker.dbsession import DatabaseUnavailable, DbSession, short_error
from manga_page_analysis.worker.handler import AnyHandler, JobContext
from manga_page_analysis.worker.outage import DatabaseOutage
from manga_page_analysis.worker.outcomes import Outcomes
from manga_page_analysis.worker.service import ThreadService

logger = logging.getLogger(__name__)


def new_leader_id(name: str) -> str:
    """`host:pid:name:random`, unique per runner (two runners in a process differ)."""
    return f"{socket.gethostname()}:{os.getpid()}:{name}:{uuid.uuid4().hex[:8]}"


class Maintainer(ThreadService):
    """`leading` is `True` while this runner holds the maintenance lease."""

    role = "maintenance"

    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, AnyHandler],
        outcomes: Outcomes,
        outage: DatabaseOutage,
        *,
        leader_lease: timedelta,
        reclaim_interval: float,
        reap_interval: float,
        reap_retention_days: int,
        on_leading: Callable[[bool], None] = lambda leading: None,
        name: str = "worker",
    ) -> None:
        super().__init__(name)
        self._engine = engine
        self._handlers = handlers
        self._outcomes = outcomes
        self._outage = outage
        self.leader_lease = leader_lease
        self.reclaim_interval = reclaim_interval
        self.reap_interval = reap_interval
        self.reap_retention_days = reap_retention_days
        self._on_leading = on_leading
        self.leader_id = new_leader_id(name)
        self.leading = False
        self.reclaims = 0
        """Reclaim rounds run while leading (tests synchronise on it)."""
        self._session: DbSession | None = None
        self._next_reclaim = 0.0

    def _db(self) -> DbSession:
        if self._session is None:
            self._session = DbSession(self._engine, self._outage, self.stopped, autocommit=True)
        return self._session

    def first_round(self) -> None:
        """One election, and a reclaim if it won, on the caller's thread (before
        `start()`: the session then passes to the service's thread)."""
        session = self._db()
        self._set_leading(self._elect(session))
        if self.leading:
            self._reclaim(session)
            self._next_reclaim = time.monotonic() + self.reclaim_interval

    def run(self) -> None:
        session = self._db()
        renew_every = self.leader_lease.total_seconds() / 3
        next_reclaim, next_reap = self._next_reclaim, 0.0
        try:
            while not self.stopped.is_set():
                self._set_leading(self._elect(session))
                now = time.monotonic()
                if not self.leading:
                    next_reclaim = next_reap = 0.0  # a new term starts with both
                else:
                    if now >= next_reclaim:
                        self._reclaim(session)
                        next_reclaim = now + self.reclaim_interval
                    if self.reap_retention_days and now >= next_reap:
                        self._reap(session)
                        next_reap = now + self.reap_interval
                wake_at = now + renew_every
                if self.leading:
                    wake_at = min(wake_at, next_reclaim)
                self._wake.wait(max(0.0, wake_at - time.monotonic()))
                self._wake.clear()
        finally:
            if self.leading:
                self._resign(session)
            session.close()

    def _set_leading(self, leading: bool) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        if leading:
            logger.info("%s leads the queue's maintenance", self.leader_id)
        else:
            logger.info("%s no longer leads the queue's maintenance", self.leader_id)
        try:
            self._on_leading(leading)
        except Exception:
            logger.exception("could not report the change of leader")

    def _elect(self, session: DbSession) -> bool:
        try:
            return session.run(
                lambda conn: elect(conn, MAINTENANCE, self.leader_id, self.leader_lease)
            )
        except DatabaseUnavailable:
            # Not renewed: another runner may take over once the lease lapses,
            # so this one must not act as leader meanwhile.
            return False

    def _resign(self, session: DbSession) -> None:
        try:
            session.run(lambda conn: resign(conn, MAINTENANCE, self.leader_id))
        except Exception as exc:
            logger.warning(
                "could not resign the maintenance lead (%s); another runner takes over "
                "once it expires",
                short_error(exc),
            )
        self._set_leading(False)

    def _reclaim(self, session: DbSession) -> None:
        """Reclaim expired leases in one transaction. `reclaim_expired` dead-letters a
        job reclaimed `RECLAIM_LIMIT` times in a row; the queue knows no job kind,
        so its handler's `save_failure` is written here, in the same transaction
        (when the kind is this runner's), and the job is reported like a last
        attempt once that committed."""
        try:
            reclaim, breadcrumbs = session.run(self._reclaim_and_record, atomic=True)
        except Exception as exc:
            logger.warning("could not reclaim expired leases: %s", short_error(exc))
            return
        self.reclaims += 1
        for lease, breadcrumb in zip(reclaim.dead_lettered, breadcrumbs, strict=True):
            self._outcomes.crash_loop(lease, breadcrumb, reclaim.error)

    def _reclaim_and_record(self, conn: Connection) -> tuple[Any, list[Mapping[str, Any] | None]]:
        reclaim = reclaim_expired(conn)
        breadcrumbs = [
            self._record_crash_loop(conn, lease, reclaim.error) for lease in reclaim.dead_lettered
        ]
        return reclaim, breadcrumbs

    def _record_crash_loop(
        self, conn: Connection, lease: Lease, error: str
    ) -> Mapping[str, Any] | None:
        """The job's breadcrumb, or `None` when its handler is not this runner's,
        had nothing to record, or failed to."""
        handler = self._handlers.get(lease.payload.kind)
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

    def _reap(self, session: DbSession) -> None:
        try:
            reaped = session.run(lambda conn: reap_done(conn, self.reap_retention_days))
        except Exception as exc:
            logger.warning("could not reap done jobs: %s", short_error(exc))
            return
        if reaped:
            logger.info(
                "deleted %d done job(s) older than %d days", reaped, self.reap_retention_days
            )
