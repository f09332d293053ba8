"""Inserting pending jobs, one or many per statement. A dedup index (one job in
flight per page, or per chapter) may skip an insert: `ON CONFLICT DO NOTHING`
keeps the caller's transaction usable, and the answer says which were skipped."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from manga_page_analysis.db import Conn
from manga_page_analysis.dberrors import outage_raises_unavailable
from manga_page_analysis.queue.kinds import Payload, check_kind_name, payload_json
from manga_page_analysis.queue.table import run
from manga_page_analysis.storable import INT4_MAX

# Columns left out take their server defaults, so the defaults live in one
# place (the schema): each statement comes in up to four forms, one per set
# of optional columns given, each built once.
_OPTIONAL_TYPES: Final = {"scheduled_at": "timestamptz", "max_attempts": "integer"}


@functools.cache
def _insert(many: bool, options: tuple[str, ...]) -> str:
    names = "".join(f", {name}" for name in options)
    values = "".join(f", %({name})s::{_OPTIONAL_TYPES[name]}" for name in options)
    if not many:
        # The id is made by the caller and nothing is returned: the row count
        # says whether the dedup index skipped the row, and a statement that
        # returns no rows costs the client less.
        return (
            f"INSERT INTO <<crawler_jobs>> (id, payload{names}) "
            f"VALUES (%(id)s::uuid, %(payload)s::jsonb{values}) ON CONFLICT DO NOTHING"
        )
    # The payloads travel as ONE JSON array (one parameter, parsed once by the
    # server). `ORDER BY n` inserts in the caller's order: within one call, the
    # first of two payloads for the same page wins the slot.
    return f"""
        WITH v AS MATERIALIZED (
            SELECT gen_random_uuid() AS id, payload, n
            FROM jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS v(payload, n)
        ), inserted AS (
            INSERT INTO <<crawler_jobs>> (id, payload{names})
            SELECT id, payload{values} FROM v ORDER BY n
            ON CONFLICT DO NOTHING RETURNING id
        )
        SELECT v.n, v.id FROM inserted JOIN v USING (id)
    """


_checked_kinds: set[str] = set()
"""Kind names already found valid (a set lookup per payload on the hot path)."""


def _check_kinds(payloads: Sequence[Payload]) -> None:
    for payload in payloads:
        kind = payload.kind
        if kind not in _checked_kinds:
            _checked_kinds.add(check_kind_name(kind))


def _options(scheduled_at: datetime | None, max_attempts: int | None) -> dict[str, Any]:
    if max_attempts is not None and not 1 <= max_attempts <= INT4_MAX:
        raise ValueError(f"max_attempts must be from 1 to {INT4_MAX}, not {max_attempts}")
    options = {"scheduled_at": scheduled_at, "max_attempts": max_attempts}
    return {name: value for name, value in options.items() if value is not None}


@outage_raises_unavailable
def enqueue(
    conn: Conn,
    payload: Payload,
    *,
    scheduled_at: datetime | None = None,
    max_attempts: int | None = None,
) -> uuid.UUID | None:
    """Insert a pending job and return its id; `None` when a dedup index skipped it.
    `ValueError` for a kind name outside the rule of `check_kind_name` or a
    `max_attempts` outside 1..2**31-1; `PayloadError` for a payload Postgres cannot
    store (a NUL character, a lone surrogate). Both before any SQL: the caller's
    transaction stays usable."""
    _check_kinds([payload])
    params = _options(scheduled_at, max_attempts)
    statement = _insert(False, tuple(params))
    job_id = params["id"] = uuid.uuid4()
    params["payload"] = payload_json(payload)
    return job_id if run(conn, statement, params).rowcount else None


@outage_raises_unavailable
def enqueue_many(
    conn: Conn,
    payloads: Sequence[Payload],
    *,
    scheduled_at: datetime | None = None,
    max_attempts: int | None = None,
) -> list[uuid.UUID | None]:
    """Insert pending jobs in ONE statement; one entry per payload, in order:
    the job's id, or `None` where a dedup index skipped it (also when an
    earlier payload of the same call took the slot)."""
    params = _options(scheduled_at, max_attempts)
    if not payloads:
        return []
    _check_kinds(payloads)
    statement = _insert(True, tuple(params))
    # Every payload checked before the statement: one bad payload fails the call
    # with a PayloadError naming it, and the transaction stays usable.
    params["payloads"] = "[" + ",".join(map(payload_json, payloads)) + "]"
    job_ids: list[uuid.UUID | None] = [None] * len(payloads)
    for ordinal, job_id in run(conn, statement, params).all():
        job_ids[ordinal - 1] = job_id
    return job_ids
