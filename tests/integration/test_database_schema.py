"""`DATABASE_SCHEMA`: the package's tables, triggers, version table and NOTIFY
channels in a schema of their own, beside a host whose own table `pages` sits
in `public`; directly and through PgBouncer in transaction mode (no
`search_path`, no session state)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from sqlalchemy import Engine, create_engine, text

from manga_page_analysis.db import make_engine, schema_options
from manga_page_analysis.migrations import current_revision, differences, head_revision
from manga_page_analysis.queue import request_analysis
from manga_page_analysis.web.flask import admin_blueprint
from testbed.pgbouncer import PgBouncer
from testbed.vision_server import ScriptedVisionServer, analysis_content, ok_answer
from tests.helpers import make_page, wait_until
from tests.integration.test_cli import run_cli, start_worker, stop_worker
from tests.worker_support import png_bytes

SCHEMA = "page_analysis"
HOST_PAGES = "CREATE TABLE public.pages (id serial PRIMARY KEY, slug text NOT NULL UNIQUE)"
OUR_TABLES = {
    "crawler_jobs",
    "mangas",
    "chapters",
    "pages",
    "page_analysis",
    "queue_leader",
    "alembic_version",
}


def _env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_SCHEMA")}
    env.update(DATABASE_URL=database_url, PYTHONUNBUFFERED="1", **extra)
    return env


def _tables(engine: Engine, schema: str) -> set[str]:
    with engine.connect() as conn:
        return set(
            conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}
            ).scalars()
        )


@pytest.fixture
def host_database(empty_database_url: str) -> Iterator[str]:
    """An empty database where the host already has its own `pages` table, with a row."""
    engine = create_engine(empty_database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(HOST_PAGES))
            conn.execute(text("INSERT INTO public.pages (slug) VALUES ('about-us')"))
    finally:
        engine.dispose()
    yield empty_database_url


def _host_pages_untouched(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT id, slug FROM public.pages")).all()
            columns = conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND table_name = 'pages' ORDER BY 1"
                )
            ).scalars()
            assert (rows, list(columns)) == ([(1, "about-us")], ["id", "slug"])
    finally:
        engine.dispose()


def test_migrate_refuses_a_host_table_in_its_way_with_one_line(
    host_database: str, tmp_path: Path
) -> None:
    result = run_cli("migrate", env=_env(host_database), cwd=tmp_path)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if "migrate failed" in line]
    assert len(lines) == 1, result.stderr
    assert 'table "pages" already exists in schema "public"' in lines[0]
    assert "DATABASE_SCHEMA" in lines[0]
    assert "Traceback" not in result.stderr and "PgBouncer" not in result.stderr
    _host_pages_untouched(host_database)
    engine = create_engine(host_database)
    try:
        assert _tables(engine, "public") == {"pages"}  # nothing half-made
    finally:
        engine.dispose()


def test_a_hosts_own_alembic_version_is_refused_in_one_line_and_left_alone(
    empty_database_url: str, tmp_path: Path
) -> None:
    """A Flask-Migrate host keeps its revision in `public.alembic_version`: our
    `migrate` must not take that table for its own (nor write to it), and says
    what to do; in a schema of its own, both projects keep their versions."""
    host_revision = "ae1027a6acf"
    engine = create_engine(empty_database_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("CREATE TABLE public.alembic_version (version_num varchar(32) PRIMARY KEY)")
            )
            conn.execute(
                text("INSERT INTO public.alembic_version VALUES (:rev)"), {"rev": host_revision}
            )

        def host_versions() -> list[str]:
            with engine.connect() as conn:
                return list(conn.execute(text("SELECT * FROM public.alembic_version")).scalars())

        refused = run_cli("migrate", env=_env(empty_database_url), cwd=tmp_path)
        assert refused.returncode == 1
        lines = [line for line in refused.stderr.splitlines() if "migrate failed" in line]
        assert len(lines) == 1, refused.stderr
        assert f'holds revision "{host_revision}"' in lines[0]
        assert "DATABASE_SCHEMA" in lines[0] and "Traceback" not in refused.stderr
        assert _tables(engine, "public") == {"alembic_version"}
        assert host_versions() == [host_revision]

        env = _env(empty_database_url, DATABASE_SCHEMA=SCHEMA)
        migrated = run_cli("migrate", env=env, cwd=tmp_path)
        assert migrated.returncode == 0, migrated.stderr
        assert host_versions() == [host_revision]
        with engine.connect() as conn:
            ours = conn.execute(text(f"SELECT version_num FROM {SCHEMA}.alembic_version"))
            assert list(ours.scalars()) == [head_revision()]
    finally:
        engine.dispose()


def test_migrate_puts_every_object_in_the_schema_and_the_models_agree(
    host_database: str, tmp_path: Path
) -> None:
    env = _env(host_database, DATABASE_SCHEMA=SCHEMA)
    first = run_cli("migrate", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "from an empty database to revision" in first.stdout
    again = run_cli("migrate", env=env, cwd=tmp_path)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr

    engine = make_engine(host_database, schema=SCHEMA)
    try:
        assert _tables(engine, SCHEMA) == OUR_TABLES
        assert _tables(engine, "public") == {"pages"}
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert differences(conn, SCHEMA) == []
            elsewhere = conn.execute(
                text(
                    "SELECT n.nspname, c.relname FROM pg_class AS c "
                    "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'public' AND c.relname <> 'pages' "
                    "AND c.relname NOT LIKE 'pages\\_%' "
                    "UNION ALL SELECT n.nspname, p.proname FROM pg_proc AS p "
                    "JOIN pg_namespace AS n ON n.oid = p.pronamespace "
                    "WHERE p.proname LIKE 'crawler_jobs%' AND n.nspname <> :s"
                ),
                {"s": SCHEMA},
            ).all()
            assert elsewhere == []  # no index, sequence or function outside the schema
    finally:
        engine.dispose()
    _host_pages_untouched(host_database)


def test_the_comparison_notices_a_drift_in_the_schema(host_database: str, tmp_path: Path) -> None:
    """Guards the check above: it looks at the schema, not at `public`."""
    migrated = run_cli("migrate", env=_env(host_database, DATABASE_SCHEMA=SCHEMA), cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    engine = create_engine(host_database)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"DROP INDEX {SCHEMA}.uq_crawler_jobs_analyze_page_inflight"))
        with engine.connect() as conn:
            diff = differences(conn, SCHEMA)
    finally:
        engine.dispose()
    assert [op[1].name for op in diff if op[0] == "add_index"] == [
        "uq_crawler_jobs_analyze_page_inflight"
    ]


def _listen(url: str, channel: str) -> tuple[psycopg.Connection[Any], list[str]]:
    conn = psycopg.connect(url.replace("+psycopg", ""), autocommit=True)
    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
    return conn, []


def _collect(conn: psycopg.Connection[Any], received: list[str], stop: threading.Event) -> None:
    while not stop.is_set():
        for note in conn.notifies(timeout=0.2):
            received.append(note.payload)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["direct", "pooled"])
def test_queue_worker_and_admin_in_a_schema_beside_a_host_pages_table(
    route: str,
    host_database: str,
    vision_server: ScriptedVisionServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    direct = host_database
    migrated = run_cli("migrate", env=_env(direct, DATABASE_SCHEMA=SCHEMA), cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    url = direct
    if route == "pooled":
        bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
        url = bouncer.url_for(direct)
    storage = tmp_path / "storage"
    storage.mkdir()
    (storage / "a.png").write_bytes(png_bytes())

    # The host's own engine: its tables stay unqualified, ours go to the schema.
    host_engine = create_engine(
        url,
        connect_args={"prepare_threshold": None},
        execution_options=schema_options(SCHEMA),
    )
    wakeups, events = (
        _listen(direct, f"{SCHEMA}.crawler_jobs_wakeup"),
        _listen(direct, f"{SCHEMA}.analysis_events"),
    )
    stop = threading.Event()
    threads = [
        threading.Thread(target=_collect, args=(conn, received, stop), daemon=True)
        for conn, received in (wakeups, events)
    ]
    for thread in threads:
        thread.start()
    worker = None
    try:
        with host_engine.begin() as conn:
            conn.execute(text("INSERT INTO pages (slug) VALUES ('contact')"))  # the host's
            page_id = make_page(conn, storage_key="a.png")
            job_id = request_analysis(conn, page_id)
        assert job_id is not None
        wait_until(lambda: "analyze_page" in wakeups[1], timeout=10)

        vision_server.default = ok_answer(analysis_content(ocr_text="よつばと！"))
        env = _env(
            url,
            DATABASE_SCHEMA=SCHEMA,
            LISTEN_DATABASE_URL=direct,
            VISION_URL=vision_server.url,
            STORAGE_ROOT=str(storage),
            IDLE_POLL_SECONDS="0.05",
            READINESS_POLL_SECONDS="0.1",
        )
        worker = start_worker(env, tmp_path)
        completed = wait_until(
            lambda: [e for e in map(json.loads, events[1]) if e["type"] == "completed"],
            timeout=30,
        )
        assert completed[0]["page_id"] == str(page_id)

        with host_engine.connect() as conn:
            state = conn.execute(
                text(f"SELECT state FROM {SCHEMA}.crawler_jobs WHERE id = :id"), {"id": job_id}
            ).scalar_one()
            ocr = conn.execute(
                text(f"SELECT ocr_text FROM {SCHEMA}.page_analysis WHERE page_id = :id"),
                {"id": page_id},
            ).scalar_one()
        assert (state, ocr) == ("done", "よつばと！")

        app = Flask("host")
        app.register_blueprint(admin_blueprint(host_engine, token="t"), url_prefix="/admin")
        client = app.test_client()
        auth = {"Authorization": "Bearer t"}
        stats = client.get("/admin/api/stats", headers=auth)
        assert stats.status_code == 200
        assert stats.get_json()["jobs"]["analyze_page"]["done"] == 1
        analysis = client.get(f"/admin/api/pages/{page_id}/analysis", headers=auth)
        assert (analysis.status_code, analysis.get_json()["ocr_text"]) == (200, "よつばと！")

        listed = run_cli("jobs", "list", "--json", env=env, cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        assert [job["id"] for job in json.loads(listed.stdout)["jobs"]] == [str(job_id)]
    finally:
        if worker is not None:
            code, output = stop_worker(worker)
            assert code == 0, output
        stop.set()
        for thread in threads:
            thread.join(5)
        for conn, _ in (wakeups, events):
            conn.close()
        host_engine.dispose()
    with create_engine(direct).connect() as conn:
        assert conn.execute(text("SELECT slug FROM public.pages ORDER BY id")).scalars().all() == [
            "about-us",
            "contact",
        ]


def test_a_schema_name_that_is_not_plain_is_refused(tmp_path: Path) -> None:
    result = run_cli(
        "migrate",
        env=_env("postgresql://x@127.0.0.1:1/x", DATABASE_SCHEMA='a"; drop'),
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "DATABASE_SCHEMA" in result.stderr


def test_schema_options_leave_public_alone() -> None:
    assert schema_options("public") == {}
    assert schema_options(SCHEMA) == {"schema_translate_map": {"public": SCHEMA}}
