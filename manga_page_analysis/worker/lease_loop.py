"""Leasing: the lease loop, and the wake-up listener that starts it at once.

The lease loop (one thread per runner) waits for the readiness gate and for
free slots, leases up to that many jobs in ONE statement, runs each handler's
`load` in the same transaction, and hands the batch to the runner. While the
queue is empty it sleeps until woken: by the wake-up listener, a freed slot,
or `idle_poll` (the fallback: a lost notification costs at most that).

The listener (one connection per runner) wakes it for each `NOTIFY
crawler_jobs_wakeup` naming one of the runner's kinds (docs/queue.md), and
once after a reconnect, for what it may have missed.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from manga_page_analysis.db import channel_name, connect_kwargs, quote_identifier, schema_of
from manga_page_analysis.queue import (
    WAKEUP_CHANNEL,
    WAKEUP_KIND_CHARS,
    End,
    Lease,
    lease_with_ends,
)
from manga_page_analysis.worker.dbsession import (
    DatabaseUnavailable,
    DbRetry,
    DbSession,
    is_transient_db_error,
)
from manga_page_analysis.worker.gates.breaker import Breaker
from manga_page_analysis.worker.gates.readiness import ReadinessGate
from manga_page_analysis.worker.handler import AnyHandler
from manga_page_analysis.worker.inflight import InFlight, InFlightJobs, new_job
from manga_page_analysis.worker.outcomes import describe_error
from manga_page_analysis.worker.reclaim import load_ended
from manga_page_analysis.worker.reports.logcontext import job_log_context
from manga_page_analysis.worker.reports.outage import DatabaseOutage
from manga_page_analysis.worker.service import ThreadService

logger = logging.getLogger(__name__)

PREFETCH_MAX = 500
"""Most jobs an adaptive prefetch leases beyond the pool threads."""
PREFETCH_MAX_BYTES = 32 * 1024 * 1024
"""Most payload bytes a prefetch (adaptive or set) holds beyond the pool threads,
reckoned on the largest payload leased lately: 500 prefetched jobs of a host kind
carrying a 2 MB field held 3.96 GB; with this bound, 16 of them are prefetched."""
PAYLOAD_BYTES_DECAY = 0.9
"""Per lease round, how much of the largest payload seen lately is remembered."""


def prefetch_slots(
    workers: int,
    *,
    prefetch: int | None,
    job_seconds: float | None,
    round_seconds: float,
    payload_bytes: float,
) -> int:
    """How many jobs a runner holds at most: its `workers`, plus the prefetch. A set
    `prefetch` is that many; else as many as the pool finishes during one lease
    round trip (none before a job was timed), at most `PREFETCH_MAX`. Either way,
    at most `PREFETCH_MAX_BYTES` of payloads of `payload_bytes` each."""
    if prefetch is not None:
        extra = prefetch
    elif job_seconds is None:
        extra = 0  # nothing measured yet: no prefetch
    else:
        # Jobs the pool finishes while one lease round trip is under way,
        # rounded up: a slot that frees then finds its next job waiting.
        finished = workers * round_seconds / max(job_seconds, 1e-6)
        extra = min(PREFETCH_MAX, math.ceil(finished))
    if payload_bytes > 0:
        extra = min(extra, int(PREFETCH_MAX_BYTES // payload_bytes))
    return workers + extra


ISOLATE_LOADS_SECONDS = 60.0
"""After a load failed with a database error, how long loads run in savepoints."""
CHECK_STOP_SECONDS = 0.5
"""How long one wait for notifications lasts before the stop flag is checked."""


class _LoadsAborted(Exception):
    """A load broke the lease transaction; it was rolled back."""


class LeaseLoop(ThreadService):
    """`submit(batch)` hands each leased batch over to the pool ("dispatch" is
    only ever a job's `execute`); `holder` (the runner's id) goes into each
    leased row's `leased_by`."""

    role = "lease"

    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, AnyHandler],
        jobs: InFlightJobs,
        outage: DatabaseOutage,
        *,
        submit: Callable[[list[InFlight]], None],
        end: Callable[[InFlight, End], None],
        workers: int,
        prefetch: int | None,
        lease_duration: timedelta,
        idle_poll: float,
        readiness: ReadinessGate | None,
        holder: str | None,
        breaker: Breaker | None = None,
        name: str = "worker",
    ) -> None:
        super().__init__(name)
        self._breaker = breaker
        self._engine = engine
        self._handlers = handlers
        self._holder = holder
        self._jobs = jobs
        self._outage = outage
        self._submit = submit
        self._end = end
        self.workers = workers
        self.prefetch = prefetch
        self.lease_duration = lease_duration
        self.idle_poll = idle_poll
        self._readiness = readiness
        self._want_slot = False
        self._isolate_loads_until = 0.0
        self._round_seconds = 0.002  # moving average of a lease round trip
        self._payload_bytes = 0.0  # the largest payload leased lately, decaying
        self.rounds = 0
        self._loads_in_transaction = {
            kind: bool(getattr(handler, "load_reads_database", True))
            for kind, handler in handlers.items()
        }
        """Per kind: whether its handler's `load` reads the database (then it runs
        in the lease's transaction)."""
        jobs.on_slot_freed = self._slot_freed

    def wake(self) -> None:
        """Lease now (new jobs were committed)."""
        self._wake.set()

    def _slot_freed(self) -> None:
        if self._want_slot:
            self._wake.set()

    def slots(self) -> int:
        """How many jobs the runner holds at most: the pool, plus the prefetch
        (`prefetch_slots`)."""
        return prefetch_slots(
            self.workers,
            prefetch=self.prefetch,
            job_seconds=self._jobs.job_seconds,
            round_seconds=self._round_seconds,
            payload_bytes=self._payload_bytes,
        )

    def run(self) -> None:
        # Leases commit synchronously, like every other write. An asynchronous
        # commit would take the WAL flush off the pickup path, but a lease lost
        # in a server crash would roll the row back to its previous generation,
        # and the next lease would hand out the lost holder's generation again:
        # two holders that fencing could not tell apart.
        # Autocommit: a round whose kinds all load nothing is one statement that
        # commits itself; others switch to one transaction for lease and loads.
        session = DbSession(self._engine, self._outage, self.stopped, autocommit=True)
        all_kinds = list(self._handlers)
        try:
            while not self.stopped.is_set():
                if self._readiness is not None and not self._readiness.wait_ready(self.stopped):
                    return
                self._wake.clear()
                kinds = all_kinds if self._breaker is None else self._breaker.leasable(all_kinds)
                if not kinds:  # every kind's breaker is open: wait for the first pause to end
                    self._wake.wait(self._breaker_wait())
                    continue
                self._want_slot = True  # before counting: a slot freed from now on wakes us
                free = self.slots() - self._jobs.holding
                if free <= 0:
                    self._wake.wait(self.idle_poll)
                    continue
                self._want_slot = False
                round_started = time.monotonic()
                alone = not any(self._loads_in_transaction[kind] for kind in kinds)
                try:
                    batch, ended = session.run(
                        functools.partial(
                            self._lease_and_load, kinds=kinds, limit=free, alone=alone
                        ),
                        atomic=not alone,
                    )
                except DatabaseUnavailable:
                    continue  # retried until the runner stops: it stops
                except _LoadsAborted as exc:
                    logger.warning(
                        "a load failed with a database error (%s); leasing again with each "
                        "load in its own savepoint",
                        exc.__cause__,
                    )
                    continue
                self.rounds += 1
                largest = max((job.lease.payload_bytes for job in batch), default=0)
                self._payload_bytes = max(largest, self._payload_bytes * PAYLOAD_BYTES_DECAY)
                for job, end in ended:
                    self._end(job, end)
                if batch:
                    seconds = time.monotonic() - round_started
                    self._round_seconds = 0.8 * self._round_seconds + 0.2 * seconds
                    self._jobs.add(batch)
                    self._submit(batch)
                if len(batch) + len(ended) < free:  # the queue is drained: sleep until woken
                    self._wake.wait(self.idle_poll)
        finally:
            session.close()

    def _breaker_wait(self) -> float:
        left = self._breaker.seconds_to_retry() if self._breaker is not None else None
        return self.idle_poll if left is None else max(left, 0.01)

    def _lease_and_load(
        self, conn: Connection, kinds: list[str], limit: int, alone: bool = False
    ) -> tuple[list[InFlight], list[tuple[InFlight, End]]]:
        """Lease and load in one transaction: the jobs to run, and those that
        ended at lease with their ends (loaded to record them, each in a
        savepoint), for the acker. `alone`: no load of these kinds runs SQL, so
        the lease is one autocommit statement and the loads follow it.

        Loads run without savepoints (two round trips per batch saved on the
        hot path). If one raises a database error, the transaction is rolled
        back whole (nothing was leased, no attempt spent) and, for the next
        minute, each load runs in its own savepoint so the job at fault
        fails alone."""
        isolated = time.monotonic() < self._isolate_loads_until
        leased = lease_with_ends(conn, kinds, limit, self.lease_duration, holder=self._holder)
        handlers = self._handlers
        try:
            batch = [
                self._load(conn, lease, isolated=isolated, alone=alone) for lease in leased.leases
            ]
            ended = [
                (load_ended(conn, handlers.get(held.payload.kind), held, savepoint=not alone), end)
                for held, end in leased.ended
            ]
            return batch, ended
        except DBAPIError as exc:
            if isolated or is_transient_db_error(exc):
                raise
            self._isolate_loads_until = time.monotonic() + ISOLATE_LOADS_SECONDS
            raise _LoadsAborted from exc

    def _load(self, conn: Connection, lease: Lease, *, isolated: bool, alone: bool) -> InFlight:
        handler = self._handlers[lease.payload.kind]
        try:
            if isolated and not alone:
                with conn.begin_nested():
                    item = handler.load(conn, lease)
            else:
                item = handler.load(conn, lease)
        except Exception as exc:
            if isinstance(exc, DBAPIError) and not isolated and not alone:
                raise  # the transaction is broken: roll back, then load each job alone
            # (`alone`: the lease has committed; a load that ran SQL after all fails its job.)
            job = new_job(lease, handler, load_error=f"could not load job: {describe_error(exc)}")
            with job_log_context(job.log_fields):
                logger.error("job %s could not be loaded", lease.id, exc_info=exc)
            return job
        return new_job(lease, handler, item)


class WakeupListener(ThreadService):
    """`on_wake()` is called for each notification naming one of `kinds`;
    `listen_url`: see `Runner`."""

    role = "listener"

    def __init__(
        self,
        engine: Engine,
        kinds: Collection[str],
        on_wake: Callable[[], None],
        outage: DatabaseOutage,
        *,
        listen_url: str | None = None,
        name: str = "worker",
    ) -> None:
        super().__init__(name)
        self._connect_kwargs = connect_kwargs(listen_url or engine)
        self._listen_statement = "LISTEN " + quote_identifier(
            channel_name(WAKEUP_CHANNEL, schema_of(engine))
        )
        # Compared as the trigger sends them: cut to the first WAKEUP_KIND_CHARS.
        self._kinds = frozenset(kind[:WAKEUP_KIND_CHARS] for kind in kinds)
        self._on_wake = on_wake
        self._outage = outage
        self.connections = 0
        """Connections made so far (tests watch it to see a reconnect)."""
        self.listening = threading.Event()
        """Set while LISTEN is in effect."""

    def run(self) -> None:
        # The runner's retry policy for connecting; a LISTEN connection that
        # worked and dropped is replaced at once (its next connect is a first try).
        retry = DbRetry(
            self._outage,
            self.stopped,
            retry_on=lambda exc: isinstance(exc, psycopg.Error),
            # This direct connection working says nothing of the engine's way
            # (PgBouncer, say), and ending the outage here while the others
            # still fail would log it twice.
            report_recovery=False,
        )
        while not self.stopped.is_set():
            try:
                conn = retry.call(self._connect)
            except DatabaseUnavailable:
                return  # stopping
            try:
                with conn:
                    self.listening.set()
                    if self.connections > 1:
                        self._on_wake()  # notifications may have been missed meanwhile
                    self._listen(conn)
                    return
            except psycopg.Error as exc:
                self.listening.clear()
                if self.stopped.is_set():
                    return
                logger.info("wake-up listener lost its connection (%s); reconnecting", exc)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(**{**self._connect_kwargs, "autocommit": True})
        try:
            conn.execute(self._listen_statement)
        except BaseException:
            conn.close()
            raise
        self.connections += 1
        return conn

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        kinds = self._kinds
        while not self.stopped.is_set():
            for notify in conn.notifies(timeout=CHECK_STOP_SECONDS):
                payload = notify.payload
                if not payload or not kinds.isdisjoint(payload.split(",")):
                    self._on_wake()
