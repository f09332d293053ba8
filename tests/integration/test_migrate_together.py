"""Replicas deployed together: several `migrate` processes started at once on an
empty database each exit 0, and the schema ends at head (migrate's advisory lock;
without it, two `CREATE TABLE`s or `CREATE SCHEMA`s race on the catalog's unique
indexes). Through PgBouncer in transaction mode too: the lock is transaction-level."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from manga_page_analysis.db import schema_options
from manga_page_analysis.migrations import current_revision, differences, head_revision
from testbed.pgbouncer import PgBouncer

PROCESSES = 4


def _migrate_all_at_once(url: str, schema: str, cwd: Path) -> list[tuple[int, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_SCHEMA")}
    env.update(DATABASE_URL=url, DATABASE_SCHEMA=schema, PYTHONUNBUFFERED="1")
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "manga_page_analysis", "migrate"],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    results = []
    for process in processes:
        output, _ = process.communicate(timeout=120)
        results.append((process.returncode, output))
    return results


def _assert_at_head(url: str, schema: str) -> None:
    engine = create_engine(url, execution_options=schema_options(schema))
    try:
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert differences(conn, schema) == []
    finally:
        engine.dispose()


@pytest.mark.parametrize("schema", ["public", "page_analysis"])
def test_migrate_run_by_several_processes_at_once_all_succeed(
    empty_database_url: str, schema: str, tmp_path: Path
) -> None:
    results = _migrate_all_at_once(empty_database_url, schema, tmp_path)
    for returncode, output in results:
        assert returncode == 0, output
    _assert_at_head(empty_database_url, schema)


def test_migrate_together_through_pgbouncer_in_transaction_mode(
    empty_database_url: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
    pooled = bouncer.url_for(empty_database_url)
    results = _migrate_all_at_once(pooled, "page_analysis", tmp_path)
    for returncode, output in results:
        assert returncode == 0, output
    _assert_at_head(empty_database_url, "page_analysis")
