"""`api/events`: Server-Sent Events served by a real HTTP server on 127.0.0.1.

The events are published by another process (the worker's `EventBus` in a
subprocess), the listening backend is terminated under the stream, and the
stream's thread and connection are counted after the client goes away.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from flask import Flask
from psycopg import sql
from werkzeug.serving import make_server

from manga_page_analysis.db import connect_kwargs
from manga_page_analysis.web.event_stream import APPLICATION_NAME, format_event
from manga_page_analysis.web.flask import admin_blueprint
from tests.helpers import count, wait_until

TOKEN = "s3cret-token"
PREFIX = "/admin/analysis"

PUBLISHER = """
import sys, uuid
from manga_page_analysis.analysis.page_events import analysis_event_bus
from manga_page_analysis.db import make_engine
from manga_page_analysis.worker.reports.events import JobEvent

engine = make_engine(sys.argv[1])
try:
    analysis_event_bus(engine).publish(JobEvent(
        "completed", uuid.UUID(sys.argv[2]),
        {"page_id": sys.argv[3], "manga_title": "Akira", "chapter_number": 3, "page_number": 7},
        {"duration_ms": 42},
    ))
finally:
    engine.dispose()
"""


def _publish_from_another_process(database_url: str, page_id: uuid.UUID) -> uuid.UUID:
    job_id = uuid.uuid4()
    subprocess.run(
        [sys.executable, "-c", PUBLISHER, database_url, str(job_id), str(page_id)],
        check=True,
        timeout=60,
    )
    return job_id


def _terminate_listeners(engine) -> int:
    return count(
        engine,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = :name AND datname = current_database()",
        name=APPLICATION_NAME,
    )


@contextmanager
def _serve(engine, **options) -> Iterator[tuple[str, int, Flask]]:
    app = Flask(__name__)
    options.setdefault("keepalive_seconds", 0.2)
    app.register_blueprint(admin_blueprint(engine, token=TOKEN, **options), url_prefix=PREFIX)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="test-http-server", daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.port, app
        # Every stream ends with its client: none may outlive the test (or its database).
        streams = app.blueprints["page_analysis_admin"].event_streams
        wait_until(lambda: streams.open_streams == 0, timeout=10)
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


class SSEClient:
    """A bare HTTP client reading the stream line by line."""

    def __init__(self, host: str, port: int) -> None:
        self.connection = http.client.HTTPConnection(host, port, timeout=20)
        self.connection.request(
            "GET", f"{PREFIX}/api/events", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        self.response = self.connection.getresponse()

    def read_until(self, predicate) -> list[str]:
        """Lines read up to and including the first one `predicate` accepts."""
        lines = []
        while True:
            raw = self.response.readline()
            if not raw:
                raise AssertionError(f"stream ended; read {lines}")
            line = raw.decode().rstrip("\n")
            lines.append(line)
            if predicate(line):
                return lines

    def next_event(self) -> tuple[str, dict]:
        lines = self.read_until(lambda line: line.startswith("data: "))
        event = [line for line in lines if line.startswith("event: ")][-1]
        return event.removeprefix("event: "), json.loads(lines[-1].removeprefix("data: "))

    def close(self) -> None:
        self.response.close()
        self.connection.close()


def _listeners(engine) -> int:
    return count(
        engine,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = :name AND datname = current_database()",
        name=APPLICATION_NAME,
    )


def _request_threads() -> set[threading.Thread]:
    """Live request threads of the test servers (socketserver names them after their target)."""
    return {t for t in threading.enumerate() if "process_request_thread" in t.name and t.is_alive()}


def test_stream_forwards_an_event_published_by_another_process(engine, database_url):
    with _serve(engine) as (host, port, _):
        client = SSEClient(host, port)
        try:
            assert client.response.status == 200
            assert client.response.getheader("Content-Type").startswith("text/event-stream")
            client.read_until(lambda line: line == ": listening")
            page_id = uuid.uuid4()
            job_id = _publish_from_another_process(database_url, page_id)
            event_type, data = client.next_event()
        finally:
            client.close()
    assert event_type == "completed"
    assert data["type"] == "completed" and data["job_id"] == str(job_id)
    assert data["page_id"] == str(page_id) and data["manga_title"] == "Akira"
    assert data["duration_ms"] == 42


def test_stream_sends_keepalive_comments_while_idle(engine):
    with _serve(engine, keepalive_seconds=0.1) as (host, port, _):
        client = SSEClient(host, port)
        try:
            client.read_until(lambda line: line == ": listening")
            lines = client.read_until(lambda line: line == ": keep-alive")
            client.read_until(lambda line: line == ": keep-alive")
        finally:
            client.close()
    assert all(not line.startswith("data:") for line in lines)


def test_stream_survives_termination_of_its_listening_backend(engine, database_url):
    with _serve(engine) as (host, port, _):
        client = SSEClient(host, port)
        try:
            client.read_until(lambda line: line == ": listening")
            assert _listeners(engine) == 1
            assert _terminate_listeners(engine) == 1
            client.read_until(lambda line: line == ": database connection lost; reconnecting")
            client.read_until(lambda line: line.startswith(": reconnected"))
            page_id = uuid.uuid4()
            _publish_from_another_process(database_url, page_id)
            event_type, data = client.next_event()
        finally:
            client.close()
    assert event_type == "completed" and data["page_id"] == str(page_id)


def _allow_connections(engine, allowed: bool) -> int:
    """Lock the test database out (or let it back in); returns listeners terminated."""
    database = engine.url.database
    # From the maintenance database: Postgres won't lock out the current one.
    kwargs = connect_kwargs(engine) | {"dbname": "postgres"}
    with psycopg.connect(**kwargs, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
                sql.Identifier(database), sql.SQL("true" if allowed else "false")
            )
        )
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = %s AND %s",
            (APPLICATION_NAME, database, not allowed),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _records(caplog, level: int, text: str) -> int:
    return sum(
        record.levelno == level and text in record.getMessage()
        for record in caplog.records
        if record.name == "manga_page_analysis.worker.reports.outage"
    )


def test_stream_says_the_database_went_away_logs_it_once_and_reconnects(
    engine, database_url, caplog
):
    caplog.set_level(logging.DEBUG, logger="manga_page_analysis.worker.reports.outage")
    with _serve(engine) as (host, port, _):
        client = SSEClient(host, port)
        try:
            client.read_until(lambda line: line == ": listening")
            try:
                assert _allow_connections(engine, False) == 1
                client.read_until(lambda line: line.startswith(": database connection lost"))
                # Reconnects fail and back off; the stream says so each time.
                client.read_until(lambda line: line.startswith(": database unreachable"))
                lines = client.read_until(lambda line: line.startswith(": database unreachable"))
                assert not any(line.startswith(": reconnected") for line in lines)
                # A second client meanwhile: a 503 at once, not a silent 200.
                refused = http.client.HTTPConnection(host, port, timeout=10)
                refused.request(
                    "GET", f"{PREFIX}/api/events", headers={"Authorization": f"Bearer {TOKEN}"}
                )
                answer = refused.getresponse()
                body = json.loads(answer.read())
                refused.close()
                assert answer.status == 503 and answer.getheader("Retry-After")
                assert body["error"]["code"] == "unavailable"
                wait_until(
                    lambda: _records(caplog, logging.DEBUG, "still unreachable") >= 3, timeout=20
                )
                # However many retries and clients: one warning for the outage.
                assert _records(caplog, logging.WARNING, "live events paused") == 1
            finally:
                _allow_connections(engine, True)
            client.read_until(lambda line: line.startswith(": reconnected"))
            page_id = uuid.uuid4()
            _publish_from_another_process(database_url, page_id)
            event_type, data = client.next_event()
        finally:
            client.close()
    assert event_type == "completed" and data["page_id"] == str(page_id)
    assert _records(caplog, logging.WARNING, "live events paused") == 1
    assert _records(caplog, logging.INFO, "live events resumed") == 1


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_events_with_the_database_down_answer_503_and_log_once(caplog):
    from manga_page_analysis.db import make_engine

    caplog.set_level(logging.DEBUG, logger="manga_page_analysis.worker.reports.outage")
    dead_engine = make_engine(f"postgresql+psycopg://nobody@127.0.0.1:{_closed_port()}/nowhere")
    try:
        app = Flask(__name__)
        blueprint = admin_blueprint(dead_engine, token=TOKEN)
        app.register_blueprint(blueprint, url_prefix=PREFIX)
        client = app.test_client()
        for _ in range(3):
            response = client.get(
                f"{PREFIX}/api/events", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert response.status_code == 503 and response.headers["Retry-After"] == "5"
            assert response.get_json()["error"]["code"] == "unavailable"
            assert blueprint.event_streams.open_streams == 0  # the slot was released
    finally:
        dead_engine.dispose()
    assert _records(caplog, logging.WARNING, "live events paused") == 1
    assert _records(caplog, logging.DEBUG, "still unreachable") == 2


def test_client_going_away_ends_the_thread_and_closes_the_connection(engine):
    with _serve(engine) as (host, port, app):
        streams = app.blueprints["page_analysis_admin"].event_streams
        threads_before = _request_threads()  # earlier tests' threads may still be ending
        client = SSEClient(host, port)
        client.read_until(lambda line: line == ": listening")
        assert _listeners(engine) == 1 and streams.open_streams == 1
        (stream_thread,) = _request_threads() - threads_before
        client.close()
        wait_until(lambda: _listeners(engine) == 0, timeout=10)
        wait_until(lambda: streams.open_streams == 0, timeout=10)
        wait_until(lambda: not stream_thread.is_alive(), timeout=10)


def test_streams_beyond_the_cap_get_a_503(engine):
    with _serve(engine, max_event_streams=1) as (host, port, app):
        streams = app.blueprints["page_analysis_admin"].event_streams
        first = SSEClient(host, port)
        try:
            first.read_until(lambda line: line == ": listening")
            second = http.client.HTTPConnection(host, port, timeout=10)
            second.request(
                "GET", f"{PREFIX}/api/events", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            refused = second.getresponse()
            body = json.loads(refused.read())
            second.close()
        finally:
            first.close()
        assert refused.status == 503 and refused.getheader("Retry-After")
        assert body["error"]["code"] == "too_many_streams"
        wait_until(lambda: streams.open_streams == 0, timeout=10)
        # The slot is free again once the first client has gone.
        again = SSEClient(host, port)
        try:
            again.read_until(lambda line: line == ": listening")
        finally:
            again.close()


def test_a_stream_never_iterated_frees_its_slot_on_close(engine):
    app = Flask(__name__)
    blueprint = admin_blueprint(engine, token=TOKEN, max_event_streams=1)
    app.register_blueprint(blueprint, url_prefix=PREFIX)
    response = app.test_client().get(
        f"{PREFIX}/api/events", headers={"Authorization": f"Bearer {TOKEN}"}, buffered=False
    )
    assert blueprint.event_streams.open_streams == 1
    response.close()
    assert blueprint.event_streams.open_streams == 0
    # Closed on our side at once; the server's backend goes a moment later
    # (pg_stat_activity listed it once in a loaded CI run).
    wait_until(lambda: _listeners(engine) == 0, timeout=10)


def test_format_event():
    assert format_event('{"type": "started", "page_id": "p"}') == (
        'event: started\ndata: {"type": "started", "page_id": "p"}\n\n'
    )
    assert format_event("not json") == "data: not json\n\n"
    assert format_event('{"type": "bad\\ntype"}') == 'data: {"type": "bad\\ntype"}\n\n'
    assert format_event("two\nlines") == "data: two\ndata: lines\n\n"
