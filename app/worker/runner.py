"""The worker runner: leases jobs in batches and runs their handlers on a fixed pool.

Generic over job kinds: it takes a handler per kind and owns leasing,
heartbeats, deadlines, fenced completion, events and shutdown for all of them.

Its background pieces are services with one interface (start / stop / join),
started in this order and stopped in the reverse one:

1. the wake-up listener (`listen=True`): one LISTEN connection; it wakes the
   lease loop when jobs of its kinds are committed;
2. the acker: writes finished jobs in batches, their results and acks in one
   fenced transaction, then reports them;
3. the pool: `workers` threads, each runs `execute` for one job at a time and
   hands the finished job to the acker (a failure it writes itself);
4. the heartbeat: renews every in-flight lease in one statement per beat,
   gives up a job whose lease was lost or whose deadline passed; stopping it
   releases every job still in flight in one statement;
5. the lease loop: waits for the readiness gate and for free slots, leases up
   to that many jobs in ONE statement and runs `load` for the batch in the same
   transaction, then hands the jobs to the pool.

So shutdown goes: nothing more is leased; in-flight jobs are released at once
(attempt refunded, `cancelled` published) without waiting for their dispatch;
jobs already writing their outcome finish; the acker writes what it holds;
the listener closes. None of these threads is started per job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from app.worker.acker import Acker
from app.worker.crashloop import reclaim_at_start
from app.worker.dbsession import (
    DatabaseUnavailable,
    is_transient_db_error,
    runner_outage,
    short_error,
)
from app.worker.events import EventBus
from app.worker.handler import JobHandler
from app.worker.heartbeat import Heartbeat
from app.worker.inflight import InFlight, InFlightJobs, JobState
from app.worker.leasing import LeaseLoop
from app.worker.observer import RunnerObserver
from app.worker.outcomes import Outcomes
from app.worker.pool import WorkerPool
from app.worker.readiness import ReadinessGate
from app.worker.service import Service
from app.worker.wakeup import WakeupListener

logger = logging.getLogger(__name__)

AnyHandler = JobHandler[Any, Any]

SHUTDOWN_JOIN_SECONDS = 10.0
"""How long shutdown waits for each service in turn."""


class Runner:
    """Runs `handlers` on `workers` pool threads until `stop()`.

    `start()` reclaims orphaned leases once and starts the services; `stop()`
    returns at once and starts the shutdown: in-flight jobs are released at
    once (attempt refunded, `cancelled` published) without waiting for their
    dispatch; `join()` waits a bounded time for the shutdown to end.

    Keywords beyond DESIGN's:

    - `lease_duration`: the lease window, renewed every third of it;
    - `job_timeout`: seconds one `execute` may take before the attempt fails;
    - `idle_poll`: seconds between lease attempts while the queue is empty
      (the fallback when a wake-up is missed or `listen` is off);
    - `listen`: keep one LISTEN connection for instant pickup (turn off
      behind PgBouncer in transaction mode, or give `listen_url`);
    - `listen_url`: the direct connection that LISTEN uses (default: the
      engine's URL), for an engine that goes through PgBouncer;
    - `prefetch`: jobs leased beyond the free pool threads, waiting in the
      runner (their leases renewed) so that tiny jobs are leased in large
      batches. `None` (the default) adapts it: as many jobs as the pool
      finishes during one lease round trip, rounded up (at most
      `PREFETCH_MAX`), which is 1 for jobs that take more than a few
      milliseconds: a freed thread finds its next job already leased;
    - `ack_linger`, `ack_max_batch`: how long the acker gathers finished
      jobs, and how many at most per transaction;
    - `readiness`: a gate that must be open for leasing; `events`: where
      started/completed/failed/cancelled go; `observer`: metrics hooks;
      `reap_retention_days`: delete old done jobs hourly; `name`: thread names.
    """

    def __init__(
        self,
        engine: Engine,
        handlers: Sequence[AnyHandler],
        *,
        workers: int = 8,
        lease_duration: timedelta = timedelta(seconds=60),
        job_timeout: float = 600.0,
        idle_poll: float = 1.0,
        readiness: ReadinessGate | None = None,
        events: EventBus | None = None,
        reap_retention_days: int = 0,
        name: str = "worker",
        observer: RunnerObserver | None = None,
        listen: bool = True,
        listen_url: str | None = None,
        prefetch: int | None = None,
        ack_linger: float = 0.002,
        ack_max_batch: int = 1000,
    ) -> None:
        if not handlers:
            raise ValueError("a runner needs at least one handler")
        if workers < 1 or (prefetch is not None and prefetch < 0):
            raise ValueError("workers must be at least 1 and prefetch at least 0")
        self._engine = engine
        self._handlers = {handler.kind: handler for handler in handlers}
        self.workers = workers
        self.lease_duration = lease_duration
        self.job_timeout = job_timeout
        self.idle_poll = idle_poll
        self.listen = listen
        self._readiness = readiness
        self._name = name
        self._stopping = threading.Event()
        self._shutdown: threading.Thread | None = None
        # Reentrant: a signal handler calling stop() may interrupt start().
        self._lifecycle = threading.RLock()
        outage = runner_outage()
        self._jobs = jobs = InFlightJobs()
        self._outcomes = Outcomes(engine, jobs, events, observer, self._stopping, outage)
        self._acker = Acker(
            engine, outage, self._outcomes, linger=ack_linger, max_batch=ack_max_batch, name=name
        )
        self._heartbeat = Heartbeat(
            engine,
            jobs,
            self._outcomes,
            outage,
            lease_duration=lease_duration,
            on_abandoned=self._abandoned,
            reap_retention_days=reap_retention_days,
            name=name,
        )
        self._pool = WorkerPool(
            jobs,
            self._outcomes,
            self._acker,
            self._heartbeat,
            workers=workers,
            job_timeout=job_timeout,
            readiness=readiness,
            name=name,
        )
        self._lease_loop = LeaseLoop(
            engine,
            self._handlers,
            jobs,
            outage,
            dispatch=self._pool.submit,
            workers=workers,
            prefetch=prefetch,
            lease_duration=lease_duration,
            idle_poll=idle_poll,
            readiness=readiness,
            name=name,
        )
        self._listener = WakeupListener(
            engine,
            list(self._handlers),
            self._lease_loop.wake,
            outage,
            listen_url=listen_url,
            name=name,
        )
        self._services: list[Service] = [
            *([self._listener] if listen else []),
            self._acker,
            self._pool,
            self._heartbeat,
            self._lease_loop,
        ]
        """In start order; shutdown stops and joins them in the reverse order."""

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Reclaim orphaned leases once, then start the services in order.
        Does nothing once `stop()` was called."""
        with self._lifecycle:
            if self._shutdown is not None:
                return
            self._reclaim_at_start()
            for service in self._services:
                service.start()

    def stop(self) -> None:
        """Ask the runner to stop; returns at once (a second call does nothing).

        The shutdown sequence runs on a thread of its own: the services are
        stopped and joined one after the other, in the reverse start order."""
        with self._lifecycle:
            if self._shutdown is not None:
                return
            self._shutdown = threading.Thread(
                target=self._shut_down, name=f"{self._name}-shutdown", daemon=True
            )
            self._shutdown.start()
            # Set once the thread runs: whoever sees it may join the shutdown.
            self._stopping.set()

    def _shut_down(self) -> None:
        with self._lifecycle:
            pass  # a start() under way (a signal may arrive during it) ends first
        for service in reversed(self._services):
            began = time.monotonic()
            service.stop()
            ended = service.join(SHUTDOWN_JOIN_SECONDS)
            logger.debug(
                "shutdown: %s ended in %.3f s", type(service).__name__, time.monotonic() - began
            )
            if not ended:
                logger.warning(
                    "%s still running after %.0f s; shutdown goes on without it",
                    type(service).__name__,
                    SHUTDOWN_JOIN_SECONDS,
                )

    def wait_stopping(self, timeout: float | None = None) -> bool:
        """Block until `stop()` was called (or `timeout` passes)."""
        return self._stopping.wait(timeout)

    def join(self, timeout: float = 10.0) -> bool:
        """Wait up to `timeout` seconds for the shutdown and every service; `True` if
        all ended. Pool threads stuck in an abandoned dispatch are not waited for."""
        deadline = time.monotonic() + timeout
        if self._shutdown is not None:
            self._shutdown.join(max(0.0, deadline - time.monotonic()))
        ended = [service.join(max(0.0, deadline - time.monotonic())) for service in self._services]
        if not all(ended):
            alive = [
                type(service).__name__
                for service, done in zip(self._services, ended, strict=True)
                if not done
            ]
            logger.warning("runner services still running after %.0f s: %s", timeout, alive)
        return all(ended)

    def slots(self) -> int:
        """How many jobs the runner holds at most: the pool, plus the prefetch."""
        return self._lease_loop.slots()

    @property
    def lease_rounds(self) -> int:
        """Lease statements run so far (tests synchronise on it)."""
        return self._lease_loop.rounds

    @property
    def in_flight(self) -> int:
        """Jobs leased and not yet finished or given up."""
        return len(self._jobs)

    @property
    def worker_deaths(self) -> int:
        """Runner threads that died unexpectedly and were run again."""
        return sum(
            service.deaths
            for service in (self._listener, self._acker, self._heartbeat, self._lease_loop)
        )

    @property
    def listener(self) -> WakeupListener:
        return self._listener

    @property
    def acker(self) -> Acker:
        return self._acker

    def _abandoned(self, job: InFlight, was: JobState) -> None:
        self._pool.abandoned(job, was)

    def _reclaim_at_start(self) -> None:
        """Take back the jobs of workers that died; crash loops dead-lettered here
        get their failure recorded by their handler and reported like a last attempt."""
        try:
            crash_loops = reclaim_at_start(self._engine, self._handlers)
        except SQLAlchemyError as exc:
            logger.warning("could not reclaim orphaned jobs at start-up: %s", short_error(exc))
            return
        for loop in crash_loops:
            self._outcomes.crash_loop(loop.lease, loop.breadcrumb, loop.error)


__all__ = ["DatabaseUnavailable", "Runner", "is_transient_db_error"]
