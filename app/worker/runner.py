"""The worker runner: a pool of owned threads that lease jobs and run handlers.

Generic over job kinds: it takes a handler per kind and owns leasing,
heartbeats, deadlines, fenced completion, events and shutdown for all of them.

Per worker thread, per job:

1. wait for the readiness gate (a model server that is down costs no attempt);
2. lease one job of the handled kinds, `load` it (a short transaction);
3. run `execute` on a dispatch thread while a heartbeat renews the lease, and
   wait for whichever comes first: the result, shutdown, the lease lost, the
   deadline. Threads cannot be killed, so a dispatch that is abandoned keeps
   running until its own network timeouts end; its result is never written;
4. write the result and ack in ONE transaction that first locks the row and
   checks the lease is current (`holds`), so a late or fenced-off result can
   never land.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from app.errors import DispatchTimeout, ServiceError
from app.queue.jobs import (
    Lease,
    ack_dead,
    ack_done,
    ack_failed,
    holds,
    lease_kinds,
    reap_done,
    reclaim_orphaned,
    release,
)
from app.worker.events import EventBus, JobEvent
from app.worker.handler import JobContext, JobHandler
from app.worker.heartbeat import Heartbeat
from app.worker.logcontext import job_log_context
from app.worker.observer import RunnerObserver
from app.worker.readiness import ReadinessGate

logger = logging.getLogger(__name__)

T = TypeVar("T")
AnyHandler = JobHandler[Any, Any]

SUPERVISE_SECONDS = 1.0
"""How often the supervisor checks that every worker thread is alive."""
REAP_EVERY_SECONDS = 3600.0
"""How often the supervisor deletes old `done` jobs."""
DB_RETRY_MAX_SECONDS = 30.0
"""Longest wait between lease attempts while the database is unreachable."""


def is_transient_db_error(exc: BaseException) -> bool:
    """A lost connection or a restarting server: worth one more try."""
    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def is_permanent(exc: BaseException) -> bool:
    """Errors that no retry can fix say so with `retryable = False`."""
    return getattr(exc, "retryable", True) is False


def describe_error(exc: BaseException) -> str:
    message = str(exc).strip()
    if isinstance(exc, ServiceError) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class _Dispatch:
    """One `execute` call on its own daemon thread."""

    def __init__(
        self, handler: AnyHandler, item: Any, ctx: JobContext, on_done: Callable[[], None]
    ):
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self._handler, self._item, self._ctx = handler, item, ctx
        self._on_done = on_done
        # The dispatch logs under the job's log fields too (threads start with
        # an empty context otherwise).
        self._context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=self._context.run,
            args=(self._run,),
            name=f"dispatch-{ctx.lease.id}",
            daemon=True,
        )

    def start(self) -> _Dispatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.result = self._handler.execute(self._item, self._ctx)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done = True
            self._on_done()


class Runner:
    """Runs `workers` threads over `handlers` until `stop()`.

    `start()` reclaims orphaned leases once and starts the threads;
    `stop()` only sets an event: in-flight jobs are released at once (attempt
    refunded, `cancelled` published) without waiting for their dispatch;
    `join()` waits a bounded time for the threads to finish.
    """

    def __init__(
        self,
        engine: Engine,
        handlers: Sequence[AnyHandler],
        *,
        workers: int = 2,
        lease_duration: timedelta = timedelta(seconds=60),
        job_timeout: float = 600.0,
        idle_poll: float = 1.0,
        readiness: ReadinessGate | None = None,
        events: EventBus | None = None,
        reap_retention_days: int = 0,
        name: str = "worker",
        observer: RunnerObserver | None = None,
    ) -> None:
        if not handlers:
            raise ValueError("a runner needs at least one handler")
        self._engine = engine
        self._handlers = {handler.kind: handler for handler in handlers}
        self.workers = workers
        self.lease_duration = lease_duration
        self.job_timeout = job_timeout
        self.idle_poll = idle_poll
        self._readiness = readiness
        self._events = events
        self._reap_retention_days = reap_retention_days
        self._name = name
        self._observer = observer
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._wakers: set[threading.Event] = set()
        self._threads: list[threading.Thread] = []
        self._supervisor: threading.Thread | None = None
        self.worker_deaths = 0
        """Worker threads that died unexpectedly and were replaced."""

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        try:
            with self._engine.begin() as conn:
                reclaim_orphaned(conn)
        except SQLAlchemyError as exc:
            logger.warning("could not reclaim orphaned jobs at start-up: %s", exc)
        self._threads = [self._spawn(slot) for slot in range(self.workers)]
        self._supervisor = threading.Thread(
            target=self._supervise, name=f"{self._name}-supervisor", daemon=True
        )
        self._supervisor.start()

    def stop(self) -> None:
        """Ask every worker to stop; returns at once."""
        self._stopping.set()
        with self._lock:
            for waker in self._wakers:
                waker.set()

    def wait_stopping(self, timeout: float | None = None) -> bool:
        """Block until `stop()` was called (or `timeout` passes)."""
        return self._stopping.wait(timeout)

    def join(self, timeout: float = 10.0) -> bool:
        """Wait up to `timeout` seconds for the worker threads; `True` if all ended."""
        deadline = time.monotonic() + timeout
        for thread in [*self._threads, *([self._supervisor] if self._supervisor else [])]:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [thread.name for thread in self._threads if thread.is_alive()]
        if alive:
            logger.warning("worker threads still running after %.0f s: %s", timeout, alive)
        return not alive

    def _spawn(self, slot: int) -> threading.Thread:
        thread = threading.Thread(
            target=self._worker_main, name=f"{self._name}-{slot}", daemon=True
        )
        thread.start()
        return thread

    def _supervise(self) -> None:
        last_reap = time.monotonic() - REAP_EVERY_SECONDS
        while not self._stopping.wait(SUPERVISE_SECONDS):
            for slot, thread in enumerate(self._threads):
                if not thread.is_alive() and not self._stopping.is_set():
                    self.worker_deaths += 1
                    logger.critical("worker thread %s is gone; starting a replacement", thread.name)
                    self._threads[slot] = self._spawn(slot)
            if self._reap_retention_days and time.monotonic() - last_reap >= REAP_EVERY_SECONDS:
                last_reap = time.monotonic()
                try:
                    with self._engine.begin() as conn:
                        reaped = reap_done(conn, self._reap_retention_days)
                    if reaped:
                        logger.info(
                            "deleted %d done job(s) older than %d days",
                            reaped,
                            self._reap_retention_days,
                        )
                except SQLAlchemyError as exc:
                    logger.warning("could not reap done jobs: %s", exc)

    # --- the worker loop ---------------------------------------------------

    def _worker_main(self) -> None:
        try:
            self._worker_loop()
        except BaseException:
            # Not re-raised: the supervisor notices the thread is gone and replaces it.
            logger.critical(
                "worker thread %s died unexpectedly; the supervisor will replace it",
                threading.current_thread().name,
                exc_info=True,
            )

    def _worker_loop(self) -> None:
        kinds = list(self._handlers)
        db_failures = 0
        while not self._stopping.is_set():
            if self._readiness is not None and not self._readiness.wait_ready(self._stopping):
                return
            try:
                with self._engine.begin() as conn:
                    leases = lease_kinds(conn, kinds, 1, self.lease_duration)
                db_failures = 0
            except SQLAlchemyError as exc:
                db_failures += 1
                delay = min(DB_RETRY_MAX_SECONDS, 0.5 * 2 ** min(db_failures, 6))
                logger.warning("could not lease jobs (%s); retrying in %.1f s", _short(exc), delay)
                self._stopping.wait(delay)
                continue
            if not leases:
                self._stopping.wait(self.idle_poll)
                continue
            self.process(leases[0])

    def process(self, lease: Lease) -> None:
        """Run one leased job to its end: done, failed, released or discarded."""
        with job_log_context(job_id=str(lease.id), kind=lease.payload.kind, attempt=lease.attempts):
            self._process(lease)

    def _process(self, lease: Lease) -> None:
        handler = self._handlers[lease.payload.kind]
        label = f"job {lease.id}"
        started = time.monotonic()
        ctx = JobContext(lease, started + self.job_timeout, threading.Event(), started, label)
        try:
            with self._engine.begin() as conn:
                item = handler.load(conn, lease)
        except Exception as exc:
            logger.exception("%s could not be loaded", label)
            self._fail(
                handler,
                None,
                ctx,
                None,
                f"could not load job: {describe_error(exc)}",
                permanent=False,
            )
            return
        if item is None:
            self._ack_nothing_to_do(lease, label)
            self._observe(ctx, "done")
            return

        label = f"job {lease.id} ({handler.describe(item)})"
        ctx = dataclasses.replace(ctx, label=label)
        breadcrumb = self._breadcrumb(handler, item, label)
        with job_log_context(page_id=_log_field(breadcrumb, "page_id")):
            self._run_loaded(handler, item, ctx, breadcrumb)

    def _run_loaded(
        self,
        handler: AnyHandler,
        item: Any,
        ctx: JobContext,
        breadcrumb: Mapping[str, Any] | None,
    ) -> None:
        lease, label = ctx.lease, ctx.label
        self._publish("started", lease, breadcrumb, attempt=lease.attempts)
        logger.info("%s started, attempt %d/%d", label, lease.attempts, lease.max_attempts)

        wake = threading.Event()
        with self._lock:
            self._wakers.add(wake)
        heartbeat = self._heartbeat(lease, wake, label)
        dispatch = _Dispatch(handler, item, ctx, wake.set).start()
        try:
            while True:
                wake.clear()
                if dispatch.done:
                    break
                if self._stopping.is_set():
                    ctx.cancel.set()
                    if self._release_on_shutdown(lease, breadcrumb, label):
                        self._observe(ctx, "released")
                    return
                if heartbeat.lost:
                    ctx.cancel.set()
                    self._notify_observer("lease_lost", lease.payload.kind)
                    logger.warning("%s: lease lost mid-dispatch; result discarded", label)
                    return
                if heartbeat.died is not None:
                    logger.critical("%s: heartbeat thread died; starting a new one", label)
                    heartbeat = self._heartbeat(lease, wake, label)
                remaining = ctx.deadline - time.monotonic()
                if remaining <= 0:
                    ctx.cancel.set()
                    self._fail(
                        handler, item, ctx, breadcrumb, handler.timeout_message, permanent=False
                    )
                    return
                wake.wait(remaining)
        finally:
            heartbeat.stop()
            with self._lock:
                self._wakers.discard(wake)

        if dispatch.error is not None:
            error = dispatch.error
            if isinstance(error, DispatchTimeout):
                message = handler.timeout_message
            else:
                message = describe_error(error)
            if not isinstance(error, ServiceError):
                logger.error("%s: unexpected error in dispatch", label, exc_info=error)
            self._fail(handler, item, ctx, breadcrumb, message, permanent=is_permanent(error))
            return
        self._complete(handler, item, ctx, breadcrumb, dispatch.result)

    # --- outcomes ----------------------------------------------------------

    def _complete(
        self,
        handler: AnyHandler,
        item: Any,
        ctx: JobContext,
        breadcrumb: Mapping[str, Any] | None,
        result: Any,
    ) -> None:
        def write() -> bool:
            with self._engine.begin() as conn:
                if not holds(conn, ctx.lease):
                    return False
                handler.save(conn, item, result, ctx)
                return ack_done(conn, ctx.lease)

        try:
            written = self._with_db_retry(write, ctx.label)
        except Exception as exc:
            if is_transient_db_error(exc):
                logger.error(
                    "%s: could not record the result (%s); the lease will expire and "
                    "the job will run again",
                    ctx.label,
                    _short(exc),
                )
                return
            logger.exception("%s: saving the result failed", ctx.label)
            self._fail(
                handler,
                item,
                ctx,
                breadcrumb,
                f"could not save result: {describe_error(exc)}",
                permanent=False,
            )
            return
        if not written:
            logger.warning("%s: lease no longer current; result discarded", ctx.label)
            return
        duration_ms = ctx.elapsed_ms()
        self._observe(ctx, "done")
        logger.info(
            "%s completed in %d ms", ctx.label, duration_ms, extra={"duration_ms": duration_ms}
        )
        self._publish(
            "completed", ctx.lease, breadcrumb, attempt=ctx.lease.attempts, duration_ms=duration_ms
        )

    def _fail(
        self,
        handler: AnyHandler,
        item: Any,
        ctx: JobContext,
        breadcrumb: Mapping[str, Any] | None,
        error: str,
        *,
        permanent: bool,
    ) -> None:
        lease = ctx.lease
        terminal = permanent or lease.attempts >= lease.max_attempts

        def write() -> bool:
            with self._engine.begin() as conn:
                if not holds(conn, lease):
                    return False
                if terminal and item is not None:
                    handler.save_failure(conn, item, error, ctx)
                if permanent:
                    return ack_dead(conn, lease, error)
                return ack_failed(conn, lease, error)

        try:
            written = self._with_db_retry(write, ctx.label)
        except Exception as exc:
            logger.error(
                "%s failed (%s) and the failure could not be recorded (%s); the lease "
                "will expire and the job will run again",
                ctx.label,
                error,
                _short(exc),
            )
            return
        if not written:
            logger.warning(
                "%s failed (%s) after its lease was lost; nothing recorded", ctx.label, error
            )
            return
        self._observe(ctx, "dead" if terminal else "failed")
        if terminal:
            reason = "a permanent error" if permanent else "its last attempt"
            logger.error(
                "%s failed on attempt %d/%d with %s; moved to dead: %s",
                ctx.label,
                lease.attempts,
                lease.max_attempts,
                reason,
                error,
            )
        else:
            logger.warning(
                "%s failed on attempt %d/%d; will retry after backoff: %s",
                ctx.label,
                lease.attempts,
                lease.max_attempts,
                error,
            )
        self._publish(
            "failed",
            lease,
            breadcrumb,
            attempt=lease.attempts,
            max_attempts=lease.max_attempts,
            will_retry=not terminal,
            error=error,
        )

    def _release_on_shutdown(
        self, lease: Lease, breadcrumb: Mapping[str, Any] | None, label: str
    ) -> bool:
        try:
            with self._engine.begin() as conn:
                released = release(conn, lease)
        except SQLAlchemyError as exc:
            logger.error(
                "%s: could not release on shutdown (%s); its lease will expire and "
                "it will be reclaimed",
                label,
                _short(exc),
            )
            return False
        if released:
            logger.info("%s released on shutdown (attempt refunded)", label)
            self._publish("cancelled", lease, breadcrumb, attempt=lease.attempts)
        return released

    def _ack_nothing_to_do(self, lease: Lease, label: str) -> None:
        try:
            with self._engine.begin() as conn:
                if holds(conn, lease):
                    ack_done(conn, lease)
        except SQLAlchemyError as exc:
            logger.warning("%s: could not ack (%s); the lease will expire", label, _short(exc))

    # --- helpers -----------------------------------------------------------

    def _heartbeat(self, lease: Lease, wake: threading.Event, label: str) -> Heartbeat:
        return Heartbeat(
            self._engine,
            lease,
            lease_duration=self.lease_duration,
            interval=self.lease_duration.total_seconds() / 3,
            on_change=wake.set,
            job_label=label,
        ).start()

    def _sleep(self, seconds: float) -> None:
        # Waits between database retries end early on shutdown.
        self._stopping.wait(seconds)

    def _with_db_retry(self, write: Callable[[], T], label: str) -> T:
        """Retry a short transaction through a dropped connection or a restart."""
        for attempt in Retrying(
            retry=retry_if_exception(is_transient_db_error),
            stop=stop_after_attempt(4),
            wait=wait_exponential(multiplier=0.25, max=2.0),
            sleep=self._sleep,
            reraise=True,
            before_sleep=lambda state: logger.warning(
                "%s: database unavailable (%s); retrying",
                label,
                _short(state.outcome.exception()) if state.outcome else "?",
            ),
        ):
            with attempt:
                return write()
        raise AssertionError("unreachable")  # pragma: no cover

    def _observe(self, ctx: JobContext, outcome: str) -> None:
        elapsed = time.monotonic() - ctx.started_at
        self._notify_observer("job_finished", ctx.lease.payload.kind, outcome, elapsed)

    def _notify_observer(self, method: str, *args: Any) -> None:
        if self._observer is None:
            return
        try:
            getattr(self._observer, method)(*args)
        except Exception:
            logger.exception("runner observer failed in %s", method)

    def _breadcrumb(self, handler: AnyHandler, item: Any, label: str) -> Mapping[str, Any] | None:
        try:
            return handler.breadcrumb(item)
        except Exception:
            logger.exception("%s: no breadcrumb; events suppressed for this job", label)
            return None

    def _publish(
        self, event_type: str, lease: Lease, breadcrumb: Mapping[str, Any] | None, **details: Any
    ) -> None:
        if self._events is None or breadcrumb is None:
            return
        try:
            self._events.publish(JobEvent(event_type, lease.id, breadcrumb, details))
        except Exception:
            logger.exception("could not publish %s for job %s", event_type, lease.id)


def _log_field(breadcrumb: Mapping[str, Any] | None, key: str) -> str | None:
    value = breadcrumb.get(key) if breadcrumb else None
    return None if value is None else str(value)


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return "?"
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
