"""The heartbeat: one thread per runner that keeps its leases alive and
enforces deadlines and shutdown.

Every `interval` seconds it renews ALL in-flight leases in one statement
(`renew_many`, fenced per row). A lease found lost abandons exactly its own
job: its cancel event is set, its result will never be written. A job past
its deadline is abandoned and failed with the handler's timeout message. On
shutdown, every job not yet finishing is abandoned and released in one
statement (attempt refunded, `cancelled` published), without waiting for
any dispatch.

An abandoned job's pool thread may stay stuck in `execute` (a network call
that ignores the cancel event): the runner then starts a replacement pool
thread, so the pool keeps its size and the slot accounting stays honest;
the stuck thread ends when its call returns and writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import Engine

from app.queue.batch import release_many, renew_many
from app.worker.dbsession import DatabaseUnavailable, DbSession
from app.worker.inflight import HOLDING_A_SLOT, InFlight, InFlightJobs, JobState
from app.worker.outage import DatabaseOutage

logger = logging.getLogger(__name__)


class Heartbeat:
    def __init__(
        self,
        engine: Engine,
        jobs: InFlightJobs,
        outage: DatabaseOutage,
        stopping: threading.Event,
        *,
        lease_duration: timedelta,
        on_abandoned: Callable[[InFlight, JobState], None],
        on_timeout: Callable[[InFlight], None],
        on_lost: Callable[[InFlight], None],
        on_released: Callable[[InFlight, bool], None],
        before_shutdown: Callable[[], None],
        on_tick: Callable[[], None] = lambda: None,
    ) -> None:
        self._engine = engine
        self._jobs = jobs
        self._outage = outage
        self._stopping = stopping
        self.lease_duration = lease_duration
        self.interval = lease_duration.total_seconds() / 3
        self._on_abandoned = on_abandoned
        self._on_timeout = on_timeout
        self._on_lost = on_lost
        self._on_released = on_released
        self._before_shutdown = before_shutdown
        self._on_tick = on_tick
        self._wake = threading.Event()
        self.wake_at = float("inf")
        """When the thread plans to wake next (`time.monotonic()`); a job whose
        deadline is earlier calls `wake()`."""

    def wake(self) -> None:
        self._wake.set()

    def run(self) -> None:
        session = DbSession(self._engine, self._outage, threading.Event(), autocommit=True)
        next_renew = time.monotonic() + self.interval
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                self.wake_at = min(next_renew, self._earliest_deadline())
                self._wake.wait(max(0.0, self.wake_at - now))
                self._wake.clear()
                if self._stopping.is_set():
                    break
                now = time.monotonic()
                self._enforce_deadlines(now)
                if now >= next_renew:
                    renewed = self._renew(session)
                    # After a failed renew, try again with the session's backoff
                    # (sooner than a beat: the lease window is only 3 beats).
                    retry = min(self.interval, max(session.delay, 0.05))
                    next_renew = now + (self.interval if renewed else retry)
                self._on_tick()
            self._shutdown(session)
        finally:
            session.close()

    def _earliest_deadline(self) -> float:
        deadlines = [
            job.ctx.deadline
            for job in self._jobs.snapshot()
            if job.state is JobState.EXECUTING and job.ctx is not None
        ]
        return min(deadlines, default=float("inf"))

    def _enforce_deadlines(self, now: float) -> None:
        for job in self._jobs.snapshot():
            ctx = job.ctx
            if job.state is not JobState.EXECUTING or ctx is None or ctx.deadline > now:
                continue
            if self._abandon(job):
                self._on_timeout(job)

    def _abandon(self, job: InFlight) -> bool:
        was = job.state
        if not self._jobs.move(job, HOLDING_A_SLOT, JobState.ABANDONED):
            return False
        job.cancel.set()
        self._on_abandoned(job, was)
        return True

    def _renew(self, session: DbSession) -> bool:
        held = self._jobs.snapshot()
        if not held:
            return True
        try:
            current = session.run(
                lambda conn: renew_many(conn, [job.lease for job in held], self.lease_duration)
            )
        except DatabaseUnavailable:
            return False
        for job in held:
            if job.lease.id not in current and self._abandon(job):
                self._on_lost(job)
        return True

    def _shutdown(self, session: DbSession) -> None:
        self._before_shutdown()  # the lease loop has ended: nothing new comes in
        abandoned = [job for job in self._jobs.snapshot() if self._abandon(job)]
        if not abandoned:
            return
        try:
            released = session.run(
                lambda conn: release_many(conn, [job.lease for job in abandoned])
            )
        except Exception as exc:
            logger.error(
                "could not release %d in-flight job(s) on shutdown (%s); their leases will "
                "expire and they will be reclaimed",
                len(abandoned),
                exc,
            )
            return
        for job in abandoned:
            self._on_released(job, job.lease.id in released)
