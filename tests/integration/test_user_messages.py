"""What a user reads when the schema is not where they think: each mistake is one
line that says what to set. A host whose engine lacks `schema_options`; a `public`
holding a host's own alembic revision (Flask-Migrate's) seen by `run-worker`,
`jobs` and the admin API; a page id that is no UUID. (The same, from the
installed wheel inside a Flask host: tests/wheel/test_hosts.py.)"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from manga_page_analysis.db import make_engine
from manga_page_analysis.errors import NotAPageId, TablesNotFound
from manga_page_analysis.migrations import upgrade_head
from manga_page_analysis.pages import ensure_chapter, ensure_manga
from manga_page_analysis.queue import request_analysis
from manga_page_analysis.web.flask import admin_blueprint
from tests.helpers import make_page
from tests.integration.test_cli import run_cli, start_worker, stop_worker

HOST_REVISION = "ca8a52db738a"
"""A revision id as Flask-Migrate writes them: not one of ours."""


def _env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_SCHEMA")}
    return {**env, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", **extra}


@pytest.fixture
def flask_migrate_database(empty_database_url: str) -> Iterator[str]:
    """A host's database: its own `pages` table and Flask-Migrate's revision in `public`."""
    engine = create_engine(empty_database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE pages (id serial PRIMARY KEY, slug text)"))
            conn.execute(text("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)"))
            conn.execute(text(f"INSERT INTO alembic_version VALUES ('{HOST_REVISION}')"))
    finally:
        engine.dispose()
    yield empty_database_url


def _names_database_schema(line: str) -> None:
    assert HOST_REVISION in line and "DATABASE_SCHEMA" in line, line
    assert "--migrate" not in line and "Traceback" not in line, line


def test_run_worker_on_a_host_revision_names_database_schema(
    flask_migrate_database: str, tmp_path: Path
) -> None:
    result = run_cli(
        "run-worker",
        env=_env(flask_migrate_database, VISION_URL="http://127.0.0.1:9"),
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "ERROR" in line]
    _names_database_schema(line)
    assert "schema public" in line and "creates it" in line


@pytest.mark.parametrize("args", [("jobs", "stats"), ("jobs", "list"), ("analyze", "--missing")])
def test_operator_commands_on_a_host_revision_name_database_schema(
    flask_migrate_database: str, tmp_path: Path, args: tuple[str, ...]
) -> None:
    result = run_cli(*args, env=_env(flask_migrate_database), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    _names_database_schema(line)


def test_the_admin_api_on_a_host_revision_names_database_schema(
    flask_migrate_database: str,
) -> None:
    engine = make_engine(flask_migrate_database)
    app = Flask("host")
    app.register_blueprint(admin_blueprint(engine, token="t"), url_prefix="/admin")
    try:
        answer = app.test_client().get("/admin/api/stats", headers={"Authorization": "Bearer t"})
    finally:
        engine.dispose()
    assert answer.status_code == 503
    error = answer.get_json()["error"]
    assert error["code"] == "schema_missing"
    _names_database_schema(error["message"])
    assert 'schema_options("page_analysis")' in error["message"]


def test_a_host_engine_without_schema_options_is_told_to_add_them(
    empty_database_url: str,
) -> None:
    upgrade_head(empty_database_url, "page_analysis")
    host_engine = create_engine(empty_database_url)  # no schema_options: looks in public
    try:
        with Session(host_engine) as session, pytest.raises(TablesNotFound) as raised:
            ensure_manga(session, source_id="site", source_key="k", title="T")
    finally:
        host_engine.dispose()
    message = str(raised.value)
    assert "public.mangas" in message and "schema_options(DATABASE_SCHEMA)" in message
    assert "\n" not in message
    assert raised.value.__cause__ is not None  # the driver's error, kept


def test_a_page_id_that_is_no_uuid_is_the_packages_own_error(engine) -> None:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        manga_id = ensure_manga(conn, source_id="s", source_key="k", title="T")
        ensure_chapter(conn, manga_id, number=Decimal(1))
        page_id = make_page(conn)
        with pytest.raises(NotAPageId) as raised:
            request_analysis(conn, "page-1")  # type: ignore[arg-type]
        assert isinstance(raised.value, ValueError)
        assert str(raised.value).startswith("'page-1' is not a page id: give the page's UUID")
        assert "pydantic" not in str(raised.value)
        # Its text works as the UUID itself does, and the transaction is still usable.
        assert request_analysis(conn, str(page_id)) == request_analysis(conn, page_id)
        assert request_analysis(conn, uuid.UUID(str(page_id))) is not None


def test_run_worker_starts_quietly_and_names_its_schema(database_url: str, tmp_path: Path) -> None:
    process = start_worker(_env(database_url, VISION_URL="http://127.0.0.1:9"), tmp_path)
    assert process.stdout is not None
    start = []
    for line in process.stdout:  # until the start line, or the exit
        start.append(line)
        if "run-worker: database" in line:
            break
    code, rest = stop_worker(process, timeout=30)
    output = "".join(start) + rest
    assert code == 0, output
    assert "(schema public)" in start[-1], output
    assert "alembic" not in output.lower(), output
