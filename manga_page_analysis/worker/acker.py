"""Batched completion: finished jobs are acked, and their results written, together.

The acker gathers finished jobs for up to `linger` seconds (or `max_batch`
jobs) and writes them in ONE transaction on its own connection: the fenced
`ack_done_many` first (a stale lease changes only its own row), then `save`
only for the jobs whose ack changed their row; a batch that saves nothing is
one autocommit statement. If a `save` raises, the batch is rolled back and
written one job per transaction, so only the job at fault fails its attempt.
Through an outage the batch is kept and retried with backoff.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from typing import Any

from sqlalchemy import Connection, Engine

from manga_page_analysis.queue import ack_done_many
from manga_page_analysis.worker.dbsession import DatabaseUnavailable, DbSession
from manga_page_analysis.worker.inflight import InFlight
from manga_page_analysis.worker.outage import DatabaseOutage
from manga_page_analysis.worker.outcomes import Outcomes, describe_error
from manga_page_analysis.worker.service import ThreadService

logger = logging.getLogger(__name__)

Finished = tuple[InFlight, Any]
"""A finished job and what its `execute` returned."""


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
        self._outcomes = outcomes
        self.linger = linger
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[Finished | None] = queue.SimpleQueue()
        self.batches = 0
        """Transactions written (for tests and benchmarks)."""
        self.acked = 0
        """Jobs whose batch was written (acked or fenced off); `acked / batches`
        is the mean batch size (`make bench` reports it)."""

    def put(self, job: InFlight, result: Any = None) -> None:
        self._queue.put((job, result))

    def _request_stop(self) -> None:
        # Whatever was put before this is written first.
        self._queue.put(None)

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
                        acked, failed = self._write(session, pending)
                    except DatabaseUnavailable:
                        if closing:
                            logger.error(
                                "could not ack %d finished job(s) before shutdown; their "
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
                    for job, _result in batch:
                        if job.lease.id not in failed:
                            self._outcomes.acked(job, job.lease.id in acked)
                if closing:
                    return
        finally:
            session.close()

    def _write(
        self, session: DbSession, batch: list[Finished]
    ) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
        """Write the batch: (ids acked, ids whose save failed and were failed instead)."""
        if not any(_saves(job) for job, _ in batch):
            leases = [job.lease for job, _ in batch]
            return session.run(lambda conn: ack_done_many(conn, leases)), set()
        try:
            return session.run(lambda conn: _ack_and_save(conn, batch), atomic=True), set()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            if len(batch) == 1:
                job = batch[0][0]
                logger.error("%s: saving the result failed", job.label, exc_info=exc)
                error = f"could not save result: {describe_error(exc)}"
                self._outcomes.fail(job, error, permanent=False)
                return set(), {job.lease.id}
            logger.warning(
                "a batch of %d result(s) could not be written (%s); writing each alone",
                len(batch),
                describe_error(exc),
            )
        acked: set[uuid.UUID] = set()
        failed: set[uuid.UUID] = set()
        for finished in batch:
            one_acked, one_failed = self._write(session, [finished])
            acked |= one_acked
            failed |= one_failed
        return acked, failed

    def _gather(self, batch: list[Finished], wait: bool = True) -> bool:
        """Add queued jobs to `batch`: block for the first one, then linger.
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


def _ack_and_save(conn: Connection, batch: list[Finished]) -> set[uuid.UUID]:
    acked = ack_done_many(conn, [job.lease for job, _ in batch])
    for job, result in batch:
        if job.lease.id in acked and _saves(job):
            assert job.ctx is not None
            job.handler.save(conn, job.item, result, job.ctx)
    return acked
