"""The runner's one retry policy for a database blip (`DbRetry`, through
`DbSession`), on a real Postgres: a killed connection replaced at once, an
outage retried with growing waits and logged once, a stop that ends the waits,
a bound per call that never makes the tries more frequent, and the heartbeat
that enforces deadlines while the database is away."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import ProgrammingError

from manga_page_analysis.db import make_engine
from manga_page_analysis.queue import KIND_SYNC_MANGA, Lease
from manga_page_analysis.worker import JobContext, NoopHandler, Runner
from manga_page_analysis.worker.dbsession import DatabaseUnavailable, DbSession, runner_outage
from tests.helpers import job_row, wait_until
from tests.integration.test_runner_batched import fill

OUTAGE_LOGGER = "manga_page_analysis.worker.reports.outage"


@dataclass
class Switchable:
    """An engine whose new connections are refused while `down` is set."""

    engine: Engine
    admin: Engine
    down: threading.Event = field(default_factory=threading.Event)
    attempts: Counter[str] = field(default_factory=Counter)

    def go_down(self) -> None:
        """Refuse new connections and drop every open one (as a restarting server)."""
        self.down.set()
        with self.admin.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )


@pytest.fixture
def switchable(database_url: str) -> Iterator[Switchable]:
    url = database_url.replace("postgresql+psycopg://", "postgresql://")
    state: dict[str, Switchable] = {}

    def connect() -> psycopg.Connection[Any]:
        it = state["it"]
        it.attempts["all"] += 1
        if it.down.is_set():
            it.attempts["refused"] += 1
            raise psycopg.OperationalError("connection refused (the test's outage)")
        return psycopg.connect(url)

    engine = make_engine(database_url, creator=connect, pool_size=10)
    admin = make_engine(database_url)
    state["it"] = Switchable(engine, admin)
    try:
        yield state["it"]
    finally:
        engine.dispose()
        admin.dispose()


def _pid(conn: Connection) -> int:
    return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(admin: Engine, pid: int) -> None:
    with admin.begin() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    def gone() -> bool:
        # A transaction of its own each time: pg_stat_activity is a snapshot per transaction.
        with admin.connect() as conn:
            return not conn.execute(
                text("SELECT 1 FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).first()

    wait_until(gone)  # terminated asynchronously


def test_a_killed_connection_is_replaced_at_once_without_an_outage(engine, database_url, caplog):
    caplog.set_level(logging.DEBUG, logger=OUTAGE_LOGGER)
    session = DbSession(engine, runner_outage(), threading.Event(), autocommit=True)
    admin = make_engine(database_url)
    try:
        first = session.run(_pid)
        _terminate(admin, first)
        second = session.run(_pid)
    finally:
        session.close()
        admin.dispose()
    assert second != first  # a new connection, and the call went through
    # No failed try was counted (so no wait made) and no outage reported.
    assert session.retry.failures == 0
    assert "unreachable" not in caplog.text


def test_other_errors_propagate_and_keep_the_connection(engine):
    session = DbSession(engine, runner_outage(), threading.Event(), autocommit=True)
    try:
        before = session.run(_pid)
        with pytest.raises(ProgrammingError):
            session.run(lambda conn: conn.execute(text("SELECT * FROM no_such_table")))
        assert session.run(_pid) == before
    finally:
        session.close()
    assert session.retry.failures == 0


def test_an_outage_is_retried_with_growing_waits_logged_once_and_ended_by_a_stop(
    switchable, caplog
):
    caplog.set_level(logging.DEBUG, logger=OUTAGE_LOGGER)
    stopping = threading.Event()
    outage = runner_outage()
    session = DbSession(switchable.engine, outage, stopping, autocommit=True)
    other = DbSession(switchable.engine, outage, threading.Event(), autocommit=True)
    outcome: list[BaseException | int] = []

    def call() -> None:
        try:
            outcome.append(session.run(_pid))
        except BaseException as exc:
            outcome.append(exc)

    try:
        session.run(_pid)
        other.run(_pid)
        switchable.go_down()
        caller = threading.Thread(target=call)
        caller.start()
        # Four failures in a row mean waits of at least 0.1, 0.2 and 0.4 s were
        # made: the next one is at least 0.8 s, and a stop must end it at once.
        wait_until(lambda: session.retry.failures >= 4)
        stopping.set()
        caller.join(timeout=5)
        assert not caller.is_alive(), "a stop did not end the retries"
        assert isinstance(outcome[0], DatabaseUnavailable)
        assert "connection refused" in str(outcome[0])
        refused = switchable.attempts["refused"]
        # Backoff, not a spin: the tries of one thread over about 1.5 s.
        assert 4 <= refused <= 6, switchable.attempts
        # Another thread of the runner meets the same outage: not logged again.
        with pytest.raises(DatabaseUnavailable):
            other.run(_pid, within=0.0)
        switchable.down.clear()
        other.run(_pid)
    finally:
        session.close()
        other.close()
    assert caplog.text.count("database unreachable") == 1
    assert caplog.text.count("database reachable again") == 1


def test_a_bound_per_call_returns_control_but_never_tries_sooner(switchable):
    session = DbSession(switchable.engine, runner_outage(), threading.Event(), autocommit=True)
    try:
        session.run(_pid)
        switchable.go_down()
        while session.retry.failures < 4:
            with pytest.raises(DatabaseUnavailable):
                session.run(_pid, within=0.5)
        # The next try is at least 0.8 s after the fourth failure. A caller that
        # comes back after each short bound (the heartbeat enforcing deadlines)
        # gets control back each time, without a try of its own.
        tries = switchable.attempts["refused"]
        for _ in range(5):
            with pytest.raises(DatabaseUnavailable):
                session.run(_pid, within=0.05)
        assert switchable.attempts["refused"] == tries
        assert session.retry.failures == 4
        switchable.down.clear()
        # Once the wait it owes is over, the next call goes through.
        assert session.run(_pid) > 0
        assert session.retry.failures == 0
    finally:
        session.close()


class CancelRecorder(NoopHandler):
    """Holds its dispatch until cancelled; `cancelled` is set then."""

    def __init__(self) -> None:
        super().__init__(KIND_SYNC_MANGA)
        self.executing = threading.Event()
        self.cancelled = threading.Event()

    def execute(self, item: Lease, ctx: JobContext) -> None:
        self.executing.set()
        ctx.stop.wait(30)
        if ctx.stop.is_set():
            self.cancelled.set()


def test_deadlines_are_enforced_and_their_ends_written_across_an_outage(switchable, caplog):
    """The database goes away while a job runs: the heartbeat still fails the job
    at its deadline, the acker keeps that end through the outage and writes it
    once the database is back."""
    caplog.set_level(logging.INFO)
    (job_id,) = fill(switchable.engine, 1)
    handler = CancelRecorder()
    # The first renewal (after 1 s) meets the outage; the deadline comes 1.5 s
    # later. No maintenance: its reclaim would race the acker for the expired lease.
    runner = Runner(
        switchable.engine,
        [handler],
        workers=1,
        lease_duration=timedelta(seconds=3),
        job_timeout=2.5,
        idle_poll=0.05,
        listen=False,
        maintenance=False,
    )
    runner.start()
    try:
        assert handler.executing.wait(10)
        switchable.go_down()
        assert handler.cancelled.wait(10), "the deadline was not enforced during the outage"
        wait_until(lambda: "database unreachable" in caplog.text)
        switchable.down.clear()
        wait_until(lambda: runner.in_flight == 0, timeout=15)
    finally:
        runner.stop()
        assert runner.join(10)
    with switchable.admin.connect() as conn:
        row = job_row(conn, job_id)
    assert row.state == "pending" and row.last_error == handler.timeout_message
    assert row.attempts == 1
