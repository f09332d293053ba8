"""The product through a real PgBouncer in transaction pooling mode (testbed/pgbouncer.py).

Many worker processes share a few server connections; LISTEN goes on a
direct connection (`LISTEN_DATABASE_URL`); nothing relies on session state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from sqlalchemy import text
from sqlalchemy.engine import make_url

from manga_page_analysis.analysis.page_events import analysis_event_bus
from manga_page_analysis.db import connect_kwargs, make_engine
from manga_page_analysis.queue import AnalyzePage, enqueue_many, request_analysis
from manga_page_analysis.web.flask import admin_blueprint
from manga_page_analysis.worker.reports.events import JobEvent
from testbed.pgbouncer import PgBouncer
from tests.helpers import make_page, wait_until
from tests.worker_support import png_bytes

DRAIN_JOBS = 2000
DRAIN_PROCESSES = 4
DRAIN_THREADS = 4


def test_engines_prepare_no_statement(database_url):
    # psycopg prepares a statement on its 5th run; PgBouncer in transaction
    # mode may run the 6th on a server connection that never saw it.
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            for _ in range(10):
                conn.execute(text("SELECT count(*) FROM crawler_jobs WHERE state = 'pending'"))
            prepared = conn.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar()
    finally:
        engine.dispose()
    assert prepared == 0


# --- many worker processes through one small pool ----------------------------------


_WRITES_LOG = """
CREATE TABLE analysis_writes (page_id uuid NOT NULL);
CREATE FUNCTION log_analysis_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO analysis_writes VALUES (NEW.page_id);
    RETURN NEW;
END $$;
CREATE TRIGGER log_analysis_write AFTER INSERT OR UPDATE ON page_analysis
    FOR EACH ROW EXECUTE FUNCTION log_analysis_write();
"""


def _pages(database_url: str, n: int) -> list[uuid.UUID]:
    """`n` pages of one chapter, all showing page.png, inserted in one statement."""
    with psycopg.connect(**connect_kwargs(database_url), autocommit=True) as conn:
        conn.execute(_WRITES_LOG)
        manga = conn.execute("INSERT INTO mangas (title) VALUES ('m') RETURNING id").fetchone()
        manga_id = manga[0]  # type: ignore[index]
        (chapter_id,) = conn.execute(
            "INSERT INTO chapters (manga_id, number) VALUES (%s, 1) RETURNING id", (manga_id,)
        ).fetchone()
        rows = conn.execute(
            "INSERT INTO pages (chapter_id, number, storage_key, content_type) "
            "SELECT %s, g, 'page.png', 'image/png' FROM generate_series(1, %s) g RETURNING id",
            (chapter_id, n),
        ).fetchall()
    return [row[0] for row in rows]


def _worker_env(database_url: str, vision_url: str, storage: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "LISTEN_DATABASE_URL")}
    env.update(
        DATABASE_URL=database_url,
        VISION_URL=vision_url,
        VISION_MODEL="test-model",
        STORAGE_ROOT=str(storage),
        READINESS_POLL_SECONDS="0.1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@contextmanager
def _worker_processes(env: dict[str, str], n: int, logs: Path) -> Iterator[list[Path]]:
    """`n` run-worker processes, logging to files; SIGTERM on exit, each must exit 0."""
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for index in range(n):
            log = logs / f"worker-{index}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "manga_page_analysis",
                        "--log-level",
                        "WARNING",
                        "run-worker",
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            processes.append((process, log))
        yield [log for _, log in processes]
    finally:
        for process, _ in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = []
        for process, log in processes:
            try:
                codes.append(process.wait(20))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append(process.wait(5))
                pytest.fail(f"a worker did not stop on SIGTERM:\n{log.read_text()}")
    assert codes == [0] * n, [log.read_text()[-2000:] for _, log in processes]


class _ConnectionSampler:
    """Samples, until stopped, the server connections PgBouncer holds to a
    database, its clients there, the backends Postgres itself counts (less
    the sampler's own), and the jobs done, all on one direct connection."""

    def __init__(self, bouncer: PgBouncer, direct_url: str, dbname: str | None) -> None:
        self.max_servers = self.max_clients = self.max_backends = 0
        self.samples = self.done = 0
        self._bouncer = bouncer
        self._direct_url = direct_url
        self._dbname = dbname
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connection-sampler")
        self.error: BaseException | None = None

    def __enter__(self) -> _ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            with psycopg.connect(**connect_kwargs(self._direct_url), autocommit=True) as conn:
                while not self._stop.wait(0.05):
                    servers = self._bouncer.show("SERVERS")
                    clients = self._bouncer.show("CLIENTS")
                    backends, self.done = conn.execute(
                        "SELECT (SELECT count(*) FROM pg_stat_activity"
                        "        WHERE datname = current_database() AND pid <> pg_backend_pid()"
                        "        AND backend_type = 'client backend'),"  # not autovacuum
                        "       (SELECT count(*) FROM crawler_jobs WHERE state = 'done')"
                    ).fetchone()  # type: ignore[misc]
                    self.max_servers = max(
                        self.max_servers, sum(s["database"] == self._dbname for s in servers)
                    )
                    self.max_clients = max(
                        self.max_clients, sum(c["database"] == self._dbname for c in clients)
                    )
                    self.max_backends = max(self.max_backends, backends)
                    self.samples += 1
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.mark.slow
def test_worker_processes_drain_through_pgbouncer_without_loss_or_double_writes(
    database_url, pgbouncer, vision_server, tmp_path
):
    storage = tmp_path / "storage"
    storage.mkdir()
    (storage / "page.png").write_bytes(png_bytes((32, 48)))
    page_ids = _pages(database_url, DRAIN_JOBS)
    pooled_url = pgbouncer.url_for(database_url)
    dbname = make_url(database_url).database
    pooled = make_engine(pooled_url)
    try:
        with pooled.begin() as conn:  # enqueue_many through the pooler too
            ids = enqueue_many(conn, [AnalyzePage(page_id=page) for page in page_ids])
        assert None not in ids
    finally:
        pooled.dispose()
    env = _worker_env(
        pooled_url,
        vision_server.url,
        storage,
        ANALYSIS_WORKERS=str(DRAIN_THREADS),
        QUEUE_LISTEN="false",
        IDLE_POLL_SECONDS="0.1",
    )
    # Start from no connection to the database at all, so every backend the
    # sampler sees from here on is a worker's (through PgBouncer).
    pgbouncer.admin(f'KILL "{dbname}"')
    pgbouncer.admin(f'RESUME "{dbname}"')
    wait_until(lambda: _client_backends(database_url) == 0, timeout=10)
    started = time.monotonic()
    with (
        _ConnectionSampler(pgbouncer, database_url, dbname) as sampler,
        _worker_processes(env, DRAIN_PROCESSES, tmp_path) as logs,
    ):
        wait_until(
            lambda: (
                sampler.done == DRAIN_JOBS
                or sampler.error is not None
                or any(_exited(log) for log in logs)
            ),
            timeout=100,
            interval=0.2,
        )
        elapsed = time.monotonic() - started
    print(
        f"\n[pgbouncer] {DRAIN_JOBS} jobs, {DRAIN_PROCESSES}x{DRAIN_THREADS} workers, "
        f"{elapsed:.1f} s; max server connections {sampler.max_servers} "
        f"(pool {pgbouncer.pool_size}), max clients {sampler.max_clients}, "
        f"max backends {sampler.max_backends}, {sampler.samples} samples"
    )
    output = "\n".join(log.read_text() for log in logs)
    assert "prepared statement" not in output
    assert sampler.error is None
    writes = _one_row(
        database_url,
        "SELECT count(*), count(DISTINCT page_id) FROM analysis_writes",
    )
    jobs = _one_row(
        database_url,
        "SELECT count(*) FILTER (WHERE state = 'done'), count(*), max(attempts) FROM crawler_jobs",
    )
    assert jobs == (DRAIN_JOBS, DRAIN_JOBS, 1), output[-3000:]  # 0 lost, none retried
    assert writes == (DRAIN_JOBS, DRAIN_JOBS)  # every page written once, none twice
    assert len(vision_server.requests) == DRAIN_JOBS  # no model call repeated
    assert count_analyses(database_url) == DRAIN_JOBS
    # Pooling happened: more clients than server connections, and Postgres
    # never saw more backends than the pool holds (the sampler's own excluded).
    assert sampler.samples > 0
    assert 0 < sampler.max_servers <= pgbouncer.pool_size
    assert sampler.max_clients > pgbouncer.pool_size
    assert sampler.max_backends <= pgbouncer.pool_size


def _one_row(url: str, sql: str) -> tuple[Any, ...]:
    with psycopg.connect(**connect_kwargs(url)) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return tuple(row)


def _client_backends(url: str) -> int:
    """Client backends of the database, less the one asking."""
    return int(
        _one_row(
            url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )[0]
    )


def count_analyses(url: str) -> int:
    return int(_one_row(url, "SELECT count(*) FROM page_analysis WHERE status = 'done'")[0])


def _exited(log: Path) -> bool:
    return "Traceback" in log.read_text()


# --- LISTEN on a direct connection ---------------------------------------------------


def test_a_pooled_worker_listening_directly_picks_up_a_new_job_at_once(
    database_url, pgbouncer, vision_server, tmp_path
):
    storage = tmp_path / "storage"
    storage.mkdir()
    (storage / "page.png").write_bytes(png_bytes())
    pooled = make_engine(pgbouncer.url_for(database_url))
    with pooled.begin() as conn:
        page_id = make_page(conn, storage_key="page.png")
    # Polling alone would take a minute: a pickup within seconds is the wake-up.
    env = _worker_env(
        pgbouncer.url_for(database_url),
        vision_server.url,
        storage,
        ANALYSIS_WORKERS="2",
        IDLE_POLL_SECONDS="60",
        LISTEN_DATABASE_URL=database_url,
    )
    try:
        with _worker_processes(env, 1, tmp_path):
            # The listener is up once its LISTEN shows in pg_stat_activity.
            wait_until(lambda: _listeners(database_url) == 1, timeout=30)
            with pooled.begin() as conn:
                request_analysis(conn, page_id)
            requested = time.monotonic()
            vision_server.wait_for_requests(1, timeout=10)
            pickup = time.monotonic() - requested
            wait_until(lambda: count_analyses(database_url) == 1, timeout=10)
    finally:
        pooled.dispose()
    print(f"\n[pgbouncer] pickup through a direct LISTEN: {pickup * 1000:.0f} ms")
    assert pickup < 10  # far inside the 60 s poll


def _listeners(direct_url: str) -> int:
    """Backends of this database that ran LISTEN for the wake-ups (and still idle in it)."""
    return int(
        _one_row(
            direct_url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN%crawler_jobs_wakeup%'",
        )[0]
    )


# --- the admin API and its event stream --------------------------------------------


TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PREFIX = "/admin/analysis"


def test_admin_api_and_event_stream_through_pgbouncer_with_a_direct_listen(database_url, pgbouncer):
    pooled = make_engine(pgbouncer.url_for(database_url), pool_size=2, max_overflow=0)
    app = Flask(__name__)
    app.register_blueprint(
        admin_blueprint(pooled, token=TOKEN, listen_url=database_url, keepalive_seconds=0.2),
        url_prefix=PREFIX,
    )
    client = app.test_client()
    try:
        with pooled.begin() as conn:
            page_id = make_page(conn)
        # More requests than psycopg's prepare threshold, on 2 pooled connections.
        for _ in range(3):
            assert client.get(f"{PREFIX}/api/stats", headers=AUTH).status_code == 200
            assert client.get(f"{PREFIX}/api/jobs", headers=AUTH).status_code == 200
            response = client.post(f"{PREFIX}/api/pages/{page_id}/analysis", headers=AUTH)
            assert response.status_code == 202, response.get_data(as_text=True)
        stats = client.get(f"{PREFIX}/api/stats", headers=AUTH).get_json()
        assert stats["jobs"]["analyze_page"]["pending"] == 1

        response = client.get(f"{PREFIX}/api/events", headers=AUTH, buffered=False)
        chunks = iter(response.response)
        try:
            assert _read_until(chunks, ": listening")
            # The worker publishes through its pooled engine: NOTIFY needs no session.
            job_id = uuid.uuid4()
            analysis_event_bus(pooled).publish(
                JobEvent("completed", job_id, {"page_id": str(page_id)}, {"duration_ms": 7})
            )
            lines = _read_until(chunks, "data: ")
        finally:
            response.close()
    finally:
        pooled.dispose()
    data = json.loads(lines[-1].removeprefix("data: "))
    assert "event: completed" in lines and data["job_id"] == str(job_id)


def _read_until(chunks: Iterator[Any], prefix: str, limit: int = 200) -> list[str]:
    """Stream lines up to the first that starts with `prefix`."""
    lines: list[str] = []
    for _ in range(limit):
        chunk = next(chunks)
        text_chunk = chunk.decode() if isinstance(chunk, bytes) else chunk
        for line in text_chunk.splitlines():
            lines.append(line)
            if line.startswith(prefix):
                return lines
    raise AssertionError(f"no line starting {prefix!r} in {lines}")


# --- migrations -----------------------------------------------------------------------


def _migrate(url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "manga_page_analysis", "migrate"],
        env={**env, "DATABASE_URL": url},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_migrate_through_pgbouncer_and_the_hint_when_it_fails(
    empty_database_url, pgbouncer, tmp_path
):
    # The migrations run in one transaction, so today's run even through the pooler...
    result = _migrate(pgbouncer.url_for(empty_database_url), tmp_path)
    assert result.returncode == 0, result.stderr
    revision = _one_row(empty_database_url, "SELECT version_num FROM alembic_version")[0]
    assert revision
    # ...and a failure that is not the pooler's (a missing database) is said in one
    # line without sending the operator after PgBouncer (the failures that can be the
    # pooler's, which get the hint: tests/unit/test_schema_names.py).
    missing = make_url(pgbouncer.url_for(empty_database_url)).set(database="no_such_db")
    result = _migrate(missing.render_as_string(hide_password=False), tmp_path)
    assert result.returncode == 1
    failures = [line for line in result.stderr.splitlines() if "migrate failed" in line]
    assert len(failures) == 1 and "no_such_db" in failures[0], result.stderr
    assert "PgBouncer" not in result.stderr
