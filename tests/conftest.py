"""Shared fixtures.

Postgres is real, always: each test process (each pytest-xdist worker, or the
one process of a plain run) starts one server of its own on first use, in a
folder of its own (tests/postgres_server.py; as root the server runs as the
unprivileged `postgres` user through tests/pg_ctl_as_postgres). Its template
database is built once, by `alembic upgrade head`; every test that asks for
`database_url` gets a fresh copy of it, so tests can commit for real (SKIP
LOCKED needs several connections). Tests under tests/unit/ may not ask for a
database: collection fails if one does.

The vision model is a real HTTP server on 127.0.0.1: testbed/vision_server.py.
The in-process OCR engine is loaded once per process: the `ocr` fixture
(tests/ocr_support.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_postgresql.executors import PostgreSQLExecutor
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy import Engine

from manga_page_analysis.db import make_engine
from manga_page_analysis.migrations import upgrade_head
from tests.postgres_server import PG_CTL_WRAPPER, private_postgres

__all__ = ["PG_CTL_WRAPPER"]

pytest_plugins = [
    "testbed.vision_server",
    "tests.worker_support",
    "tests.ocr_support",
    "testbed.pgbouncer",
    "tests.seaweedfs",
]

UNIT_TESTS = Path(__file__).resolve().parent / "unit"
DATABASE_FIXTURES = frozenset({"postgresql_proc", "database_url", "empty_database_url", "engine"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Unit tests stay database-free; tests sharing an expensive per-process
    resource are kept on one xdist worker (`--dist loadgroup`); xdist workers
    hand out the slow tests first."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if Path(str(item.path)).is_relative_to(UNIT_TESTS) and fixtures & DATABASE_FIXTURES:
            raise pytest.UsageError(
                f"{item.nodeid} asks for {sorted(fixtures & DATABASE_FIXTURES)}: "
                "a test that needs Postgres belongs in tests/integration/"
            )
        if "ocr" in fixtures:
            item.add_marker(pytest.mark.xdist_group("ocr"))
    if hasattr(config, "workerinput"):
        # Longest first: the `slow` tests (model loads, subprocesses) start at once
        # instead of becoming the tail that one worker runs while the others idle.
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_xdist_group_suffix(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """On an xdist worker under `--dist loadgroup`, xdist tells the controller an
    item's group as a `@group` suffix of its node id, written to a field pytest
    9.2 no longer reads (pytest-xdist#1386): the groups are then silently
    ignored. Until xdist's fix, the suffix is written where pytest 9.2 keeps it."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        groups = sorted(
            {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
        )
        suffix = "@" + "_".join(groups)
        if groups and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            from _pytest.nodeid import coerce_node_id  # only where `_id` exists

            item._id = coerce_node_id(item.nodeid + suffix)


def _url(host: str, port: int, user: str, password: str | None, dbname: str) -> str:
    credentials = f"{user}:{password}" if password else user
    return f"postgresql+psycopg://{credentials}@{host}:{port}/{dbname}"


@pytest.fixture(scope="session")
def postgresql_proc() -> Iterator[PostgreSQLExecutor]:
    """This process's server; its template database `template_dbname` holds the
    migrated schema. Tests must not stop it (start a `private_postgres` of their own)."""
    with private_postgres(
        postgres_options="-c max_connections=200 -c fsync=off -c synchronous_commit=off"
    ) as server:
        template = DatabaseJanitor(
            user=server.user,
            host=server.host,
            port=server.port,
            dbname=server.template_dbname,
            as_template=True,
            password=server.password,
        )
        template.init()
        upgrade_head(
            _url(server.host, server.port, server.user, server.password, server.template_dbname)
        )
        yield server


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
