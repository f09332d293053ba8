"""The one writer of job ends: done, failed (retried after backoff, or dead),
given back (never started, or released at shutdown), for every job a runner
holds. Pool threads, the heartbeat and the shutdown only hand ends over.

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
batch is kept and retried with the runner's backoff (`dbsession`).
Log lines, metrics and events (`Outcomes`) follow the commit.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, Engine

from manga_page_analysis.queue import ack_dead_many, ack_done_many, ack_failed_many, release_many
from manga_page_analysis.worker.dbsession import DatabaseUnavailable, DbSession
from manga_page_analysis.worker.inflight import InFlight
from manga_page_analysis.worker.outage import DatabaseOutage
from manga_page_analysis.worker.outcomes import Outcomes, describe_error
from manga_page_analysis.worker.service import ThreadService

logger = logging.getLogger(__name__)

DONE: Final = "done"
FAILED: Final = "failed"
"""A failed attempt: `pending` after a backoff, or `dead` when it was the last."""
DEAD: Final = "dead"
"""A permanent error: `dead` at once."""
RELEASED: Final = "released"
"""Given back: `pending` at once, attempt refunded."""


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
        self._queue: queue.SimpleQueue[Finished | None] = queue.SimpleQueue()
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

    def _request_stop(self) -> None:
        # Whatever was put before this is written first.
        self._queue.put(None)

    # --- the writer thread ---------------------------------------------------------

    def run(self) -> None:
        # Its retries end on `stopped` only: what is queued is written even
        # while the runner shuts down, unless the database stays away.
        session = DbSession(self._engine, self._outage, self.stopped, autocommit=True)
        pending: list[Finished] = []
        try:
            while True:
                closing = self._gather(pending)
                while pending:
                    try:
                        changed = self._write(session, pending)
                    except DatabaseUnavailable:
                        if closing:
                            logger.error(
                                "could not write the end of %d job(s) before shutdown; their "
                                "leases will expire and they will run again",
                                len(pending),
                            )
                            return
                        session.backoff()
                        closing = self._gather(pending, wait=False) or closing
                        continue
                    self.batches += 1
                    self.acked += len(pending)
                    batch, pending = pending, []
                    self._report(batch, changed)
                if closing:
                    return
        finally:
            session.close()

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
        if not any(_records(entry) for entry in batch):
            return session.run(lambda conn: _end_all(conn, batch))
        try:
            return session.run(lambda conn: _end_all(conn, batch, record=True), atomic=True)
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
