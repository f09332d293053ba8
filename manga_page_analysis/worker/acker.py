"""The one writer of job ends. Every end of a job a runner holds goes
through it as an `End` (`manga_page_analysis.queue.ends`): done, a failed
attempt (retry or dead, by the one terminal rule), released (never started,
or on shutdown), and the ends found at lease or reclaim (a poison payload, a
final attempt whose lease expired, the crash-loop limit, a reclaim's
release). Pool threads, the heartbeat, the lease loop, the reclaim and the
shutdown only hand ends over.

The acker gathers ends for up to `linger` seconds (or `max_batch` of them)
and writes them together on its own connection with `write_ends` (one fenced
statement per outcome present: a stale lease changes only its own row), then
`save` for the done jobs and `save_failure` for the dead ones whose row
changed, in the same transaction. A batch that saves nothing is written in
autocommit statements. If a `save` or `save_failure` raises, the batch is
rolled back and written one job per transaction, so only the job at fault is
affected: a result that cannot be saved fails its attempt; a failure that
cannot be recorded is written without its record. Through an outage the
batch is kept, ends that arrive meanwhile join it, and it is retried with the
runner's retry policy (`dbsession.DbRetry`).

Log lines, metrics and events (`Outcomes`) follow the commit, the same for
every end whatever its cause.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections.abc import Iterable
from typing import Any, Final

from sqlalchemy import Connection, Engine

from manga_page_analysis.queue import DONE, End, Outcome, after_failure, released, write_ends
from manga_page_analysis.worker.dbsession import DatabaseUnavailable, DbSession
from manga_page_analysis.worker.handler import JobContext
from manga_page_analysis.worker.inflight import InFlight
from manga_page_analysis.worker.outcomes import Outcomes, describe_error
from manga_page_analysis.worker.reports.outage import DatabaseOutage
from manga_page_analysis.worker.service import ThreadService

logger = logging.getLogger(__name__)

GATHER_WHILE_DOWN_SECONDS: Final = 1.0
"""While the database is away, how often the acker stops waiting to gather the
ends that arrived meanwhile (the retries themselves keep the policy's pace)."""

Finished = tuple[InFlight, Any, End, bool]
"""A job, what its `execute` returned (done only), its end, and whether its
end may still be recorded (`False` once its `save_failure` failed)."""


class Acker(ThreadService):
    role = "acker"

    def __init__(
        self,
        engine: Engine,
        outage: DatabaseOutage,
        outcomes: Outcomes,
        *,
        linger: float = 0.002,
        max_batch: int = 1000,
        name: str = "worker",
    ) -> None:
        super().__init__(name)
        self._engine = engine
        self._outage = outage
        self.outcomes = outcomes
        """Reports each end once written (pool threads publish `started` through it)."""
        self.linger = linger
        self.max_batch = max_batch
        # `None` is the stop marker.
        self._queue: queue.SimpleQueue[Finished | None] = queue.SimpleQueue()
        self.batches = 0
        """Batches written (for tests and benchmarks)."""
        self.acked = 0
        """Job ends whose batch was written (or fenced off); `acked / batches`
        is the mean batch size (`make bench` reports it)."""

    # --- what the rest of the runner hands over --------------------------------

    def end(self, job: InFlight, end: End, result: Any = None) -> None:
        """Write `job`'s `end` (with `result`, for `save`, when it is done)."""
        self._queue.put((job, result, end, True))

    def done(self, job: InFlight, result: Any = None) -> None:
        """`job` finished: done (and `save` its result)."""
        self._queue.put((job, result, DONE, True))

    def fail(self, job: InFlight, error: str, *, permanent: bool) -> None:
        """`job`'s attempt failed: retry after backoff, or dead (with `save_failure`)."""
        self._queue.put((job, None, after_failure(job.lease, error, permanent=permanent), True))

    def release(self, jobs: Iterable[InFlight], why: str) -> None:
        """Release the jobs (given up before or while they ran); `why` ends their log lines."""
        end = released(why)
        for job in jobs:
            self._queue.put((job, None, end, True))

    def _request_stop(self) -> None:
        # Whatever was put before this is written first.
        self._queue.put(None)

    # --- the writer thread ---------------------------------------------------------

    def run(self) -> None:
        # Its retries end on `stopped` only: what is queued is written even
        # while the runner shuts down, unless the database stays away.
        session = DbSession(self._engine, self._outage, self.stopped, autocommit=True)
        pending: list[Finished] = []
        closing = False
        try:
            while not closing:
                closing = self._gather(pending)
                while pending:
                    try:
                        changed = self._write(session, pending)
                    except DatabaseUnavailable:
                        closing = self._gather(pending, wait=False) or closing
                        if self.stopped.is_set():
                            logger.error(
                                "could not write the end of %d job(s) before shutdown; their "
                                "leases will expire and they will run again",
                                len(pending),
                            )
                            return
                        continue
                    self.batches += 1
                    self.acked += len(pending)
                    batch, pending = pending, []
                    self._report(batch, changed)
        finally:
            session.close()

    def _report(self, batch: list[Finished], changed: set[uuid.UUID]) -> None:
        outcomes = self.outcomes
        for job, _result, end, _record in batch:
            written = job.lease.id in changed
            outcome = end.outcome
            if outcome is Outcome.DONE:
                outcomes.acked(job, written)
            elif outcome is Outcome.RELEASE:
                outcomes.released(job, written, end.reason)
            else:
                outcomes.failed(job, end, written=written)

    def _write(self, session: DbSession, batch: list[Finished]) -> set[uuid.UUID]:
        """Write the batch; the ids whose row changed. A done job whose `save`
        failed alone is turned into a failed attempt in `batch` itself."""
        within = GATHER_WHILE_DOWN_SECONDS
        if not any(_records(entry) for entry in batch):
            return session.run(lambda conn: _end_all(conn, batch), within=within)
        try:
            return session.run(
                lambda conn: _end_all(conn, batch, record=True), atomic=True, within=within
            )
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            if len(batch) == 1:
                batch[0] = self._without_record(batch[0], exc)
                return self._write(session, batch)
            logger.warning(
                "a batch of %d job end(s) could not be written (%s); writing each alone",
                len(batch),
                describe_error(exc),
            )
        changed: set[uuid.UUID] = set()
        for index, entry in enumerate(batch):
            one = [entry]
            changed |= self._write(session, one)
            batch[index] = one[0]
        return changed

    def _without_record(self, entry: Finished, exc: Exception) -> Finished:
        job, _result, end, _record = entry
        if end.outcome is Outcome.DONE:
            logger.error("%s: saving the result failed", job.label, exc_info=exc)
            failure = after_failure(job.lease, f"could not save result: {describe_error(exc)}")
            return (job, None, failure, True)
        logger.error("%s: recording its failure failed", job.label, exc_info=exc)
        return (job, None, end, False)

    def _gather(self, batch: list[Finished], wait: bool = True) -> bool:
        """Add queued ends to `batch`: block for the first one, then linger.
        Returns `True` once `stop()` was called and everything before it is in."""
        get, get_nowait = self._queue.get, self._queue.get_nowait
        if wait and not batch:
            finished = get()
            if finished is None:
                return True
            batch.append(finished)
        deadline = time.monotonic() + self.linger
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic() if wait else 0.0
            try:
                finished = get(timeout=remaining) if remaining > 0 else get_nowait()
            except queue.Empty:
                return False
            if finished is None:
                return True
            batch.append(finished)
        return False


def _saves(job: InFlight) -> bool:
    return not job.nothing_to_do and bool(getattr(job.handler, "writes_result", True))


def _records(entry: Finished) -> bool:
    """Whether writing `entry` may call its handler (`save` or `save_failure`)."""
    job, _result, end, record = entry
    if end.outcome is Outcome.DONE:
        return _saves(job)
    return end.outcome is Outcome.DEAD and record and job.item is not None


def _end_all(conn: Connection, batch: list[Finished], *, record: bool = False) -> set[uuid.UUID]:
    """`write_ends` for the batch, then (with `record`) the handlers' writes for
    the rows that changed."""
    changed = write_ends(conn, [(entry[0].lease, entry[2]) for entry in batch])
    if record:
        for entry in batch:
            job, result, end, _record = entry
            if job.lease.id not in changed or not _records(entry):
                continue
            ctx = job.ctx or _context_of_unstarted(job)
            if end.outcome is Outcome.DONE:
                job.handler.save(conn, job.item, result, ctx)
            else:
                job.handler.save_failure(conn, job.item, end.reason, ctx)
    return changed


def _context_of_unstarted(job: InFlight) -> JobContext:
    """The context of a job that ends without having run (at lease, at reclaim):
    no time spent, nothing to stop."""
    now = time.monotonic()
    return JobContext(job.lease, now, job.stop, now, job.label)
