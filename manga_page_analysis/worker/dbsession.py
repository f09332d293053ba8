"""Dedicated database connections for the runner's own threads.

The lease loop, the heartbeat and the acker each hold one connection for
their whole life instead of checking one out (with a pre-ping) per job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from manga_page_analysis.worker.outage import DatabaseOutage

logger = logging.getLogger(__name__)

T = TypeVar("T")

DB_RETRY_BASE_SECONDS = 0.05
"""Backoff base: the first wait after the database was found unreachable is twice this."""
DB_RETRY_MAX_SECONDS = 5.0
"""Longest wait between attempts while the database is unreachable."""


def runner_outage() -> DatabaseOutage:
    """The outage log shared by one runner's threads, with the runner's one retry
    policy (`DB_RETRY_*`). The wake-up listener reports its failures to it but not
    its recoveries: its direct connection (`listen_url`) may work while the
    engine's way does not."""
    return DatabaseOutage(DB_RETRY_MAX_SECONDS, base_delay=DB_RETRY_BASE_SECONDS)


def is_transient_db_error(exc: BaseException) -> bool:
    """A lost connection, a restarting server or a deadlock: worth one more try."""
    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, DBAPIError) and (
        exc.connection_invalidated or getattr(exc.orig, "sqlstate", None) in {"40P01", "40001"}
    )


def short_error(exc: BaseException | None) -> str:
    """The exception's type and the first line of its message."""
    if exc is None:
        return "?"
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


def _in_one_transaction(conn: Connection, work: Callable[[Connection], T]) -> T:
    """`work(conn)` in one transaction on an autocommit connection.

    SQLAlchemy still calls the driver's commit()/rollback() at the end of the
    block (a no-op in autocommit); switching psycopg's own flag off for the
    block makes them real, without a round trip to switch it."""
    driver = conn.connection.driver_connection
    driver.autocommit = False  # type: ignore[union-attr]
    try:
        with conn.begin():
            return work(conn)
    finally:
        if not driver.closed:  # type: ignore[union-attr]
            driver.autocommit = True  # type: ignore[union-attr]


class DatabaseUnavailable(Exception):
    """The database could not be reached; the caller should `backoff()` and retry."""


class DbSession:
    """One thread's dedicated connection. Not thread-safe: one owner thread.

    `run(work)` returns `work(conn)`, run in a transaction (on an autocommit
    session each statement commits on its own, unless `atomic=True`). A
    transient error on a connection that had worked is retried at once, once,
    on a fresh one; otherwise `run` raises `DatabaseUnavailable` and `backoff()`
    waits (capped, ends early on `stopping`). Other errors propagate, and the
    connection stays usable.
    """

    def __init__(
        self,
        engine: Engine,
        outage: DatabaseOutage,
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
        self.delay = 0.0
        """The wait `backoff()` would make now (0 unless the last attempt failed)."""

    def run(self, work: Callable[[Connection], T], *, atomic: bool = False) -> T:
        retried = False
        while True:
            established = self._conn is not None
            try:
                conn = self._connection()
                if atomic and self._autocommit:
                    result = _in_one_transaction(conn, work)
                else:
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
                self.delay = self._outage.failed(short_error(exc), self._failures)
                raise DatabaseUnavailable(short_error(exc)) from exc
            self._failures = 0
            self.delay = 0.0
            self._outage.recovered()
            return result

    def backoff(self) -> None:
        self._stopping.wait(self.delay)

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
            # No server-side prepared statements on the runner's connections:
            # psycopg prepares a statement after 5 runs, and Postgres then
            # reuses a generic plan that guesses 10 rows for `unnest(:ids)` and
            # trusts statistics taken while nothing was running. That plan
            # loops over every running row for every id of a batch (measured:
            # 1 s per 700-row ack, 500 us of server CPU per job instead of
            # 20). Unprepared, each statement is planned for its actual batch.
            # It is also what PgBouncer in transaction mode needs.
            driver = conn.connection.driver_connection
            if driver is not None:
                driver.prepare_threshold = None
            if self._autocommit:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            self._conn = conn
        return self._conn
