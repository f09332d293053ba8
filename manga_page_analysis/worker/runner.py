"""The worker runner: leases jobs in batches and runs their handlers on a fixed pool."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

from sqlalchemy import Engine

from manga_page_analysis.config import (
    DEFAULT_BREAKER_FAILURES,
    DEFAULT_BREAKER_PAUSE_SECONDS,
    MAX_RETENTION_DAYS,
)
from manga_page_analysis.queue.kinds import require_kinds
from manga_page_analysis.worker.acker import Acker
from manga_page_analysis.worker.dbsession import DbSession, runner_outage
from manga_page_analysis.worker.gates.breaker import Breaker
from manga_page_analysis.worker.gates.readiness import ReadinessGate
from manga_page_analysis.worker.handler import AnyHandler
from manga_page_analysis.worker.heartbeat import Heartbeat
from manga_page_analysis.worker.identity import new_runner_id
from manga_page_analysis.worker.inflight import InFlightJobs, JobState
from manga_page_analysis.worker.lease_loop import LeaseLoop, WakeupListener
from manga_page_analysis.worker.maintenance import Maintainer
from manga_page_analysis.worker.outcomes import Outcomes
from manga_page_analysis.worker.pool import WorkerPool
from manga_page_analysis.worker.reclaim import Reclaimer
from manga_page_analysis.worker.reports.events import EventBus
from manga_page_analysis.worker.reports.observer import RunnerObserver
from manga_page_analysis.worker.service import Service

logger = logging.getLogger(__name__)

SHUTDOWN_JOIN_SECONDS = 10.0
"""How long shutdown waits for each service in turn."""
GRACE_POLL_SECONDS = 0.05
"""During a soft stop, how often the runner checks whether its jobs have ended."""
JOIN_SLICE_SECONDS = 0.5
"""The longest single wait in `join()`. A signal that reaches the main thread on its way
into a wait trips its Python handler without waking the wait; waiting in slices lets
the handler (a second signal's `stop_now()`) run within this long."""


class Runner:
    """Runs `handlers` (one per registered kind; it leases only those kinds) on
    `workers` pool threads until `stop()`.

    The first `stop()` is a soft stop: nothing more is leased, jobs leased
    but not started are released, and running jobs may finish for up to
    `shutdown_grace` seconds; whatever still runs then is released (attempt
    refunded, `cancelled` published). `stop_now()` releases at once.

    The keywords are documented in docs/worker.md ("Keywords"); besides them,
    `listen_url` is the direct connection LISTEN uses (default: the engine's
    URL), for an engine that goes through PgBouncer in transaction mode.
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
        shutdown_grace: float = 0.0,
        maintenance: bool = True,
        leader_lease: timedelta = timedelta(seconds=30),
        reclaim_interval: float = 30.0,
        reap_interval: float = 3600.0,
        breaker_failures: int = DEFAULT_BREAKER_FAILURES,
        breaker_pause: float = DEFAULT_BREAKER_PAUSE_SECONDS,
    ) -> None:
        if not handlers:
            raise ValueError("a runner needs at least one handler")
        require_kinds(handler.kind for handler in handlers)
        if shutdown_grace < 0:
            raise ValueError("shutdown_grace must be at least 0")
        self.shutdown_grace = shutdown_grace
        if workers < 1 or (prefetch is not None and prefetch < 0):
            raise ValueError("workers must be at least 1 and prefetch at least 0")
        if not 0 <= reap_retention_days <= MAX_RETENTION_DAYS:
            # Refused here, not by the heartbeat thread that reaps later.
            raise ValueError(f"reap_retention_days must be from 0 to {MAX_RETENTION_DAYS}")
        self._engine = engine
        self._handlers = {handler.kind: handler for handler in handlers}
        self.lease_duration = lease_duration
        self._readiness = readiness
        self._name = name
        self.runner_id = new_runner_id(name)
        """`host:pid:name:random`: the maintenance leader's id when this runner
        leads, and the `leased_by` of every job it leases."""
        self._stopping = threading.Event()
        self._hard_stop = threading.Event()
        self._shutdown: threading.Thread | None = None
        # Reentrant: a signal handler calling stop() may interrupt start().
        self._lifecycle = threading.RLock()
        self._reclaimed_at_start = False
        self._outage = outage = runner_outage()
        self._jobs = jobs = InFlightJobs()
        self._outcomes = Outcomes(jobs, events, observer)
        self.breaker = Breaker(
            failures=breaker_failures, pause=breaker_pause, on_change=self._breaker_changed
        )
        """Per kind: stops leasing a kind whose jobs all fail the same way (docs/worker.md)."""
        self.acker = Acker(
            engine, outage, self._outcomes, linger=ack_linger, max_batch=ack_max_batch, name=name
        )
        self._heartbeat = Heartbeat(
            engine,
            jobs,
            self.acker,
            self._outcomes,
            outage,
            lease_duration=lease_duration,
            name=name,
        )
        self.reclaimer = Reclaimer(self._handlers, self.acker, hold=lease_duration)
        self.maintainer = Maintainer(
            engine,
            self.reclaimer,
            outage,
            leader_lease=leader_lease,
            reclaim_interval=reclaim_interval,
            reap_interval=reap_interval,
            reap_retention_days=reap_retention_days,
            leader_id=self.runner_id,
            on_leading=functools.partial(self._outcomes.notify_observer, "leader_changed"),
            name=name,
        )
        self._pool = WorkerPool(
            jobs,
            self.acker,
            self._heartbeat,
            workers=workers,
            job_timeout=job_timeout,
            readiness=readiness,
            breaker=self.breaker,
            name=name,
        )
        self._lease_loop = LeaseLoop(
            engine,
            self._handlers,
            jobs,
            outage,
            submit=self._pool.submit,
            end=self.acker.end,
            workers=workers,
            prefetch=prefetch,
            lease_duration=lease_duration,
            idle_poll=idle_poll,
            readiness=readiness,
            holder=self.runner_id,
            breaker=self.breaker,
            name=name,
        )
        self.listener = WakeupListener(
            engine,
            list(self._handlers),
            self._lease_loop.wake,
            outage,
            listen_url=listen_url,
            name=name,
        )
        self._services: list[Service] = [
            self.acker,
            *([self.maintainer] if maintenance else []),
            *([self.listener] if listen else []),
            self._pool,
            self._heartbeat,
            self._lease_loop,
        ]
        """In start order; shutdown stops and joins them in the reverse order."""

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Start the services in order. Once the acker (which writes their ends)
        runs, and before the first lease, reclaim expired leases, leader or not:
        a worker restarted after a crash takes back what its predecessor held,
        the interrupted attempt refunded (and counted for the crash-loop rule).
        Then try once to become the maintenance leader. Does nothing once
        `stop()` was called."""
        with self._lifecycle:
            if self._shutdown is not None:
                return
            for service in self._services:
                if service is self.maintainer or service is self._pool:
                    self._reclaim_at_start()
                if service is self.maintainer:
                    self.maintainer.first_round()
                service.start()

    def _reclaim_at_start(self) -> None:
        if self._reclaimed_at_start:
            return
        self._reclaimed_at_start = True
        session = DbSession(self._engine, self._outage, self._stopping)
        try:
            self.reclaimer.reclaim(session, within=0.0)
        except Exception as exc:
            # The leader's next reclaim, or a lease, takes them instead.
            logger.warning("could not reclaim expired leases at start: %s", exc)
        finally:
            session.close()

    def stop_now(self) -> None:
        """`stop()`, and end its grace period now: running jobs are released."""
        self.stop()
        if not self._hard_stop.is_set():
            self._hard_stop.set()
            logger.info("stopping now: running jobs are released")

    def stop(self) -> None:
        """Start the shutdown on a thread of its own (a soft stop: see the class);
        returns at once. A second call does nothing (`stop_now()` ends the grace)."""
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
        self._let_running_jobs_finish()
        self._hard_stop.set()
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
            if service is self._heartbeat:
                # Nothing renews their leases any more: release what still runs.
                self._release_in_flight()

    def _let_running_jobs_finish(self) -> None:
        """The soft stop: stop leasing, release what has not started, then wait
        up to the grace period (or a second `stop()`) for running jobs to end."""
        if self.shutdown_grace <= 0:
            return
        deadline = time.monotonic() + self.shutdown_grace
        self._lease_loop.stop()
        self.listener.stop()
        self._lease_loop.join(SHUTDOWN_JOIN_SECONDS)
        self._release_unstarted()
        if len(self._jobs):
            logger.info(
                "stopping: %d running job(s) may finish for up to %.0f s (stop again to "
                "release them now)",
                len(self._jobs),
                self.shutdown_grace,
            )
        # Polled: jobs end on pool threads, the acker and the heartbeat, and the
        # registry has no end-of-job signal of its own.
        while len(self._jobs) and not self._hard_stop.wait(GRACE_POLL_SECONDS):
            if time.monotonic() >= deadline:
                logger.info(
                    "grace period of %.0f s over: releasing %d running job(s)",
                    self.shutdown_grace,
                    len(self._jobs),
                )
                break

    def _release_in_flight(self) -> None:
        """Give up every job still queued or executing (its `stop` is set) and
        hand it to the acker to be released, without waiting for its `execute`."""
        abandoned = [job for job in self._jobs.snapshot() if self._jobs.abandon(job)]
        if abandoned:
            self.acker.release(abandoned, "released on shutdown")

    def _breaker_changed(self, kind: str, is_open: bool, reason: str) -> None:
        """A kind's breaker opened (release what is held of it) or closed."""
        self._outcomes.notify_observer("breaker_changed", kind, is_open)
        if not is_open:
            return
        held = [
            job
            for job in self._jobs.snapshot()
            if job.lease.payload.kind == kind and self._jobs.abandon(job)
        ]
        if held:
            self.acker.release(held, f"released: the {kind} breaker opened")

    def _release_unstarted(self) -> None:
        queued = [
            job
            for job in self._jobs.snapshot()
            if job.state is JobState.QUEUED and self._jobs.abandon(job)
        ]
        if queued:
            self.acker.release(queued, "released unstarted: the runner is stopping")

    def wait_stopping(self, timeout: float | None = None) -> bool:
        """Block until `stop()` was called (or `timeout` passes)."""
        return self._stopping.wait(timeout)

    def join(self, timeout: float = 10.0) -> bool:
        """Wait up to `timeout` seconds for the shutdown and every service; `True` if
        all ended. Pool threads stuck in an abandoned dispatch are not waited for. It
        waits in slices of `JOIN_SLICE_SECONDS` (why: there)."""
        deadline = time.monotonic() + timeout
        shutdown = self._shutdown
        if shutdown is not None:
            _in_slices(lambda seconds: _joined(shutdown, seconds), deadline)
        alive = [
            type(service).__name__
            for service in self._services
            if not _in_slices(service.join, deadline)
        ]
        if alive:
            logger.warning("runner services still running after %.0f s: %s", timeout, alive)
        return not alive

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
        """Unexpected errors the runner's threads survived, every service counted the
        same way (a service thread run again, a pool thread that went on)."""
        return sum(service.deaths for service in self._services)


def _joined(thread: threading.Thread, timeout: float) -> bool:
    thread.join(timeout)
    return not thread.is_alive()


def _in_slices(wait: Callable[[float], bool], deadline: float) -> bool:
    """Call `wait(seconds)` (`True` once what it waits for has happened) for at most
    `JOIN_SLICE_SECONDS` at a time until it returns `True` or `deadline` passes."""
    while True:
        left = deadline - time.monotonic()
        if wait(max(0.0, min(JOIN_SLICE_SECONDS, left))):
            return True
        if left <= JOIN_SLICE_SECONDS:
            return False
