"""Shared fixtures.

Postgres is real, always: pytest-postgresql starts one server per test
session (through tests/pg_ctl_as_postgres, which drops root privileges when
the tests run as root). The template database is built by `alembic upgrade
head`; every test that asks for `database_url` gets a fresh copy of it, so
tests can commit for real (SKIP LOCKED needs several connections).

The vision model is a real HTTP server on 127.0.0.1: tests/vision_server.py.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_postgresql import factories
from pytest_postgresql.executors import PostgreSQLExecutor
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy import Engine

from app.db import make_engine
from app.migrations import upgrade_head
from tests.pg_binaries import find_bin_dir

pytest_plugins = ["tests.vision_server", "tests.worker_support", "tests.pgbouncer"]

PG_CTL_WRAPPER = Path(__file__).resolve().parent / "pg_ctl_as_postgres"


def _prepare_unprivileged_user(pg_ctl: str) -> None:
    """As root: make sure the server's user exists and can reach the binaries."""
    user = os.environ.setdefault("PG_TEST_USER", "postgres")
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", user], check=True)
    directory = Path(pg_ctl).resolve().parent.parent
    while directory != directory.parent:
        directory.chmod(directory.stat().st_mode | 0o001)
        directory = directory.parent


def pytest_configure(config: pytest.Config) -> None:
    pg_ctl = str(find_bin_dir() / "pg_ctl")
    os.environ["REAL_PG_CTL"] = pg_ctl
    if os.geteuid() == 0:
        _prepare_unprivileged_user(pg_ctl)


def _url(host: str, port: int, user: str, password: str | None, dbname: str) -> str:
    credentials = f"{user}:{password}" if password else user
    return f"postgresql+psycopg://{credentials}@{host}:{port}/{dbname}"


def _migrate_template(
    host: str, port: int, user: str, dbname: str, password: str | None = None, **_: Any
) -> None:
    upgrade_head(_url(host, port, user, password, dbname))


postgresql_proc = factories.postgresql_proc(
    executable=str(PG_CTL_WRAPPER),
    load=[_migrate_template],
    postgres_options="-c max_connections=200 -c fsync=off -c synchronous_commit=off",
)


def _fresh_database(executor: PostgreSQLExecutor, template: str | None) -> Iterator[str]:
    dbname = f"t_{uuid.uuid4().hex[:16]}"
    janitor = DatabaseJanitor(
        user=executor.user,
        host=executor.host,
        port=executor.port,
        dbname=dbname,
        template_dbname=template,
        password=executor.password,
    )
    with janitor:
        yield _url(executor.host, executor.port, executor.user, executor.password, dbname)


@pytest.fixture
def database_url(
    postgresql_proc: PostgreSQLExecutor, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh database with the migrated schema, dropped after the test.

    Through PgBouncer when parametrized `"pooled"` (tests marked `pgbouncer`)."""
    for url in _fresh_database(postgresql_proc, postgresql_proc.template_dbname):
        if getattr(request, "param", "direct") == "pooled":
            url = request.getfixturevalue("pgbouncer").url_for(url)
        yield url


@pytest.fixture
def empty_database_url(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """A fresh database with no schema at all."""
    yield from _fresh_database(postgresql_proc, None)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url, pool_size=20, max_overflow=10)
    try:
        yield engine
    finally:
        engine.dispose()
