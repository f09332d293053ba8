"""The benchmark database: where it comes from, how it is reset and seeded.

`BENCH_DATABASE_URL` points the benchmark at an existing database instead of a
throwaway server. Since every section truncates the app's tables, such a
database must hold no rows in them: the benchmark refuses to start otherwise,
and leaves the tables empty again at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection, Engine, text

from bench.pg import throwaway_server
from manga_page_analysis.db import make_engine, normalise_url
from manga_page_analysis.migrations import upgrade_head

APP_TABLES: Final = ("page_analysis", "pages", "chapters", "mangas", "crawler_jobs")
"""Every table a section writes; truncated between sections."""

SERVER_SETTINGS: Final = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "shared_buffers",
    "max_connections",
)
"""Settings echoed in the report's header, so numbers can be read in context."""


@dataclass(frozen=True)
class BenchDatabase:
    """A migrated database; `origin` says where it came from, for the report."""

    url: str
    origin: str


@contextmanager
def bench_database() -> Iterator[BenchDatabase]:
    """A migrated, empty database: `BENCH_DATABASE_URL`, else a throwaway server."""
    existing = os.environ.get("BENCH_DATABASE_URL")
    if existing:
        url = normalise_url(existing)
        upgrade_head(url)
        _refuse_if_not_empty(url)
        try:
            yield BenchDatabase(url, "BENCH_DATABASE_URL (existing database)")
        finally:
            engine = make_engine(url, pool_size=1)
            try:
                reset(engine)
            finally:
                engine.dispose()
        return
    with throwaway_server() as url:
        upgrade_head(url)
        yield BenchDatabase(url, "throwaway server (initdb in a temp dir, deleted at exit)")


def engine_for(url: str, connections: int = 12) -> Engine:
    """An engine with room for `connections` concurrent connections."""
    return make_engine(url, pool_size=connections, max_overflow=2)


def _refuse_if_not_empty(url: str) -> None:
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            busy = [
                table
                for table in APP_TABLES
                if conn.execute(text(f"SELECT EXISTS (SELECT 1 FROM {table})")).scalar_one()
            ]
    finally:
        engine.dispose()
    if busy:
        raise SystemExit(
            f"BENCH_DATABASE_URL has rows in {', '.join(busy)}; the benchmark truncates "
            "these tables, so point it at an empty scratch database"
        )


def reset(engine: Engine) -> None:
    """Empty every app table."""
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(APP_TABLES)}"))


def vacuum_analyze(engine: Engine, table: str = "crawler_jobs") -> None:
    """`VACUUM ANALYZE` needs autocommit: it cannot run inside a transaction."""
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text(f"VACUUM ANALYZE {table}"))


def server_settings(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {
            name: str(conn.execute(text(f"SHOW {name}")).scalar_one()) for name in SERVER_SETTINGS
        }


def seed_jobs(
    conn: Connection,
    count: int,
    *,
    kind: str,
    start: str = "now() - interval '1 hour'",
    step_ms: int = 1,
    phase_ms: int = 0,
    state: str = "pending",
    leased_until: str = "NULL",
) -> int:
    """Insert `count` jobs of `kind` in one statement; returns how many.

    Row `i` is scheduled (and created) at `start + i * step_ms + phase_ms`
    milliseconds, so the queue has a strict order like one filled over time;
    two kinds seeded with the same `step_ms` and different `phase_ms` interleave.
    `analyze_page` rows get distinct random page ids (the dedup index wants them).
    `start` and `leased_until` are SQL expressions.
    """
    payload = {
        "bench_noop": "jsonb_build_object('kind', 'bench_noop', 'marker', 'm' || i)",
        "sync_manga": (
            "jsonb_build_object('kind', 'sync_manga', 'source_id', 'bench', "
            "'source_manga_key', 'm' || i, 'url', '', 'title', '')"
        ),
        "analyze_page": (
            "jsonb_build_object('kind', 'analyze_page', "
            "'page_id', gen_random_uuid()::text, 'force', false)"
        ),
    }[kind]
    at = f"({start}) + (i * :step + :phase) * interval '1 millisecond'"
    statement = text(
        f"""
        INSERT INTO crawler_jobs (payload, state, leased_until, scheduled_at, created_at)
        SELECT {payload}, :state, {leased_until}, {at}, {at}
        FROM generate_series(0, :count - 1) AS i
        """
    )
    result = conn.execute(
        statement, {"state": state, "count": count, "step": step_ms, "phase": phase_ms}
    )
    return int(result.rowcount or 0)
