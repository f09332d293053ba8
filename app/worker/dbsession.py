"""Dedicated database connections for the runner's own threads, and outages.

The lease loop, the heartbeat and the acker each hold one connection for
their whole life instead of checking one out (with a pre-ping) per job. A
connection that drops under a thread (a restarted server, a terminated
backend) is replaced at once, once; only when a fresh connection cannot be
made either is the database down. Then the thread backs off (capped), and
the runner logs the outage once when it starts and once when it ends, not
per retry and not per thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

logger = logging.getLogger(__name__)

T = TypeVar("T")

DB_RETRY_FIRST_SECONDS = 0.1
"""First wait after the database was found unreachable."""
DB_RETRY_MAX_SECONDS = 5.0
"""Longest wait between attempts while the database is unreachable."""


def is_transient_db_error(exc: BaseException) -> bool:
    """A lost connection, a restarting server or a deadlock: worth one more try."""
    if isinstance(exc, OperationalError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    return getattr(exc.orig, "sqlstate", None) in {"40P01", "40001"}


def short_error(exc: BaseException | None) -> str:
    """The exception's type and the first line of its message."""
    if exc is None:
        return "?"
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


class DatabaseUnavailable(Exception):
    """The database could not be reached; the caller should `backoff()` and retry."""


class Outage:
    """Shared by a runner's threads: logs an outage once as it starts and once as it ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            if self._since is not None:
                return
            self._since = self._clock()
        logger.warning(
            "database unreachable (%s); the worker backs off (at most %.0f s between "
            "attempts) and logs again once it is back",
            short_error(exc),
            DB_RETRY_MAX_SECONDS,
        )

    def recovered(self) -> None:
        if self._since is None:  # the common case: no lock taken
            return
        with self._lock:
            if self._since is None:
                return
            seconds, self._since = self._clock() - self._since, None
        logger.warning("database reachable again after %.1f s", seconds)


class DbSession:
    """One thread's dedicated connection. Not thread-safe: one owner thread.

    `run(work)` runs `work(conn)` in a transaction (autocommit connections:
    each statement commits on its own, no BEGIN/COMMIT round trips) and
    returns what it returned. A transient error on a connection that had
    worked is retried once at once on a fresh connection; otherwise it
    raises `DatabaseUnavailable`, and `backoff()` waits (capped, ends early
    on `stopping`). Other errors propagate; the connection stays usable.
    """

    def __init__(
        self,
        engine: Engine,
        outage: Outage,
        stopping: threading.Event,
        *,
        autocommit: bool = False,
    ) -> None:
        self._engine = engine
        self._outage = outage
        self._stopping = stopping
        self._autocommit = autocommit
        self._conn: Connection | None = None
        self._failures = 0

    def run(self, work: Callable[[Connection], T]) -> T:
        retried = False
        while True:
            established = self._conn is not None
            try:
                conn = self._connection()
                with conn.begin():
                    result = work(conn)
            except SQLAlchemyError as exc:
                if not is_transient_db_error(exc):
                    raise
                self.close()
                if established and not retried:
                    retried = True  # the connection dropped under us: a fresh one, at once
                    continue
                self._failures += 1
                self._outage.failed(exc)
                raise DatabaseUnavailable(short_error(exc)) from exc
            self._failures = 0
            self._outage.recovered()
            return result

    def backoff(self) -> None:
        """Wait before the next attempt: doubling from 0.1 s, at most 5 s."""
        exponent = max(0, min(self._failures - 1, 8))
        delay = min(DB_RETRY_MAX_SECONDS, DB_RETRY_FIRST_SECONDS * 2**exponent)
        self._stopping.wait(delay)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.invalidate()
            conn.close()
        except Exception:  # a connection that is already gone
            logger.debug("closing a broken connection failed", exc_info=True)

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self._engine.connect()
            if self._autocommit:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            self._conn = conn
        return self._conn
