"""Batched completion for handlers that write nothing of their own.

Pool threads hand finished jobs to the acker, which gathers them for up to
`linger` seconds (or `max_batch` jobs) and acks them all in ONE statement on
its own autocommit connection (`ack_done_many`: fenced per row, so a stale
lease in the batch changes only its own row, which is left alone). Then it
reports each job (log, observer, event) after the fact is committed.

Through a database outage the batch is kept and retried with backoff; a
lease that expires meanwhile makes its ack a no-op and the job runs again.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable

from sqlalchemy import Engine

from app.queue.batch import ack_done_many
from app.worker.dbsession import DatabaseUnavailable, DbSession
from app.worker.inflight import InFlight
from app.worker.outage import DatabaseOutage

logger = logging.getLogger(__name__)

_STOP = None


class Acker:
    def __init__(
        self,
        engine: Engine,
        outage: DatabaseOutage,
        stopping: threading.Event,
        report: Callable[[InFlight, bool], None],
        *,
        linger: float = 0.002,
        max_batch: int = 1000,
    ) -> None:
        self._engine = engine
        self._outage = outage
        self._stopping = stopping
        self._report = report
        self.linger = linger
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[InFlight | None] = queue.SimpleQueue()
        self._closing = threading.Event()
        self.batches = 0
        """Statements written (for tests and benchmarks)."""

    def put(self, job: InFlight) -> None:
        self._queue.put(job)

    def close(self) -> None:
        """Write what is queued, then end the thread."""
        self._closing.set()
        self._queue.put(_STOP)

    def run(self) -> None:
        session = DbSession(self._engine, self._outage, self._closing, autocommit=True)
        pending: list[InFlight] = []
        try:
            while True:
                closing = self._gather(pending)
                while pending:
                    try:
                        leases = [job.lease for job in pending]
                        acked = session.run(functools.partial(ack_done_many, leases=leases))
                    except DatabaseUnavailable:
                        if closing and self._stopping.is_set():
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
                    batch, pending = pending, []
                    for job in batch:
                        self._report(job, job.lease.id in acked)
                if closing:
                    return
        finally:
            session.close()

    def _gather(self, batch: list[InFlight], wait: bool = True) -> bool:
        """Add queued jobs to `batch`: block for the first one, then linger.
        Returns `True` once `close()` was called and everything before it is in."""
        get = self._queue.get
        if wait and not batch:
            job = get()
            if job is _STOP:
                return True
            batch.append(job)
        deadline = time.monotonic() + self.linger
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic() if wait else 0.0
            try:
                job = get(timeout=remaining) if remaining > 0 else get_nowait(self._queue)
            except queue.Empty:
                return False
            if job is _STOP:
                return True
            batch.append(job)
        return False


def get_nowait(q: queue.SimpleQueue[InFlight | None]) -> InFlight | None:
    return q.get_nowait()
