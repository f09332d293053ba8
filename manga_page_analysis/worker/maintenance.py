"""The queue's maintenance, run by one elected leader among every runner that
shares the database: reclaiming expired leases (and dead-lettering crash
loops, `reclaim_expired`) and reaping old `done` jobs.

Every runner starts a `Maintainer`; each tries to take or renew the
`maintenance` row of `queue_leader` every third of `leader_lease`. The one
that holds it does the work right after each successful renewal (so it never
works on a lapsed lease) and gives the row up when it stops; a leader that
dies without resigning is replaced once its lease has run out.

A reclaim (`reclaim.Reclaimer`) takes the expired leases over on the
maintainer's connection and hands their ends to the acker, the one writer of
job ends; one that fails is tried again at the next renewal. Every runner
also reclaims once when it starts, leader or not (`Runner.start`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import Engine

from manga_page_analysis.queue import reap_done
from manga_page_analysis.queue.leader import MAINTENANCE, elect, resign
from manga_page_analysis.worker.dbsession import DatabaseUnavailable, DbSession, short_error
from manga_page_analysis.worker.reclaim import Reclaimer
from manga_page_analysis.worker.reports.outage import DatabaseOutage
from manga_page_analysis.worker.service import ThreadService

logger = logging.getLogger(__name__)


class Maintainer(ThreadService):
    """`leading` is `True` while this runner holds the maintenance lease, under
    `leader_id` (the runner's id, `manga_page_analysis.worker.identity`)."""

    role = "maintenance"

    def __init__(
        self,
        engine: Engine,
        reclaimer: Reclaimer,
        outage: DatabaseOutage,
        *,
        leader_lease: timedelta,
        reclaim_interval: float,
        reap_interval: float,
        reap_retention_days: int,
        leader_id: str,
        on_leading: Callable[[bool], None] = lambda leading: None,
        name: str = "worker",
    ) -> None:
        super().__init__(name)
        self._engine = engine
        self._reclaimer = reclaimer
        self._outage = outage
        self.leader_lease = leader_lease
        self.reclaim_interval = reclaim_interval
        self.reap_interval = reap_interval
        self.reap_retention_days = reap_retention_days
        self._on_leading = on_leading
        self.leader_id = leader_id
        self.leading = False
        self.reclaims = 0
        """Reclaim rounds run while leading (tests synchronise on it)."""
        self._session: DbSession | None = None

    def _db(self) -> DbSession:
        if self._session is None:
            self._session = DbSession(self._engine, self._outage, self.stopped, autocommit=True)
        return self._session

    @property
    def _renew_every(self) -> float:
        return self.leader_lease.total_seconds() / 3

    def first_round(self) -> None:
        """One election (one try) on the caller's thread before `start()` (the
        session then passes to the service's thread)."""
        self._set_leading(self._elect(self._db(), within=0.0))

    def run(self) -> None:
        session = self._db()
        renew_every = self._renew_every
        next_reclaim, next_reap = 0.0, 0.0
        try:
            while not self.stopped.is_set():
                round_began = time.monotonic()
                self._set_leading(self._elect(session, within=renew_every))
                now = time.monotonic()
                if not self.leading:
                    next_reclaim = next_reap = 0.0  # a new term starts with both
                else:
                    if now >= next_reclaim:
                        # One that did not happen is asked again at the next renewal,
                        # not a whole interval later.
                        done = self._reclaim(session)
                        next_reclaim = now + (self.reclaim_interval if done else renew_every)
                    if self.reap_retention_days and now >= next_reap:
                        self._reap(session)
                        next_reap = now + self.reap_interval
                # An election that retried until now is this round's renewal.
                wake_at = round_began + renew_every
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

    def _elect(self, session: DbSession, *, within: float) -> bool:
        try:
            return session.run(
                lambda conn: elect(conn, MAINTENANCE, self.leader_id, self.leader_lease),
                within=within,
            )
        except DatabaseUnavailable:
            # Not renewed: another runner may take over once the lease lapses,
            # so this one must not act as leader meanwhile.
            return False

    def _resign(self, session: DbSession) -> None:
        try:
            session.run(lambda conn: resign(conn, MAINTENANCE, self.leader_id), within=0.0)
        except Exception as exc:
            logger.warning(
                "could not resign the maintenance lead (%s); another runner takes over "
                "once it expires",
                short_error(exc),
            )
        self._set_leading(False)

    def _reclaim(self, session: DbSession) -> bool:
        """Reclaim expired leases (the acker writes and reports their ends);
        `True` when it was done, `False` to try again at the next renewal."""
        try:
            self._reclaimer.reclaim(session, within=self._renew_every)
        except Exception as exc:
            if not self.stopped.is_set():
                logger.warning(
                    "could not reclaim expired leases (%s); trying again at the next renewal",
                    short_error(exc),
                )
            return False
        self.reclaims += 1
        return True

    def _reap(self, session: DbSession) -> None:
        try:
            reaped = session.run(
                lambda conn: reap_done(conn, self.reap_retention_days), within=self._renew_every
            )
        except Exception as exc:
            logger.warning("could not reap done jobs: %s", short_error(exc))
            return
        if reaped:
            logger.info(
                "deleted %d done job(s) older than %d days", reaped, self.reap_retention_days
            )
