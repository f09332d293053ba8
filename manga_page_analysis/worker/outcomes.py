"""How a job's run ends: the fenced writes of failures, and what is said about every end.

A failure is one transaction: the fenced `ack_failed`/`ack_dead` first, then
`save_failure` only when that changed the row, so a late or fenced-off failure
never lands. Log lines, observer calls and events follow the commit of the
fact they report; a job leaves the registry of in-flight jobs here.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from manga_page_analysis.errors import ServiceError, without_reprs
from manga_page_analysis.queue import Lease, ack_dead, ack_failed, release_many
from manga_page_analysis.worker.dbsession import is_transient_db_error, short_error
from manga_page_analysis.worker.events import EventBus, JobEvent
from manga_page_analysis.worker.inflight import InFlight, InFlightJobs
from manga_page_analysis.worker.logcontext import job_log_context
from manga_page_analysis.worker.observer import RunnerObserver
from manga_page_analysis.worker.outage import DatabaseOutage

logger = logging.getLogger(__name__)

T = TypeVar("T")


def describe_error(exc: BaseException) -> str:
    message = without_reprs(str(exc))
    if isinstance(exc, ServiceError) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class Outcomes:
    """Writes failures, and reports every end of a job: log line, observer, event.

    Thread-safe: pool threads, the acker and the heartbeat all call it."""

    def __init__(
        self,
        engine: Engine,
        jobs: InFlightJobs,
        events: EventBus | None,
        observer: RunnerObserver | None,
        stopping: threading.Event,
        outage: DatabaseOutage,
    ) -> None:
        self._engine = engine
        self._jobs = jobs
        self._outage = outage
        self._events = events
        self._observer = observer
        self._stopping = stopping

    # --- a failed attempt: one fenced transaction --------------------------

    def fail(self, job: InFlight, error: str, *, permanent: bool) -> None:
        """Record a failed attempt: retry after backoff, or dead (with `save_failure`).
        The job then leaves the registry."""
        try:
            self._fail(job, error, permanent)
        finally:
            self._jobs.remove(job)

    def _fail(self, job: InFlight, error: str, permanent: bool) -> None:
        lease, handler, item, ctx = job.lease, job.handler, job.item, job.ctx
        terminal = permanent or lease.attempts >= lease.max_attempts

        def write(conn: Connection) -> bool:
            acked = (ack_dead if permanent else ack_failed)(conn, lease, error)
            if acked and terminal and item is not None and ctx is not None:
                handler.save_failure(conn, item, error, ctx)
            return acked

        try:
            written = self._write(write)
        except Exception as exc:
            logger.error(
                "%s failed (%s) and the failure could not be recorded (%s); the lease "
                "will expire and the job will run again",
                job.label,
                error,
                short_error(exc),
            )
            return
        if not written:
            logger.warning(
                "%s failed (%s) after its lease was lost; nothing recorded", job.label, error
            )
            return
        self.observe(job, "dead" if terminal else "failed")
        if terminal:
            reason = "a permanent error" if permanent else "its last attempt"
            logger.error(
                "%s failed on attempt %d/%d with %s; moved to dead: %s",
                job.label,
                lease.attempts,
                lease.max_attempts,
                reason,
                error,
            )
        else:
            logger.warning(
                "%s failed on attempt %d/%d; will retry after backoff: %s",
                job.label,
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

    # --- reported after a batch committed ----------------------------------

    def acked(self, job: InFlight, written: bool) -> None:
        """Its ack (and result) committed in a batch, or was fenced off (`written` False)."""
        try:
            with job_log_context(**job.log_fields):
                if not written:
                    logger.warning("%s: lease no longer current; result discarded", job.label)
                    return
                self.observe(job, "done")
                if job.nothing_to_do:
                    return
                duration_ms = job.ctx.elapsed_ms() if job.ctx is not None else 0
                logger.info(
                    "%s completed in %d ms",
                    job.label,
                    duration_ms,
                    extra={"duration_ms": duration_ms},
                )
                self.publish("completed", job, attempt=job.lease.attempts, duration_ms=duration_ms)
        except Exception:
            logger.exception("could not report the ack of job %s", job.lease.id)
        finally:
            self._jobs.remove(job)

    def release_all(self, jobs: list[InFlight], why: str) -> None:
        """Give back abandoned jobs in one fenced statement (`pending` at once,
        attempt refunded); each is reported: `why` it went back, or that its
        lease was already gone."""
        try:
            released = self._write(lambda conn: release_many(conn, [job.lease for job in jobs]))
        except Exception as exc:
            logger.error(
                "could not give back %d job(s) (%s); their leases will expire and they "
                "will be reclaimed",
                len(jobs),
                short_error(exc),
            )
            return
        for job in jobs:
            with job_log_context(**job.log_fields):
                if job.lease.id not in released:
                    logger.warning("%s: lease already gone; nothing given back", job.label)
                    continue
                logger.info("%s %s (attempt refunded)", job.label, why)
                self.observe(job, "released")
                self.publish("cancelled", job, attempt=job.lease.attempts)

    def lease_lost(self, job: InFlight) -> None:
        with job_log_context(**job.log_fields):
            logger.warning(
                "%s lost its lease (generation %d); its result will be discarded",
                job.label,
                job.lease.lease_generation,
            )
            self.notify_observer("lease_lost", job.lease.payload.kind)

    def crash_loop(self, lease: Lease, breadcrumb: Mapping[str, Any] | None, error: str) -> None:
        """Dead-lettered by the maintenance after crashing its workers again and again."""
        self.notify_observer("job_finished", lease.payload.kind, "dead", 0.0)
        details = {
            "attempt": lease.attempts,
            "max_attempts": lease.max_attempts,
            "will_retry": False,
            "error": error,
        }
        self._publish("failed", lease.id, breadcrumb, details)

    # --- helpers -------------------------------------------------------------

    def observe(self, job: InFlight, outcome: str) -> None:
        seconds = job.ctx.elapsed_ms() / 1000 if job.ctx is not None else 0.0
        self.notify_observer("job_finished", job.lease.payload.kind, outcome, max(0.0, seconds))

    def notify_observer(self, method: str, *args: Any) -> None:
        # Methods are optional: an observer written before one existed lacks it.
        call = getattr(self._observer, method, None)
        if call is None:
            return
        try:
            call(*args)
        except Exception:
            logger.exception("runner observer failed in %s", method)

    def publish(self, event_type: str, job: InFlight, **details: Any) -> None:
        self._publish(event_type, job.lease.id, job.breadcrumb, details)

    def _publish(
        self,
        event_type: str,
        job_id: uuid.UUID,
        breadcrumb: Mapping[str, Any] | None,
        details: dict[str, Any],
    ) -> None:
        if self._events is None or breadcrumb is None:
            return
        try:
            self._events.publish(JobEvent(event_type, job_id, breadcrumb, details))
        except Exception:
            logger.exception("could not publish %s for job %s", event_type, job_id)

    def _sleep(self, seconds: float) -> None:
        # Waits between database retries end early on shutdown.
        self._stopping.wait(seconds)

    def _report_outage(self, state: RetryCallState) -> None:
        # Logged as the outage (once), not per retry of each job.
        self._outage.failed(short_error(state.outcome.exception()) if state.outcome else "?", 1)

    def _write(self, work: Callable[[Connection], T]) -> T:
        """`work(conn)` in a short transaction, retried through a dropped
        connection or a restart."""
        for attempt in Retrying(
            retry=retry_if_exception(is_transient_db_error),
            stop=stop_after_attempt(4),
            wait=wait_exponential(multiplier=0.25, max=2.0),
            sleep=self._sleep,
            reraise=True,
            before_sleep=self._report_outage,
        ):
            with attempt, self._engine.begin() as conn:
                return work(conn)
        raise AssertionError("unreachable")  # pragma: no cover
