"""A database that refuses writes (SQLSTATE 25006, as a standby before its
promotion or a demoted primary answers) is an outage, on real Postgres: the
runner's `DbSession` retries it on a new connection and logs it once; hosts
get `DatabaseUnavailable` from the pages-in and enqueue functions; the admin
API answers 503 with `Retry-After`. The server is made read-only for new
sessions with `ALTER DATABASE ... SET default_transaction_read_only`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from flask import Flask
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InternalError

from manga_page_analysis.db import make_engine
from manga_page_analysis.errors import DatabaseUnavailable, ServiceError
from manga_page_analysis.pages import ensure_manga
from manga_page_analysis.queue import SyncManga, enqueue, request_analysis
from manga_page_analysis.web.flask import admin_blueprint
from manga_page_analysis.worker.dbsession import DbSession, runner_outage
from tests.helpers import make_page, wait_until

OUTAGE_LOGGER = "manga_page_analysis.worker.reports.outage"


class ReadOnlySwitch:
    """Makes the test database read-only for the sessions that start from now on."""

    def __init__(self, engine: Engine) -> None:
        self._admin = engine.connect()  # opened before: it stays read-write
        self._admin.execute(text("SELECT 1"))
        self._admin.commit()
        self._name = make_url(str(engine.url)).database

    def _set(self, value: str) -> None:
        self._admin.execute(
            text(f'ALTER DATABASE "{self._name}" SET default_transaction_read_only = {value}')
        )
        self._admin.commit()

    def on(self) -> None:
        self._set("on")

    def off(self) -> None:
        self._set("off")

    def close(self) -> None:
        self.off()
        self._admin.close()


@pytest.fixture
def read_only(engine: Engine) -> Iterator[ReadOnlySwitch]:
    switch = ReadOnlySwitch(engine)
    try:
        yield switch
    finally:
        switch.close()


def _elect(conn) -> int:
    conn.execute(
        text(
            "INSERT INTO queue_leader (name, leader_id, expires_at) "
            "VALUES ('refused-test', 'me', now()) ON CONFLICT (name) DO NOTHING"
        )
    )
    return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_the_runner_retries_a_read_only_server_on_new_connections_and_logs_it_once(
    engine, read_only, caplog
):
    caplog.set_level(logging.INFO, logger=OUTAGE_LOGGER)
    stopping = threading.Event()
    session = DbSession(engine, runner_outage(), stopping, autocommit=True)
    read_only.on()
    try:
        with ThreadPoolExecutor(1) as pool:
            write = pool.submit(session.run, _elect)
            wait_until(lambda: session.retry.failures >= 2, timeout=30)
            assert not write.done()
            read_only.off()
            # Only a new connection sees the change: the refused ones were dropped.
            pid = write.result(timeout=30)
    finally:
        stopping.set()
        session.close()
    with engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM queue_leader WHERE leader_id = 'me'")
            ).scalar_one()
            == 1
        )
        assert pid != conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    assert caplog.text.count("refusing writes") == 1, caplog.text
    assert "ReadOnlySqlTransaction" in caplog.text
    assert caplog.text.count("database reachable again") == 1


def _swallowing(conn) -> int:
    """A handler's bug: it swallows a failed write and goes on in the aborted transaction."""
    try:
        conn.execute(
            text("INSERT INTO queue_leader (name, leader_id, expires_at) VALUES ('x', 'y', now())")
        )
        conn.execute(
            text("INSERT INTO queue_leader (name, leader_id, expires_at) VALUES ('x', 'y', now())")
        )
    except DBAPIError:
        pass
    return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())  # 25P02


@pytest.mark.parametrize("ours", [True, False], ids=["make_engine", "a host's engine"])
def test_an_abort_that_follows_a_refused_write_is_the_outage_and_any_other_is_not(
    database_url, read_only, caplog, ours
):
    caplog.set_level(logging.INFO, logger=OUTAGE_LOGGER)
    stopping = threading.Event()
    # make_engine's engine drops the connection at the refusal; a host's keeps
    # it, and the abort that follows is told apart by asking the server.
    engine = make_engine(database_url) if ours else create_engine(database_url)
    session = DbSession(engine, runner_outage(), stopping)  # one transaction per call
    try:
        read_only.on()
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(session.run, _swallowing)
            wait_until(lambda: session.retry.failures >= 2, timeout=30)
            read_only.off()
            # Read-write now: the duplicate key aborts the transaction, which is a bug.
            with pytest.raises(InternalError, match="current transaction is aborted"):
                call.result(timeout=30)
    finally:
        stopping.set()
        session.close()
        engine.dispose()
    assert caplog.text.count("refusing writes") == 1, caplog.text


def test_hosts_get_one_exception_to_catch_and_retry(engine, read_only):
    with engine.begin() as conn:
        page_id = make_page(conn)
    read_only.on()
    engine.dispose()  # the pool's connections predate the switch
    calls = {
        "enqueue": lambda conn: enqueue(conn, SyncManga(source_id="s", source_manga_key="k")),
        "request_analysis": lambda conn: request_analysis(conn, page_id),
        "ensure_manga": lambda conn: ensure_manga(conn, source_id="s", source_key="k", title="t"),
    }
    for name, call in calls.items():
        with engine.connect() as conn:
            with pytest.raises(DatabaseUnavailable, match="cannot take writes") as refused:
                call(conn)
            conn.rollback()
        assert isinstance(refused.value, ServiceError), name
        assert getattr(refused.value.__cause__.orig, "sqlstate", None) == "25006", name
    read_only.off()
    with engine.begin() as conn:  # the retry a host makes, once writes are taken again
        assert request_analysis(conn, page_id) is not None


def test_the_admin_api_answers_503_with_retry_after_while_writes_are_refused(engine, read_only):
    with engine.begin() as conn:
        page_id = make_page(conn)
    app = Flask(__name__)
    app.register_blueprint(admin_blueprint(engine, token="t"), url_prefix="/admin")
    client = app.test_client()
    auth = {"Authorization": "Bearer t"}
    read_only.on()
    engine.dispose()
    refused = client.post(f"/admin/api/pages/{page_id}/analysis", headers=auth, json={})
    assert refused.status_code == 503, refused.get_data(as_text=True)
    assert refused.headers["Retry-After"] == "5"
    assert refused.get_json()["error"]["code"] == "unavailable"
    # Reads still work on a read-only server.
    assert client.get("/admin/api/stats", headers=auth).status_code == 200
    read_only.off()
    engine.dispose()
    taken = client.post(f"/admin/api/pages/{page_id}/analysis", headers=auth, json={})
    assert taken.status_code == 202


def test_the_engine_drops_a_connection_whose_writes_were_refused(database_url, read_only):
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    try:
        read_only.on()
        with engine.connect() as conn:
            first = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with pytest.raises(Exception, match="read-only transaction"):
                conn.execute(text("CREATE TABLE refused_here (x int)"))
        read_only.off()
        with engine.begin() as conn:  # a new connection, on which writes are taken
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != first
            conn.execute(text("CREATE TEMP TABLE taken_here (x int)"))
    finally:
        engine.dispose()
