"""Reclaiming expired leases, the seed's `reclaim_orphaned`: every runner
does it once when it starts, before its first lease (so a lone worker
restarted after a crash gets its job back with the interrupted attempt
refunded, whoever leads), and the maintenance leader does it periodically.

A reclaim takes over the expired leases in one transaction
(`queue.take_expired`: each expiry counted, each job's end chosen by
`ends.after_expiry`: released, or dead at the crash-loop limit), loads each
job as the lease loop does, and hands the ends to the acker, which writes and
records them like every other end (`save_failure`, event, metric, log line).
The taken jobs stay `running`, held a lease's length, until the acker writes
them; a runner that dies in between leaves them to expire again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from datetime import timedelta

from sqlalchemy import Connection

from manga_page_analysis.queue import End, Lease, Payload, take_expired
from manga_page_analysis.worker.acker import Acker
from manga_page_analysis.worker.dbsession import DbSession
from manga_page_analysis.worker.handler import AnyHandler
from manga_page_analysis.worker.inflight import InFlight, new_job
from manga_page_analysis.worker.noop import NoopHandler
from manga_page_analysis.worker.outcomes import describe_error

logger = logging.getLogger(__name__)


class Reclaimer:
    """Reclaims expired leases for `acker` to end; `handlers` load and record
    the jobs of this runner's kinds (any other kind's end is its row alone)."""

    def __init__(
        self, handlers: Mapping[str, AnyHandler], acker: Acker, *, hold: timedelta
    ) -> None:
        self._handlers = handlers
        self._acker = acker
        self._hold = hold

    def reclaim(self, session: DbSession, *, within: float | None = None) -> int:
        """Take over the expired leases on `session` (retried `within` seconds
        through an outage: `DatabaseUnavailable` after) and hand their ends to
        the acker; returns how many. The acker writes them soon after."""
        taken = session.run(self._take, atomic=True, within=within)
        for job, end in taken:
            self._acker.end(job, end)
        if taken:
            logger.warning("reclaimed %d orphaned job(s) with expired leases", len(taken))
        return len(taken)

    def _take(self, conn: Connection) -> list[tuple[InFlight, End]]:
        return [(self._load(conn, held), end) for held, end in take_expired(conn, self._hold)]

    def _load(self, conn: Connection, held: Lease) -> InFlight:
        return load_ended(conn, self._handlers.get(held.payload.kind), held)


def load_ended(
    conn: Connection, handler: AnyHandler | None, held: Lease, *, savepoint: bool = True
) -> InFlight:
    """The in-flight job of a lease that ends without running (at lease, at
    reclaim), loaded in a savepoint so that the end is written whatever the
    load does (`savepoint=False`: outside a transaction, for a handler whose
    load runs no SQL). A kind this runner has no handler for, or a payload that
    did not decode, is not loaded: its end is its row alone."""
    if handler is None or type(held.payload) is Payload:
        return new_job(held, handler or _NOT_HERE, load_error="not loaded here")
    try:
        with conn.begin_nested() if savepoint else contextlib.nullcontext():
            item = handler.load(conn, held)
    except Exception as exc:
        logger.warning("job %s could not be loaded to record its end: %s", held.id, exc)
        return new_job(held, handler, load_error=describe_error(exc))
    return new_job(held, handler, item)


_NOT_HERE: AnyHandler = NoopHandler("")
"""The handler of a job of a kind this runner does not run: it records nothing."""
