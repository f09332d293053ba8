"""The interface between the generic runner and the work of one job kind."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection

from manga_page_analysis.queue import Lease

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class JobContext:
    """What a dispatch (one run of a handler's `execute`) knows about its run: the lease, its deadline (a
    `time.monotonic()` value) and its `stop` flag, set on shutdown, timeout or
    lost lease. A dispatch should pass `deadline` and `stop` to every blocking call
    (an analyzer takes it as `cancel=`)."""

    lease: Lease
    deadline: float
    stop: threading.Event
    started_at: float = field(default_factory=time.monotonic)
    label: str = ""

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started_at) * 1000)


class JobHandler(Protocol[ItemT, ResultT]):
    """One job kind's work. The runner owns leasing, heartbeats, deadlines,
    fencing, events and shutdown; a handler only says what to do.

    `load`, `save` and `save_failure` run inside a transaction the runner
    owns (they must not commit); `execute` runs with no transaction open and
    may take long.

    Optional attribute `load_reads_database` (`True` when absent): `False`
    promises that `load` runs no SQL. The runner then leases jobs of that kind
    in one autocommit statement, with no BEGIN and no COMMIT round trip of its
    own (the lease still waits for its WAL flush), and `load` runs after it.
    `True`: `load` runs in the lease's transaction, so a load that fails on the
    database rolls the lease back.
    """

    kind: str
    """The `payload.kind` this handler takes."""

    timeout_message: str
    """The error recorded when a dispatch runs past the job timeout."""

    writes_result: bool
    """`False` when the handler has nothing of its own to write: `save` is never
    called and its jobs are acked in batches (one statement for many jobs).
    `True`: `save` runs in the same fenced transaction as its ack, only when the
    ack found the lease current (finished jobs share that transaction too)."""

    def load(self, conn: Connection, lease: Lease) -> ItemT | None:
        """What the job needs, or `None` when there is nothing to do (acked as done)."""
        ...

    def describe(self, item: ItemT) -> str:
        """A short label naming the job's subject, for log lines."""
        ...

    def breadcrumb(self, item: ItemT) -> Mapping[str, Any] | None:
        """Event fields; `None` suppresses events (never the work)."""
        ...

    def skipped_breadcrumb(self, lease: Lease) -> Mapping[str, Any] | None:
        """Event fields of a `skipped` event, published when `load` found nothing
        to do and the job was acked done. Optional: a handler without this
        method publishes no `skipped` event."""
        return None

    def log_fields(self, item: ItemT) -> Mapping[str, Any]:
        """Fields added to every log line about the job (beside `job_id`, `kind`
        and `attempt`), e.g. the id of its subject. Optional: a handler without
        this method adds none."""
        return {}

    def execute(self, item: ItemT, ctx: JobContext) -> ResultT:
        """Do the work. Raising fails this attempt with the exception's message."""
        ...

    def save(self, conn: Connection, item: ItemT, result: ResultT, ctx: JobContext) -> None:
        """Write the result, in the transaction that acks the job done, only for a
        job whose ack found its lease current (the ack comes first)."""
        ...

    def save_failure(self, conn: Connection, item: ItemT, error: str, ctx: JobContext) -> None:
        """Record a final failure (attempts used up or a permanent error)."""
        ...


AnyHandler = JobHandler[Any, Any]
