"""The heartbeat: one thread per runner that keeps its leases alive and
enforces deadlines; nothing else (a job's end is the acker's to write).

Every `interval` (a third of the lease) it renews ALL in-flight leases in one
statement, fenced per row (`queue.states`): a lease found lost abandons exactly its own job.
A job past its deadline is abandoned and failed with the handler's timeout message,
also while the database is away: a renewal is retried (`DbRetry`) only until
the next deadline, a beat, or a new job with a sooner deadline.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from sqlalchemy import Engine

from manga_page_analysis.queue import renew_many
from manga_page_analysis.worker.acker import Acker
from manga_page_analysis.worker.dbsession import DatabaseUnavailable, DbSession
from manga_page_analysis.worker.inflight import InFlightJobs, JobState
from manga_page_analysis.worker.outcomes import Outcomes
from manga_page_analysis.worker.reports.outage import DatabaseOutage
from manga_page_analysis.worker.service import ThreadService

logger = logging.getLogger(__name__)


class Heartbeat(ThreadService):
    role = "heartbeat"

    def __init__(
        self,
        engine: Engine,
        jobs: InFlightJobs,
        acker: Acker,
        outcomes: Outcomes,
        outage: DatabaseOutage,
        *,
        lease_duration: timedelta,
        name: str = "worker",
    ) -> None:
        super().__init__(name)
        self._engine = engine
        self._jobs = jobs
        self._acker = acker
        self._outcomes = outcomes
        self._outage = outage
        self.lease_duration = lease_duration
        self.interval = lease_duration.total_seconds() / 3
        self.wake_at = float("inf")
        """When the thread plans to wake next (`time.monotonic()`)."""

    def watch(self, deadline: float) -> None:
        """A job started with this deadline: wake early enough to enforce it."""
        if deadline < self.wake_at:
            self._wake.set()

    def run(self) -> None:
        # Its retries end on `_wake` (a stop, or a job whose deadline comes
        # sooner): deadlines are enforced while the database is away.
        session = DbSession(self._engine, self._outage, self._wake, autocommit=True)
        next_renew = time.monotonic() + self.interval
        try:
            while not self.stopped.is_set():
                now = time.monotonic()
                self.wake_at = min(next_renew, self._jobs.earliest_deadline())
                self._wake.wait(max(0.0, self.wake_at - now))
                self._wake.clear()
                if self.stopped.is_set():
                    break
                now = time.monotonic()
                self._enforce_deadlines(now)
                if now >= next_renew and self._renew(session):
                    next_renew = now + self.interval
                # Not renewed (the database is away): the next round renews
                # again at once, after enforcing the deadlines due meanwhile.
        finally:
            session.close()

    def _enforce_deadlines(self, now: float) -> None:
        for job in self._jobs.snapshot():
            ctx = job.ctx
            if job.state is not JobState.EXECUTING or ctx is None or ctx.deadline > now:
                continue
            if self._jobs.abandon(job):
                self._acker.fail(job, job.handler.timeout_message, permanent=False)

    def _renew(self, session: DbSession) -> bool:
        """Renew every lease held; `False` if the database stayed away until the
        next deadline to enforce (or a beat)."""
        held = self._jobs.snapshot()
        if not held:
            return True
        leases = [job.lease for job in held]
        now = time.monotonic()
        bound = max(0.0, min(self.interval, self._jobs.earliest_deadline() - now))
        self.wake_at = now + bound  # a job watched from now on with a sooner deadline wakes it
        try:
            current = session.run(
                lambda conn: renew_many(conn, leases, self.lease_duration), within=bound
            )
        except DatabaseUnavailable:
            return False
        for job in held:
            if job.lease.id not in current and self._jobs.abandon(job):
                self._outcomes.lease_lost(job)
        return True
