"""How a job's run ends: the fenced writes, and what is said about them.

Results that a handler writes, and failures, get one fenced transaction per
job that first locks the row and checks the lease is current (`holds`), so
a late or fenced-off result can never land. What is written in batches (acks
of handlers that write nothing, releases on shutdown) is reported here job
by job once the batch committed. Events and observer calls always follow
the commit of the fact they report.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import Engine
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from app.errors import ServiceError, without_reprs
from app.queue.jobs import ack_dead, ack_done, ack_failed, holds
from app.worker.dbsession import is_transient_db_error, short_error
from app.worker.events import EventBus, JobEvent
from app.worker.handler import JobContext, JobHandler
from app.worker.inflight import InFlight
from app.worker.logcontext import job_log_context
from app.worker.observer import RunnerObserver
from app.worker.outage import DatabaseOutage

logger = logging.getLogger(__name__)

T = TypeVar("T")
AnyHandler = JobHandler[Any, Any]


def is_permanent(exc: BaseException) -> bool:
    """Errors that no retry can fix say so with `retryable = False`."""
    return getattr(exc, "retryable", True) is False


def describe_error(exc: BaseException) -> str:
    message = without_reprs(str(exc))
    if isinstance(exc, ServiceError) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def job_fields(job: InFlight) -> dict[str, Any]:
    """The log fields of a job: job_id, kind, attempt, and page_id when the breadcrumb has one.

    Kept on the job once its breadcrumb is known (computed once, not per log block)."""
    if job.fields is not None:
        return job.fields
    lease = job.lease
    page_id = job.breadcrumb.get("page_id") if job.breadcrumb else None
    return {
        "job_id": str(lease.id),
        "kind": lease.payload.kind,
        "attempt": lease.attempts,
        "page_id": None if page_id is None else str(page_id),
    }


class Outcomes:
    def __init__(
        self,
        engine: Engine,
        events: EventBus | None,
        observer: RunnerObserver | None,
        stopping: threading.Event,
        outage: DatabaseOutage,
    ) -> None:
        self._engine = engine
        self._outage = outage
        self._events = events
        self._observer = observer
        self._stopping = stopping

    # --- per job, one fenced transaction -----------------------------------

    def complete(self, job: InFlight, ctx: JobContext, result: Any) -> None:
        """Save the result and ack done, in one transaction, only while the lease is current."""
        handler, item = job.handler, job.item

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
                    short_error(exc),
                )
                return
            logger.exception("%s: saving the result failed", ctx.label)
            self.fail(job, ctx, f"could not save result: {describe_error(exc)}", permanent=False)
            return
        self.report_done(job, ctx, written)

    def report_done(self, job: InFlight, ctx: JobContext, written: bool) -> None:
        """After the ack committed (alone or in a batch): log, observe, publish."""
        if not written:
            logger.warning("%s: lease no longer current; result discarded", ctx.label)
            return
        self.observe(job, ctx, "done")
        if job.nothing_to_do:
            return
        duration_ms = ctx.elapsed_ms()
        logger.info(
            "%s completed in %d ms", ctx.label, duration_ms, extra={"duration_ms": duration_ms}
        )
        self.publish("completed", job, attempt=ctx.lease.attempts, duration_ms=duration_ms)

    def fail(self, job: InFlight, ctx: JobContext, error: str, *, permanent: bool) -> None:
        """Record a failed attempt: retry after backoff, or dead (with `save_failure`)."""
        lease, handler, item = ctx.lease, job.handler, job.item
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
                short_error(exc),
            )
            return
        if not written:
            logger.warning(
                "%s failed (%s) after its lease was lost; nothing recorded", ctx.label, error
            )
            return
        self.observe(job, ctx, "dead" if terminal else "failed")
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
        self.publish(
            "failed",
            job,
            attempt=lease.attempts,
            max_attempts=lease.max_attempts,
            will_retry=not terminal,
            error=error,
        )

    # --- reported after a batch --------------------------------------------

    def report_released(self, job: InFlight, released: bool, label: str) -> None:
        with job_log_context(**job_fields(job)):
            if not released:
                logger.warning("%s: lease already gone at shutdown; nothing released", label)
                return
            logger.info("%s released on shutdown (attempt refunded)", label)
            if job.ctx is not None:
                self.observe(job, job.ctx, "released")
            else:
                self.notify_observer("job_finished", job.lease.payload.kind, "released", 0.0)
            self.publish("cancelled", job, attempt=job.lease.attempts)

    def report_lease_lost(self, job: InFlight, label: str) -> None:
        with job_log_context(**job_fields(job)):
            logger.warning(
                "%s lost its lease (generation %d); its result will be discarded",
                label,
                job.lease.lease_generation,
            )
            self.notify_observer("lease_lost", job.lease.payload.kind)

    # --- helpers -------------------------------------------------------------

    def observe(self, job: InFlight, ctx: JobContext, outcome: str) -> None:
        seconds = max(0.0, ctx.elapsed_ms() / 1000)
        self.notify_observer("job_finished", job.lease.payload.kind, outcome, seconds)

    def notify_observer(self, method: str, *args: Any) -> None:
        if self._observer is None:
            return
        try:
            getattr(self._observer, method)(*args)
        except Exception:
            logger.exception("runner observer failed in %s", method)

    def publish(self, event_type: str, job: InFlight, **details: Any) -> None:
        breadcrumb: Mapping[str, Any] | None = job.breadcrumb
        if self._events is None or breadcrumb is None:
            return
        try:
            self._events.publish(JobEvent(event_type, job.lease.id, breadcrumb, details))
        except Exception:
            logger.exception("could not publish %s for job %s", event_type, job.lease.id)

    def _sleep(self, seconds: float) -> None:
        # Waits between database retries end early on shutdown.
        self._stopping.wait(seconds)

    def _report_outage(self, state: RetryCallState) -> None:
        # Logged as the outage (once), not per retry of each job.
        self._outage.failed(short_error(state.outcome.exception()) if state.outcome else "?", 1)

    def _with_db_retry(self, write: Callable[[], T], label: str) -> T:
        """Retry a short transaction through a dropped connection or a restart."""
        for attempt in Retrying(
            retry=retry_if_exception(is_transient_db_error),
            stop=stop_after_attempt(4),
            wait=wait_exponential(multiplier=0.25, max=2.0),
            sleep=self._sleep,
            reraise=True,
            before_sleep=self._report_outage,
        ):
            with attempt:
                return write()
        raise AssertionError("unreachable")  # pragma: no cover
