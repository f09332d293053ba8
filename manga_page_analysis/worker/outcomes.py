"""What is said about every end of a job, once the acker wrote it: the log
line, the observer's call and the event, in that order, after the commit of
the fact they report; a job leaves the registry of in-flight jobs here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from manga_page_analysis.errors import ServiceError, without_reprs
from manga_page_analysis.queue import End, Outcome
from manga_page_analysis.worker.inflight import InFlight, InFlightJobs
from manga_page_analysis.worker.reports.events import EventBus, JobEvent
from manga_page_analysis.worker.reports.logcontext import job_log_context
from manga_page_analysis.worker.reports.observer import RunnerObserver

logger = logging.getLogger(__name__)


def describe_error(exc: BaseException) -> str:
    message = without_reprs(str(exc))
    if isinstance(exc, ServiceError) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class Outcomes:
    """Reports every end of a job: log line, observer, event. Thread-safe."""

    def __init__(
        self, jobs: InFlightJobs, events: EventBus | None, observer: RunnerObserver | None
    ) -> None:
        self._jobs = jobs
        self._events = events
        self._observer = observer

    # --- reported after the acker wrote a job's end -----------------------

    def failed(self, job: InFlight, end: End, *, written: bool) -> None:
        """A failed attempt (`end`: retry or dead) was written, or fenced off
        (`written` False). The job then leaves the registry."""
        try:
            with job_log_context(job.log_fields):
                self._failed(job, end, written)
        except Exception:
            logger.exception("could not report the failure of job %s", job.lease.id)
        finally:
            self._jobs.remove(job)

    def _failed(self, job: InFlight, end: End, written: bool) -> None:
        lease, error = job.lease, end.reason
        terminal = end.outcome is Outcome.DEAD
        if not written:
            logger.warning(
                "%s failed (%s) after its lease was lost; nothing recorded", job.label, error
            )
            return
        self.observe(job, "dead" if terminal else "failed")
        if terminal:
            logger.error(
                "%s failed on attempt %d/%d; moved to dead: %s",
                job.label,
                lease.attempts,
                lease.max_attempts,
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

    def acked(self, job: InFlight, written: bool) -> None:
        """Its ack (and result) committed in a batch, or was fenced off (`written` False)."""
        try:
            with job_log_context(job.log_fields):
                if not written:
                    logger.warning("%s: lease no longer current; result discarded", job.label)
                    return
                self.observe(job, "done")
                if job.nothing_to_do:
                    self.publish("skipped", job, attempt=job.lease.attempts)
                    return
                if self._events is None and not logger.isEnabledFor(logging.INFO):
                    return  # nobody to tell how long it took
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

    def released(self, job: InFlight, written: bool, why: str) -> None:
        """A job was released (`why`): on shutdown, reclaimed, or after a failure that
        was not its fault; or its lease was already gone. The job then leaves the registry."""
        try:
            with job_log_context(job.log_fields):
                if not written:
                    logger.warning("%s: lease already gone; nothing released", job.label)
                    return
                logger.info("%s %s (attempt refunded)", job.label, why)
                self.observe(job, "released")
                self.publish("cancelled", job, attempt=job.lease.attempts)
        except Exception:
            logger.exception("could not report the release of job %s", job.lease.id)
        finally:
            self._jobs.remove(job)  # an abandoned job has left already: no-op

    def lease_lost(self, job: InFlight) -> None:
        with job_log_context(job.log_fields):
            logger.warning(
                "%s lost its lease (generation %d); its result will be discarded",
                job.label,
                job.lease.lease_generation,
            )
            self.notify_observer("lease_lost", job.lease.payload.kind)

    # --- helpers -------------------------------------------------------------

    def observe(self, job: InFlight, outcome: str) -> None:
        if self._observer is None:
            return
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
        if self._events is None:
            return
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
