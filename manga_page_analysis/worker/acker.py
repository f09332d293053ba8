"""The one writer of job ends: done, failed (retried after backoff, or dead),
given back (never started, or released at shutdown), for every job a runner
holds, and the crash-loop rule's dead-lettering of expired leases (asked for
by the maintenance leader, `reclaim_expired`). Pool threads, the heartbeat,
the shutdown and the maintenance only hand work over.

The acker gathers ends for up to `linger` seconds (or `max_batch` of them)
and writes them together on its own connection, each outcome ONE fenced
statement for the whole batch (`ack_done_many`, `ack_failed_many`,
`ack_dead_many`, `release_many`: a stale lease changes only its own row),
then `save` for the done jobs and `save_failure` for the dead ones whose row
changed, in the same transaction. A batch that saves nothing is written in
autocommit statements. If a `save` or `save_failure` raises, the batch is
rolled back and written one job per transaction, so only the job at fault is
affected: a result that cannot be saved fails its attempt; a failure that
cannot be recorded is written without its record. Through an outage the
batch is kept, ends that arrive meanwhile join it, and it is retried with the
runner's retry policy (`dbsession.DbRetry`).

A reclaim runs between batches, in a transaction of its own: expired leases
back to `pending`, or `dead` at the crash-loop limit with each dead job's
`save_failure` (in a savepoint) when the kind is this runner's.
Log lines, metrics and events (`Outcomes`) follow the commit.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, Engine

from manga_page_analysis.queue import (
    Lease,
    Reclaim,
    ack_dead_many,
    ack_done_many,
    ack_failed_many,
    reclaim_expired,
    release_many,
)
from manga_page_analysis.worker.dbsession import DatabaseUnavailable, DbSession
from manga_page_analysis.worker.handler import AnyHandler, JobContext
from manga_page_analysis.worker.inflight import InFlight
from manga_page_analysis.worker.outcomes import Outcomes, describe_error
from manga_page_analysis.worker.reports.outage import DatabaseOutage
from manga_page_analysis.worker.service import ThreadService

logger = logging.getLogger(__name__)

DONE: Final = "done"
FAILED: Final = "failed"
"""A failed attempt: `pending` after a backoff, or `dead` when it was the last."""
DEAD: Final = "dead"
"""A permanent error: `dead` at once."""
RELEASED: Final = "released"
"""Given back: `pending` at once, attempt refunded."""
GATHER_WHILE_DOWN_SECONDS: Final = 1.0
"""While the database is away, how often the acker stops waiting to gather the
ends that arrived meanwhile (the retries themselves keep the policy's pace)."""


@dataclass(slots=True)
class End:
    """How a job ended, other than done: `outcome` (`FAILED`, `DEAD` or
    `RELEASED`) with the error, or why it was given back; `record` is `False`
    once its `save_failure` has failed (it is then written without)."""

    outcome: str
    message: str
    record: bool = True


Finished = tuple[InFlight, Any, End | None]
"""A job, what its `execute` returned, and its end (`None`: done)."""


@dataclass(slots=True)
class _ReclaimRequest:
    handlers: Mapping[str, AnyHandler]
    result: Future[Reclaim]


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
        # `None` is the stop marker; a request is served between two batches.
        self._queue: queue.SimpleQueue[Finished | _ReclaimRequest | None] = queue.SimpleQueue()
        self.batches = 0
        """Batches written (for tests and benchmarks)."""
        self.acked = 0
        """Job ends whose batch was written (or fenced off); `acked / batches`
        is the mean batch size (`make bench` reports it)."""

    # --- what the rest of the runner hands over --------------------------------

    def put(self, job: InFlight, result: Any = None) -> None:
        """`job` finished: ack it done (and `save` its result)."""
        self._queue.put((job, result, None))

    def fail(self, job: InFlight, error: str, *, permanent: bool) -> None:
        """`job`'s attempt failed: retry after backoff, or dead (with `save_failure`)."""
        self._queue.put((job, None, End(DEAD if permanent else FAILED, error)))

    def release(self, jobs: Iterable[InFlight], why: str) -> None:
        """Give the (abandoned) jobs back; `why` ends their log lines."""
        for job in jobs:
            self._queue.put((job, None, End(RELEASED, why)))

    def reclaim_expired(self, handlers: Mapping[str, AnyHandler]) -> Future[Reclaim]:
        """Reclaim expired leases on the writer's thread (`queue.reclaim_expired`),
        in a transaction of its own after the ends queued before; the jobs it
        dead-letters get their handler's `save_failure` (when `handlers` has
        their kind) and are reported once that committed. Returns at once; the
        future is cancelled if the writer stops first (or already has), and
        fails with `DatabaseUnavailable` if the database stays away."""
        result: Future[Reclaim] = Future()
        if self.stopped.is_set():
            result.cancel()
        else:
            self._queue.put(_ReclaimRequest(handlers, result))
        return result

    def _request_stop(self) -> None:
        # Whatever was put before this is written first.
        self._queue.put(None)

    # --- the writer thread ---------------------------------------------------------

    def run(self) -> None:
        # Its retries end on `stopped` only: what is queued is written even
        # while the runner shuts down, unless the database stays away.
        session = DbSession(self._engine, self._outage, self.stopped, autocommit=True)
        pending: list[Finished] = []
        requests: list[_ReclaimRequest] = []
        closing = False
        try:
            while not closing:
                closing = self._gather(pending, requests)
                while pending:
                    try:
                        changed = self._write(session, pending)
                    except DatabaseUnavailable:
                        closing = self._gather(pending, requests, wait=False) or closing
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
                for request in requests:
                    self._reclaim(session, request)
                requests.clear()
        finally:
            self._cancel(requests)
            session.close()

    def _reclaim(self, session: DbSession, request: _ReclaimRequest) -> None:
        if not request.result.set_running_or_notify_cancel():
            return  # whoever asked stopped waiting
        try:
            reclaim, breadcrumbs = session.run(
                functools.partial(_reclaim_and_record, handlers=request.handlers),
                atomic=True,
                within=GATHER_WHILE_DOWN_SECONDS,
            )
        except Exception as exc:
            request.result.set_exception(exc)
            return
        for lease, breadcrumb in zip(reclaim.dead_lettered, breadcrumbs, strict=True):
            self.outcomes.crash_loop(lease, breadcrumb, reclaim.error)
        request.result.set_result(reclaim)

    def _cancel(self, requests: list[_ReclaimRequest]) -> None:
        """Cancel the reclaims asked for and not served (the writer is ending)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _ReclaimRequest):
                requests.append(item)
        for request in requests:
            request.result.cancel()

    def _report(self, batch: list[Finished], changed: set[uuid.UUID]) -> None:
        outcomes = self.outcomes
        for job, _result, end in batch:
            written = job.lease.id in changed
            if end is None:
                outcomes.acked(job, written)
            elif end.outcome == RELEASED:
                outcomes.released(job, written, end.message)
            else:
                outcomes.failed(job, end.message, permanent=end.outcome == DEAD, written=written)

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
        job, _result, end = entry
        if end is None:
            logger.error("%s: saving the result failed", job.label, exc_info=exc)
            return (job, None, End(FAILED, f"could not save result: {describe_error(exc)}"))
        logger.error("%s: recording its failure failed", job.label, exc_info=exc)
        return (job, None, End(end.outcome, end.message, record=False))

    def _gather(
        self, batch: list[Finished], requests: list[_ReclaimRequest], wait: bool = True
    ) -> bool:
        """Add queued ends to `batch`: block for the first one, then linger. A
        request ends the gathering (it is served after `batch` is written).
        Returns `True` once `stop()` was called and everything before it is in."""
        get, get_nowait = self._queue.get, self._queue.get_nowait
        if wait and not batch:
            finished = get()
            if not isinstance(finished, tuple):
                return _control(finished, requests)
            batch.append(finished)
        deadline = time.monotonic() + self.linger
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic() if wait else 0.0
            try:
                finished = get(timeout=remaining) if remaining > 0 else get_nowait()
            except queue.Empty:
                return False
            if not isinstance(finished, tuple):
                return _control(finished, requests)
            batch.append(finished)
        return False


def _control(item: _ReclaimRequest | None, requests: list[_ReclaimRequest]) -> bool:
    """What `_gather` returns for a queued item that is not a job's end: `True`
    for the stop marker; a request is kept for after the batch."""
    if item is None:
        return True
    requests.append(item)
    return False


def _saves(job: InFlight) -> bool:
    return not job.nothing_to_do and bool(getattr(job.handler, "writes_result", True))


def _records(entry: Finished) -> bool:
    """Whether writing `entry` may call its handler (`save` or `save_failure`)."""
    job, _result, end = entry
    if end is None:
        return _saves(job)
    return end.outcome != RELEASED and end.record and job.item is not None and _terminal(job, end)


def _terminal(job: InFlight, end: End) -> bool:
    lease = job.lease
    return end.outcome == DEAD or lease.attempts >= lease.max_attempts


def _end_all(conn: Connection, batch: list[Finished], *, record: bool = False) -> set[uuid.UUID]:
    """One fenced statement per outcome present, then (with `record`) the
    handlers' writes for the rows that changed."""
    done = [job.lease for job, _, end in batch if end is None]
    failed = [(job.lease, end.message) for job, _, end in batch if end and end.outcome == FAILED]
    dead = [(job.lease, end.message) for job, _, end in batch if end and end.outcome == DEAD]
    released = [job.lease for job, _, end in batch if end and end.outcome == RELEASED]
    changed: set[uuid.UUID] = set()
    if done:
        changed |= ack_done_many(conn, done)
    if failed:
        changed |= ack_failed_many(conn, failed)
    if dead:
        changed |= ack_dead_many(conn, dead)
    if released:
        changed |= release_many(conn, released)
    if record:
        for job, result, end in batch:
            if job.lease.id not in changed or not _records((job, result, end)):
                continue
            if end is None:
                assert job.ctx is not None
                job.handler.save(conn, job.item, result, job.ctx)
            elif job.ctx is not None:
                job.handler.save_failure(conn, job.item, end.message, job.ctx)
    return changed


def _reclaim_and_record(
    conn: Connection, handlers: Mapping[str, AnyHandler]
) -> tuple[Reclaim, list[Mapping[str, Any] | None]]:
    """`reclaim_expired`, then the `save_failure` of each job it dead-lettered, in
    the caller's transaction; the dead jobs' breadcrumbs, in order."""
    reclaim = reclaim_expired(conn)
    breadcrumbs = [
        _record_crash_loop(conn, handlers, lease, reclaim.error) for lease in reclaim.dead_lettered
    ]
    return reclaim, breadcrumbs


def _record_crash_loop(
    conn: Connection, handlers: Mapping[str, AnyHandler], lease: Lease, error: str
) -> Mapping[str, Any] | None:
    """The job's breadcrumb, or `None` when its handler is not this runner's,
    had nothing to record, or failed to."""
    handler = handlers.get(lease.payload.kind)
    if handler is None:
        return None  # another runner's kind: the dead row is the whole record
    label = f"job {lease.id}"
    try:
        # A savepoint: a handler that cannot record this must not undo the reclaim.
        with conn.begin_nested():
            item = handler.load(conn, lease)
            if item is None:
                return None
            now = time.monotonic()
            handler.save_failure(
                conn, item, error, JobContext(lease, now, threading.Event(), now, label)
            )
        return handler.breadcrumb(item)
    except Exception:
        logger.exception("%s: could not record its crash-loop failure", label)
        return None
