"""The `crawler_jobs` table as the queue sees it: the lease a worker holds, the
limits, the column expressions readers (admin, stats) use, and `run`, which
executes the queue's own SQL texts."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

from sqlalchemy import ColumnElement, Connection, CursorResult, Table, literal_column
from sqlalchemy.util.typing import TupleAny

from manga_page_analysis.db import DEFAULT_SCHEMA, Conn, quote_identifier, schema_of
from manga_page_analysis.models import Base, Job
from manga_page_analysis.queue.kinds import Payload

LAST_ERROR_MAX_CHARS: Final = 4000
"""`last_error` keeps the start of long messages (tracebacks, HTML error pages)."""

WAKEUP_CHANNEL: Final = "crawler_jobs_wakeup"
"""The `NOTIFY` channel on which due jobs announce themselves (payload: their
kinds, each cut to `WAKEUP_KIND_CHARS`, comma-separated; empty: any kind); sent
by triggers (migrations 0003 and 0007), at commit."""
WAKEUP_KIND_CHARS: Final = 63
"""A kind in a wake-up payload is cut to this many characters: `pg_notify`
refuses 8000 bytes, and hosts define kinds of any length."""

RECLAIM_LIMIT: Final = 3
"""Reclaims in a row after which `reclaim_expired` dead-letters a job (a crash loop)."""

CRASH_LOOP_ERROR: Final = (
    f"reclaimed from a dead worker {RECLAIM_LIMIT} times; it seems to crash its worker "
    "(segfault, OOM kill): dead-lettered"
)

jobs = cast(Table, Job.__table__)


@dataclass(frozen=True, slots=True)
class Lease:
    """A job held by a worker, valid while `(id, lease_generation)` is current."""

    id: uuid.UUID
    payload: Payload
    attempts: int
    max_attempts: int
    lease_generation: int
    payload_bytes: int = field(default=0, compare=False)
    """Size of the stored payload's JSON text (the runner bounds its prefetch by it)."""


def text_literal(value: str) -> ColumnElement[Any]:
    """A string constant rendered inline, not bound: the planner can then match
    the partial indexes' predicates even for a cached generic plan."""
    return literal_column("'" + value.replace("'", "''") + "'")


PENDING = text_literal("pending")
DEAD = text_literal("dead")


def payload_field(name: str) -> ColumnElement[Any]:
    """`payload ->> 'name'`, spelled exactly as in the indexes."""
    return jobs.c.payload.op("->>")(text_literal(name))


KIND = payload_field("kind")


def run(conn: Conn, statement: str, params: Mapping[str, Any]) -> CursorResult[*TupleAny]:
    """Execute one of the queue's SQL texts (psycopg's `%(name)s` parameters) on
    `conn`, in the caller's transaction; a session is flushed first when it
    autoflushes, as `Session.execute` would.

    Nothing is built or compiled per call, which costs more client time than
    Postgres spends on a small statement; `exec_driver_sql` still translates
    driver errors and notices lost connections. The texts name this package's
    tables as placeholders, `<<crawler_jobs>>`, which `in_schema` renders for the
    connection's schema (`manga_page_analysis.db.schema_options`).
    """
    if not isinstance(conn, Connection):
        # A Session, or a scoped_session standing in for one (Flask-SQLAlchemy's
        # `db.session`).
        if conn.autoflush:
            conn.flush()
        conn = conn.connection()
    return conn.exec_driver_sql(in_schema(statement, schema_of(conn)), params)


def fetch_rows(conn: Conn, statement: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """`run`, and its rows as the driver's plain tuples: for the hot statements
    (lease, the ends of a batch), where a SQLAlchemy `Row` per row costs more
    than the rest of the client's work on it."""
    result = run(conn, statement, params)
    try:
        cursor = result.cursor
        return [] if cursor is None else list(cursor.fetchall())
    finally:
        result.close()


@functools.cache
def in_schema(statement: str, schema: str) -> str:
    """`statement` with each `<<table>>` placeholder replaced by that table of this
    package in `schema`: the plain name in `public`, else `"schema".table`. Cached:
    the queue's texts are a few constants. A placeholder naming no table of ours
    is a programming error (`ValueError`), never sent to the server."""
    rendered = statement
    for name in Base.metadata.tables:
        table = name.rpartition(".")[2]
        qualified = table if schema == DEFAULT_SCHEMA else f"{quote_identifier(schema)}.{table}"
        rendered = rendered.replace(f"<<{table}>>", qualified)
    leftover = rendered.partition("<<")[2].partition(">>")[0]
    if leftover.isidentifier():
        raise ValueError(f"<<{leftover}>> names no table of this package")
    return rendered
