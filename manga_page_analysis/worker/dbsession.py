"""Dedicated database connections for the runner's own threads, and the
runner's one retry policy for a database blip (`DbRetry`).

The lease loop, the heartbeat, the acker and the maintenance each hold one
connection for their whole life (`DbSession`) instead of checking one out
(with a pre-ping) per job; the wake-up listener keeps its own. All of them
retry through a `DbRetry` of their own, sharing one `DatabaseOutage` so that
an outage is logged once. What counts as a blip (a lost connection, and a
server that refuses writes during a failover) is `dberrors.is_transient_db_error`.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_before_delay,
    stop_when_event_set,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base

from manga_page_analysis.dberrors import is_transient_db_error, sqlstate
from manga_page_analysis.errors import DatabaseUnavailable
from manga_page_analysis.worker.reports.outage import DatabaseOutage

__all__ = ["DatabaseUnavailable", "DbRetry", "DbSession", "is_transient_db_error", "runner_outage"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

IN_FAILED_TRANSACTION = "25P02"
"""A statement sent after an error in the same transaction."""
DB_RETRY_INITIAL_SECONDS = 0.1
"""The wait after the first failed try (a dropped connection is first retried at once)."""
DB_RETRY_MAX_SECONDS = 5.0
"""Longest wait between tries while the database is unreachable."""
DB_RETRY_JITTER_SECONDS = 0.25
"""Up to this much is added at random to each wait (below the longest), so the
threads and processes that lost the database together do not retry in step."""


def runner_outage() -> DatabaseOutage:
    """The outage log shared by one runner's threads. The wake-up listener reports
    its failures to it but not its recoveries: its direct connection
    (`listen_url`) may work while the engine's way does not."""
    return DatabaseOutage(DB_RETRY_MAX_SECONDS)


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


class DbRetry:
    """The runner's one retry policy for a database blip, for one thread (each
    thread has its own; the outage log is shared). Built on tenacity.

    `call(attempt)` returns `attempt()`. A failure `retry_on` accepts is tried
    again: the n-th failure in a row waits `DB_RETRY_INITIAL_SECONDS × 2^(n−1)`
    plus up to `DB_RETRY_JITTER_SECONDS`, at most `DB_RETRY_MAX_SECONDS`, for as
    long as it takes. The count carries over from one call to the next until a
    try succeeds. A wait ends early once `stopping` is set; one more try is
    made, and if it fails too, `DatabaseUnavailable` is raised.

    With `within` (seconds), a caller that has other work between tries (the
    heartbeat's deadlines, the acker's gathering) gets `DatabaseUnavailable`
    rather than a wait that would end later than that; the wait it did not
    make is made at the start of its next call, so a bound never makes the
    tries more frequent. Other errors propagate at once. Each failed try is
    reported to `outage` (logged once per outage), and with `report_recovery`
    each success ends the outage (logged once).
    """

    def __init__(
        self,
        outage: DatabaseOutage,
        stopping: threading.Event,
        *,
        retry_on: Callable[[BaseException], bool] = is_transient_db_error,
        report_recovery: bool = True,
    ) -> None:
        self._outage = outage
        self._stopping = stopping
        self._retry_on = retry_on
        self._report_recovery = report_recovery
        self._exponential = wait_exponential_jitter(
            multiplier=DB_RETRY_INITIAL_SECONDS,
            max=DB_RETRY_MAX_SECONDS,
            jitter=DB_RETRY_JITTER_SECONDS,
        )
        self.failures = 0
        """Failed tries in a row (the backoff's exponent)."""
        self._next_try = 0.0  # a `time.monotonic()`: the end of a wait a bound cut short
        self._last_error: BaseException | None = None

    def call(self, attempt: Callable[[], T], *, within: float | None = None) -> T:
        began = time.monotonic()
        unfinished = self._next_try - began
        if unfinished > 0:
            wait = unfinished if within is None else min(unfinished, within)
            if not self._stopping.wait(wait) and wait < unfinished:
                raise DatabaseUnavailable(short_error(self._last_error)) from self._last_error
        stop: stop_base = stop_when_event_set(self._stopping)
        if within is not None:
            stop = stop | stop_before_delay(max(0.0, within - (time.monotonic() - began)))
        retrying = Retrying(
            sleep=self._sleep,
            stop=stop,
            wait=self._wait,
            retry=retry_if_exception(self._retry_on),
            after=self._failed,
            retry_error_callback=self._give_up,
        )
        result = retrying(attempt)
        self.failures = 0
        self._next_try = 0.0
        if self._report_recovery:
            self._outage.recovered()
        return result

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)  # a stop ends the wait at once

    def _failed(self, state: RetryCallState) -> None:
        self.failures += 1
        self._last_error = _failure(state)
        self._outage.unreachable(short_error(self._last_error))

    def _wait(self, state: RetryCallState) -> float:
        # Counted in failures in a row, not in this call's tries: a bounded
        # caller coming back does not start the backoff over.
        in_a_row = copy.copy(state)
        in_a_row.attempt_number = self.failures
        return float(self._exponential(in_a_row))

    def _give_up(self, state: RetryCallState) -> NoReturn:
        self._next_try = time.monotonic() + (state.upcoming_sleep or 0.0)
        cause = _failure(state)
        raise DatabaseUnavailable(short_error(cause)) from cause


def _failure(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome is not None else None


class DbSession:
    """One thread's dedicated connection. Not thread-safe: one owner thread.

    `run(work)` returns `work(conn)`, run in a transaction (on an autocommit
    session each statement commits on its own, unless `atomic=True`). A
    transient error is retried by the session's `DbRetry` (see there for
    `within` and `DatabaseUnavailable`) on a fresh connection; when a
    connection that had worked dropped, the first retry is at once. Other
    errors propagate, and the connection stays usable.
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
        self._autocommit = autocommit
        self._conn: Connection | None = None
        self.retry = DbRetry(outage, stopping)

    def run(
        self, work: Callable[[Connection], T], *, atomic: bool = False, within: float | None = None
    ) -> T:
        if self._conn is not None:
            # The common case, without tenacity's bookkeeping: the connection
            # works (it did last time), one try.
            try:
                result = self._attempt(work, atomic)
            except (SQLAlchemyError, DatabaseUnavailable) as exc:
                if not is_transient_db_error(exc):
                    raise
                logger.debug("connection dropped (%s); trying a new one at once", short_error(exc))
            else:
                self._outage.recovered()
                return result
        return self.retry.call(functools.partial(self._attempt, work, atomic), within=within)

    def _attempt(self, work: Callable[[Connection], T], atomic: bool) -> T:
        try:
            conn = self._connection()
            if atomic and self._autocommit:
                return _in_one_transaction(conn, work)
            with conn.begin():
                return work(conn)
        except (SQLAlchemyError, DatabaseUnavailable) as exc:
            # A connection on a server that refuses writes is dropped too: the
            # next one may reach the new primary (`target_session_attrs`).
            if is_transient_db_error(exc):
                self.close()
                raise
            if self._outage_was_swallowed(exc):
                self.close()
                raise DatabaseUnavailable(
                    f"the server refuses writes ({short_error(exc)})"
                ) from exc
            raise

    def _outage_was_swallowed(self, exc: BaseException) -> bool:
        """Whether `exc`, no outage itself, follows one that the work swallowed
        and went on: its connection was invalidated (dropped, or a write refused
        on an engine from `make_engine`), or its transaction aborted (25P02) on
        a server that takes no writes (asked in a transaction of its own)."""
        conn = self._conn
        if conn is None:
            return False
        if conn.invalidated:
            return True
        if sqlstate(exc) != IN_FAILED_TRANSACTION:
            return False
        try:
            if conn.in_transaction():
                conn.rollback()
            read_only = conn.exec_driver_sql("SHOW transaction_read_only").scalar()
            conn.rollback()
        except SQLAlchemyError:
            return True  # it cannot even be asked
        return read_only == "on"

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
