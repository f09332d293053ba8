"""The worker runner: leases jobs in batches and runs their handlers on a fixed pool.

Generic over job kinds: it takes a handler per kind and owns leasing,
heartbeats, deadlines, fenced completion, events and shutdown for all of them.

Threads of one runner (none is started per job):

- the lease loop: waits for the readiness gate and for free slots, leases up
  to that many jobs in ONE statement and runs `load` for the batch in the
  same transaction, then hands the jobs to the pool. It sleeps while the
  queue is empty until the wake-up listener, a freed slot or `idle_poll`
  wakes it;
- `workers` pool threads: each runs `execute` for one job at a time, then
  writes the result and ack in ONE fenced transaction (`writes_result`
  handlers) or hands the job to the acker;
- the acker: acks finished jobs of handlers that write nothing in batches;
- the heartbeat: renews every in-flight lease in one statement per beat,
  abandons a job whose lease was lost or whose deadline passed, and on
  shutdown releases every in-flight job in one statement;
- the wake-up listener (`listen=True`): one LISTEN connection.

Threads cannot be killed, so a dispatch that is abandoned keeps running until
its own network timeouts end; its result is never written, and its pool thread
is replaced at once so the pool keeps its size.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from app.errors import DispatchTimeout, ServiceError
from app.queue.jobs import reap_done
from app.worker.acker import Acker
from app.worker.crashloop import reclaim_at_start
from app.worker.dbsession import (
    DatabaseUnavailable,
    is_transient_db_error,
    runner_outage,
    short_error,
)
from app.worker.events import EventBus
from app.worker.handler import JobContext, JobHandler
from app.worker.heartbeat import Heartbeat
from app.worker.inflight import InFlight, InFlightJobs, JobState
from app.worker.leasing import LeaseLoop
from app.worker.logcontext import job_log_context
from app.worker.observer import RunnerObserver
from app.worker.outcomes import Outcomes, describe_error, is_permanent, job_fields
from app.worker.readiness import ReadinessGate
from app.worker.wakeup import WakeupListener

logger = logging.getLogger(__name__)

AnyHandler = JobHandler[Any, Any]

REAP_EVERY_SECONDS = 3600.0
"""How often old `done` jobs are deleted (when `reap_retention_days` is set)."""
RESTART_DELAY_SECONDS = 0.05
"""Pause before a runner thread that died unexpectedly is started again."""
SHUTDOWN_JOIN_SECONDS = 10.0
"""How long shutdown waits for jobs already writing their outcome."""

_QUEUED = frozenset({JobState.QUEUED})

_EXECUTING = frozenset({JobState.EXECUTING})


class Runner:
    """Runs `handlers` on `workers` pool threads until `stop()`.

    `start()` reclaims orphaned leases once and starts the threads; `stop()`
    only sets an event: in-flight jobs are released at once (attempt
    refunded, `cancelled` published) without waiting for their dispatch;
    `join()` waits a bounded time for the threads to finish.

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
      finishes during one lease round trip (at most `PREFETCH_MAX`), which
      is about 0 for jobs that take more than a few milliseconds;
    - `ack_linger`, `ack_max_batch`: how long the acker gathers acks of
      `writes_result = False` handlers, and how many at most per statement;
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
        # A handler written before `writes_result` existed keeps the per-job path.
        self._writes_result = {
            handler.kind: bool(getattr(handler, "writes_result", True)) for handler in handlers
        }
        self.workers = workers
        self.lease_duration = lease_duration
        self.job_timeout = job_timeout
        self.idle_poll = idle_poll
        self.listen = listen
        self._readiness = readiness
        self._reap_retention_days = reap_retention_days
        self._name = name
        self._stopping = threading.Event()
        self._outage = runner_outage()
        self._jobs = InFlightJobs()
        self._handoff: queue.SimpleQueue[InFlight | None] = queue.SimpleQueue()
        self._outcomes = Outcomes(engine, events, observer, self._stopping, self._outage)
        self._acker = Acker(
            engine,
            self._outage,
            self._stopping,
            self._acked,
            linger=ack_linger,
            max_batch=ack_max_batch,
        )
        self._heartbeat = Heartbeat(
            engine,
            self._jobs,
            self._outage,
            self._stopping,
            lease_duration=lease_duration,
            on_abandoned=self._abandoned,
            on_timeout=self._timed_out,
            on_lost=lambda job: self._outcomes.report_lease_lost(job, _label(job)),
            on_released=lambda job, ok: self._outcomes.report_released(job, ok, _label(job)),
            before_shutdown=self._wait_for_lease_loop,
            on_tick=self._maybe_reap,
        )
        self._lease_loop = LeaseLoop(
            engine,
            self._handlers,
            self._jobs,
            self._outage,
            self._stopping,
            dispatch=self._dispatch,
            workers=workers,
            prefetch=prefetch,
            lease_duration=lease_duration,
            idle_poll=idle_poll,
            readiness=readiness,
        )
        self._listener = WakeupListener(
            engine,
            list(self._handlers),
            self._lease_loop.wake,
            self._stopping,
            self._outage,
            listen_url=listen_url,
        )
        self._threads: dict[str, threading.Thread] = {}
        self._pool: list[threading.Thread] = []
        self._stuck: set[threading.Thread] = set()
        self._last_reap = float("-inf")
        self.worker_deaths = 0
        """Runner threads that died unexpectedly and were replaced."""

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        self._reclaim_at_start()
        self._last_reap = time.monotonic() - REAP_EVERY_SECONDS
        self._pool = [self._spawn_pool_thread(slot) for slot in range(self.workers)]
        self._start_role("acker", self._acker.run)
        self._start_role("heartbeat", self._heartbeat_main, restart_when_stopping=True)
        if self.listen:
            self._start_role("listener", self._listener.run)
        self._start_role("lease", self._lease_loop.run)

    def _reclaim_at_start(self) -> None:
        """Take back the jobs of workers that died; crash loops dead-lettered here
        get their failure recorded by their handler and reported like a last attempt."""
        try:
            crash_loops = reclaim_at_start(self._engine, self._handlers)
        except SQLAlchemyError as exc:
            logger.warning("could not reclaim orphaned jobs at start-up: %s", short_error(exc))
            return
        for loop in crash_loops:
            lease = loop.lease
            self._outcomes.notify_observer("job_finished", lease.payload.kind, "dead", 0.0)
            handler = self._handlers.get(lease.payload.kind)
            if handler is None or loop.breadcrumb is None:
                continue
            self._outcomes.publish(
                "failed",
                InFlight(lease, handler, breadcrumb=loop.breadcrumb),
                attempt=lease.attempts,
                max_attempts=lease.max_attempts,
                will_retry=False,
                error=loop.error,
            )

    def stop(self) -> None:
        """Ask the runner to stop; returns at once."""
        self._stopping.set()
        self._lease_loop.wake()
        self._heartbeat.wake()

    def wait_stopping(self, timeout: float | None = None) -> bool:
        """Block until `stop()` was called (or `timeout` passes)."""
        return self._stopping.wait(timeout)

    def join(self, timeout: float = 10.0) -> bool:
        """Wait up to `timeout` seconds for the runner's threads; `True` if all ended.

        Pool threads stuck in an abandoned dispatch are not waited for."""
        deadline = time.monotonic() + timeout
        for role in ("lease", "heartbeat", "acker", "listener"):
            thread = self._threads.get(role)
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        live = self._live_pool()
        for thread in live:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in [*self._threads.values(), *live] if t.is_alive()]
        if alive:
            logger.warning("runner threads still running after %.0f s: %s", timeout, alive)
        return not alive

    def slots(self) -> int:
        """How many jobs the runner holds at most: the pool, plus the prefetch."""
        return self._lease_loop.slots()

    @property
    def lease_rounds(self) -> int:
        """Lease statements run so far (tests synchronise on it)."""
        return self._lease_loop.rounds

    def _live_pool(self) -> list[threading.Thread]:
        """Pool threads, less those stuck in an abandoned dispatch."""
        return [thread for thread in self._pool if thread not in self._stuck]

    @property
    def in_flight(self) -> int:
        """Jobs leased and not yet finished or given up."""
        return len(self._jobs)

    @property
    def listener(self) -> WakeupListener:
        return self._listener

    @property
    def acker(self) -> Acker:
        return self._acker

    def _start_role(
        self, role: str, target: Callable[[], None], *, restart_when_stopping: bool = False
    ) -> None:
        thread = threading.Thread(
            target=self._guarded,
            args=(role, target, restart_when_stopping),
            name=f"{self._name}-{role}",
            daemon=True,
        )
        self._threads[role] = thread
        thread.start()

    def _guarded(self, role: str, target: Callable[[], None], restart_when_stopping: bool) -> None:
        try:
            target()
        except BaseException:
            self.worker_deaths += 1
            logger.critical(
                "%s thread %s died unexpectedly; starting a new one",
                role,
                threading.current_thread().name,
                exc_info=True,
            )
            if self._stopping.is_set() and not restart_when_stopping:
                return
            self._stopping.wait(RESTART_DELAY_SECONDS)
            self._start_role(role, target, restart_when_stopping=restart_when_stopping)

    def _dispatch(self, batch: list[InFlight]) -> None:
        self._jobs.add(batch)
        for job in batch:
            if job.nothing_to_do and self._jobs.move(job, _QUEUED, JobState.FINISHING):
                now = time.monotonic()
                job.ctx = JobContext(job.lease, now, job.cancel, now, _label(job))
                self._acker.put(job)
            else:
                self._handoff.put(job)

    # --- the pool ----------------------------------------------------------

    def _spawn_pool_thread(self, slot: int) -> threading.Thread:
        thread = threading.Thread(
            target=self._pool_main, args=(slot,), name=f"dispatch-{self._name}-{slot}", daemon=True
        )
        thread.start()
        return thread

    def _pool_main(self, slot: int) -> None:
        me = threading.current_thread()
        while True:
            job = self._handoff.get()
            if job is None:
                return
            started = time.monotonic()
            try:
                self._run_job(job, slot)
                self._lease_loop.job_took(time.monotonic() - started)
            except BaseException:
                logger.critical("pool thread %s: unexpected error", me.name, exc_info=True)
                self._jobs.remove(job)
            if me in self._stuck:
                self._stuck.discard(me)  # its job was given up and it was replaced
                return

    def _run_job(self, job: InFlight, slot: int) -> None:
        handler, lease = job.handler, job.lease
        job_id = str(lease.id)
        label = f"job {job_id}"
        if job.load_error is None:
            try:
                label = f"{label} ({handler.describe(job.item)})"
                job.breadcrumb = handler.breadcrumb(job.item)
            except Exception:
                logger.exception("%s: no breadcrumb; events suppressed for this job", label)
        page_id = job.breadcrumb.get("page_id") if job.breadcrumb else None
        job.fields = {
            "job_id": job_id,
            "kind": lease.payload.kind,
            "attempt": lease.attempts,
            "page_id": None if page_id is None else str(page_id),
        }
        started = time.monotonic()
        ctx = JobContext(lease, started + self.job_timeout, job.cancel, started, label)
        job.ctx, job.slot = ctx, slot
        if not self._jobs.move(job, _QUEUED, JobState.EXECUTING):
            return  # released on shutdown before it started
        if ctx.deadline < self._heartbeat.wake_at:
            self._heartbeat.wake()
        with job_log_context(**job_fields(job)):
            if job.load_error is not None:
                if self._finishing(job):
                    self._outcomes.fail(job, ctx, job.load_error, permanent=False)
                    self._jobs.remove(job)
                return
            self._outcomes.publish("started", job, attempt=lease.attempts)
            logger.info("%s started, attempt %d/%d", label, lease.attempts, lease.max_attempts)
            error: BaseException | None = None
            result: Any = None
            try:
                result = handler.execute(job.item, ctx)
            except BaseException as exc:
                error = exc
            if not self._finishing(job):
                logger.info("%s: dispatch ended after the job was given up; discarded", label)
                return
            if error is not None:
                self._failed(job, ctx, error)
            elif self._writes_result[handler.kind]:
                self._outcomes.complete(job, ctx, result)
            else:
                self._acker.put(job)
                return
            self._jobs.remove(job)

    def _finishing(self, job: InFlight) -> bool:
        if not self._jobs.move(job, _EXECUTING, JobState.FINISHING):
            return False
        self._lease_loop.slot_freed()
        return True

    def _failed(self, job: InFlight, ctx: JobContext, error: BaseException) -> None:
        if isinstance(error, DispatchTimeout):
            message = job.handler.timeout_message
        else:
            message = describe_error(error)
        if not isinstance(error, ServiceError):
            logger.error("%s: unexpected error in dispatch", ctx.label, exc_info=error)
        self._outcomes.fail(job, ctx, message, permanent=is_permanent(error))
        if self._readiness is not None and not is_permanent(error):
            # A failed attempt may mean the model server just went down: ask it
            # before the next lease instead of trusting the last ready answer.
            self._readiness.recheck()

    def _acked(self, job: InFlight, written: bool) -> None:
        try:
            with job_log_context(**job_fields(job)):
                if job.ctx is not None:
                    self._outcomes.report_done(job, job.ctx, written)
        except Exception:
            logger.exception("could not report the ack of job %s", job.lease.id)
        finally:
            self._jobs.remove(job)

    # --- called by the heartbeat -------------------------------------------

    def _abandoned(self, job: InFlight, was: JobState) -> None:
        if was is JobState.EXECUTING:
            # Its pool thread is stuck in `execute`: a new one takes the slot
            # (unless the pool is closing), and nobody waits for the old one.
            self._stuck.add(self._pool[job.slot])
            if not self._stopping.is_set():
                self._pool[job.slot] = self._spawn_pool_thread(job.slot)
        self._lease_loop.slot_freed()

    def _timed_out(self, job: InFlight) -> None:
        assert job.ctx is not None
        with job_log_context(**job_fields(job)):
            self._outcomes.fail(job, job.ctx, job.handler.timeout_message, permanent=False)

    def _wait_for_lease_loop(self) -> None:
        thread = self._threads.get("lease")
        if thread is not None and thread is not threading.current_thread():
            thread.join(SHUTDOWN_JOIN_SECONDS)

    def _heartbeat_main(self) -> None:
        self._heartbeat.run()
        if not self._stopping.is_set():
            return
        # Shutdown: jobs already writing their outcome finish; then the acker
        # writes what it holds and ends.
        live = self._live_pool()
        for _ in live:
            self._handoff.put(None)
        deadline = time.monotonic() + SHUTDOWN_JOIN_SECONDS
        for thread in live:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._acker.close()

    def _maybe_reap(self) -> None:
        if not self._reap_retention_days:
            return
        if time.monotonic() - self._last_reap < REAP_EVERY_SECONDS:
            return
        self._last_reap = time.monotonic()
        try:
            with self._engine.begin() as conn:
                reaped = reap_done(conn, self._reap_retention_days)
            if reaped:
                logger.info(
                    "deleted %d done job(s) older than %d days", reaped, self._reap_retention_days
                )
        except SQLAlchemyError as exc:
            logger.warning("could not reap done jobs: %s", exc)


def _label(job: InFlight) -> str:
    return job.ctx.label if job.ctx is not None else f"job {job.lease.id}"


__all__ = ["DatabaseUnavailable", "Runner", "is_transient_db_error"]
