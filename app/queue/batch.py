"""Batched writes on `crawler_jobs`: many jobs, one statement.

Like the rest of the repository, every function takes `conn` first and never
commits or rolls back. Each statement is built once (the job ids and
generations travel as two arrays through `unnest`), so a batch costs one
round trip and no client-side statement building, whatever its size.

Writes made on behalf of leases are fenced per row: a row changes only while
its `(id, lease_generation)` matches and it is `running`, so one stale lease
in a batch changes nothing but its own row (which is left alone).
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    DateTime,
    Integer,
    Interval,
    Text,
    TextClause,
    bindparam,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, UUID

from app.queue.jobs import Conn, Lease
from app.queue.payloads import JobPayload

logger = logging.getLogger(__name__)

_IDS = bindparam("ids", type_=ARRAY(UUID(as_uuid=True)))
_GENERATIONS = bindparam("generations", type_=ARRAY(BigInteger()))

# Rows are matched through the primary key; ids are sorted before binding so
# that two batched statements touching the same rows lock them in the same
# order (no deadlock between the acker and the heartbeat).
_FENCED_FROM = (
    "FROM unnest(:ids, :generations) AS v(id, generation) "
    "WHERE j.id = v.id AND j.lease_generation = v.generation AND j.state = 'running' "
    "RETURNING j.id"
)


def _fenced_update(set_clause: str, *extra: Any) -> TextClause:
    return text(f"UPDATE crawler_jobs AS j SET {set_clause} {_FENCED_FROM}").bindparams(
        _IDS, _GENERATIONS, *extra
    )


@functools.cache
def _ack_done_statement() -> TextClause:
    # reclaim_count: the attempt ended normally, its worker survived it.
    return _fenced_update(
        "state = 'done', leased_until = NULL, reclaim_count = 0, updated_at = now()"
    )


@functools.cache
def _renew_statement() -> TextClause:
    return _fenced_update(
        "leased_until = now() + :lease_duration, updated_at = now()",
        bindparam("lease_duration", type_=Interval()),
    )


@functools.cache
def _release_statement() -> TextClause:
    # As `release`: pending at once, attempt refunded, generation bumped so
    # the previous holder's late writes are fenced off.
    return _fenced_update(
        "state = 'pending', attempts = greatest(j.attempts - 1, 0), "
        "lease_generation = j.lease_generation + 1, leased_until = NULL, updated_at = now()"
    )


def _fenced_params(leases: Iterable[Lease]) -> dict[str, Any]:
    ordered = sorted(leases, key=lambda held: held.id)
    return {
        "ids": [held.id for held in ordered],
        "generations": [held.lease_generation for held in ordered],
    }


def _run_fenced(
    conn: Conn, statement: TextClause, leases: Sequence[Lease], **params: Any
) -> set[uuid.UUID]:
    if not leases:
        return set()
    result = conn.execute(statement, {**_fenced_params(leases), **params})
    return {row[0] for row in result}


def ack_done_many(conn: Conn, leases: Sequence[Lease]) -> set[uuid.UUID]:
    """`ack_done` for a batch in one statement; returns the ids that were acked.

    A lease missing from the answer was no longer current: its row is untouched.
    """
    return _run_fenced(conn, _ack_done_statement(), leases)


def renew_many(conn: Conn, leases: Sequence[Lease], lease_duration: timedelta) -> set[uuid.UUID]:
    """`renew` for a batch in one statement; returns the ids whose lease is still current."""
    return _run_fenced(conn, _renew_statement(), leases, lease_duration=lease_duration)


def release_many(conn: Conn, leases: Sequence[Lease]) -> set[uuid.UUID]:
    """`release` for a batch in one statement; returns the ids that were given back."""
    return _run_fenced(conn, _release_statement(), leases)


# --- enqueue_many ------------------------------------------------------------


@functools.cache
def _enqueue_statement(with_scheduled_at: bool, with_max_attempts: bool) -> TextClause:
    # Columns left out take their server defaults, so the defaults live in
    # one place (the schema). `WITH ORDINALITY` + `ORDER BY` inserts in the
    # caller's order: within one call, the first of two payloads for the same
    # page wins the dedup slot.
    columns, values = ["id", "payload"], ["v.id", "CAST(v.payload AS jsonb)"]
    extra: list[BindParameter[Any]] = []
    if with_scheduled_at:
        columns.append("scheduled_at")
        values.append(":scheduled_at")
        extra.append(bindparam("scheduled_at", type_=DateTime(timezone=True)))
    if with_max_attempts:
        columns.append("max_attempts")
        values.append(":max_attempts")
        extra.append(bindparam("max_attempts", type_=Integer()))
    return text(
        f"INSERT INTO crawler_jobs ({', '.join(columns)}) "
        f"SELECT {', '.join(values)} "
        "FROM unnest(:ids, :payloads) WITH ORDINALITY AS v(id, payload, n) "
        "ORDER BY v.n "
        "ON CONFLICT DO NOTHING RETURNING id"
    ).bindparams(_IDS, bindparam("payloads", type_=ARRAY(Text())), *extra)


def enqueue_many(
    conn: Conn,
    payloads: Sequence[JobPayload],
    *,
    scheduled_at: datetime | None = None,
    max_attempts: int | None = None,
) -> list[uuid.UUID | None]:
    """Insert pending jobs in ONE statement; one entry per payload, in order:
    the job's id, or `None` where a dedup index skipped it (also when an
    earlier payload of the same call took the slot).

    Like `enqueue`, a skipped insert raises nothing.
    """
    if max_attempts is not None and max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if not payloads:
        return []
    # Ids are made here so the answer can be mapped back to the payloads.
    ids = [uuid.uuid4() for _ in payloads]
    params: dict[str, Any] = {
        "ids": ids,
        "payloads": [json.dumps(payload.to_json()) for payload in payloads],
    }
    if scheduled_at is not None:
        params["scheduled_at"] = scheduled_at
    if max_attempts is not None:
        params["max_attempts"] = max_attempts
    statement = _enqueue_statement(scheduled_at is not None, max_attempts is not None)
    inserted = {row[0] for row in conn.execute(statement, params)}
    return [job_id if job_id in inserted else None for job_id in ids]


__all__ = ["ack_done_many", "enqueue_many", "release_many", "renew_many"]
