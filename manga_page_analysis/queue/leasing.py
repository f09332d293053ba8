"""Leasing due jobs: one statement, `FOR UPDATE SKIP LOCKED` feeding an `UPDATE`."""

from __future__ import annotations

import functools
import operator
import uuid
from collections.abc import Sequence
from datetime import timedelta

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import PayloadError
from manga_page_analysis.queue.kinds import decode_payload, registered_kinds, require_kinds
from manga_page_analysis.queue.states import dead_letter
from manga_page_analysis.queue.table import Lease, run


def lease(conn: Conn, kind: str | None, limit: int, lease_duration: timedelta) -> list[Lease]:
    """Lease up to `limit` due jobs of `kind` (`None`: any registered kind; rows
    of kinds this process has not registered stay where they are)."""
    if kind is None:
        return _lease(conn, [known.name for known in registered_kinds()], limit, lease_duration)
    return _lease(conn, require_kinds([kind]), limit, lease_duration)


def lease_kinds(
    conn: Conn, kinds: Sequence[str], limit: int, lease_duration: timedelta
) -> list[Lease]:
    """Lease up to `limit` due jobs whose kind is one of `kinds` (each registered:
    `ValueError` otherwise, since its rows could not be decoded)."""
    if not kinds:
        return []
    return _lease(conn, require_kinds(kinds), limit, lease_duration)


@functools.lru_cache(maxsize=512)
def _lease_statement(kinds: tuple[str, ...], limit: int) -> str:
    """The lease statement for `kinds` and `limit`, built once.

    Two arms lock their first due rows (`FOR UPDATE SKIP LOCKED`, `LIMIT`), each
    through its own index so that neither steps over rows it cannot take:
    pending rows due now, and running rows whose lease expired. The first
    `limit` of both, in schedule order, are updated; the surplus of an arm
    stays locked until the caller commits.

    The payload comes back as text: pydantic parses and validates JSON text
    in one step, several times faster than decoding then validating a dict.
    Constants (the kinds, the limit) are rendered inline: the planner can then
    match the partial indexes' predicates, and a bound `LIMIT` would make a
    generic plan guess 10 % of the table and hash-join a full scan.
    """
    # Registered kind names are `[a-z][a-z0-9_]*`: safe inline; spelled as in the index.
    kind = "AND (payload ->> 'kind') IN (" + ", ".join(f"'{k}'" for k in kinds) + ")"
    n = int(limit)
    return f"""
        WITH pending AS MATERIALIZED (
            SELECT id, scheduled_at, created_at FROM crawler_jobs
            WHERE state = 'pending' AND scheduled_at <= now() {kind}
            ORDER BY scheduled_at, created_at LIMIT {n}
            FOR UPDATE SKIP LOCKED
        ), expired AS MATERIALIZED (
            SELECT id, scheduled_at, created_at FROM crawler_jobs
            WHERE state = 'running' AND leased_until < now() AND scheduled_at <= now() {kind}
            ORDER BY scheduled_at, created_at LIMIT {n}
            FOR UPDATE SKIP LOCKED
        ), candidates AS MATERIALIZED (
            SELECT id FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS due
            ORDER BY scheduled_at, created_at LIMIT {n}
        )
        UPDATE crawler_jobs AS j
        SET state = 'running', attempts = j.attempts + 1,
            lease_generation = j.lease_generation + 1,
            leased_until = now() + %(lease_duration)s::interval, updated_at = now()
        FROM candidates WHERE j.id = candidates.id
        RETURNING j.id, CAST(j.payload AS text), j.attempts, j.max_attempts,
                  j.lease_generation, j.scheduled_at, j.created_at
        """


def _lease(conn: Conn, kinds: list[str], limit: int, lease_duration: timedelta) -> list[Lease]:
    """Lease, then hand out the rows in schedule order, dead-lettering any that
    cannot be worked on. No row lock outlives the caller's transaction."""
    if limit < 1:
        return []
    statement = _lease_statement(tuple(sorted(set(kinds))), limit)
    result = run(conn, statement, {"lease_duration": lease_duration})
    # Rows unpacked and indexed as tuples: per row, attribute access by name costs
    # more than the rest of the bookkeeping.
    rows = sorted(result.all(), key=operator.itemgetter(5, 6))

    leases: list[Lease] = []
    unusable: list[tuple[uuid.UUID, int, str]] = []
    for job_id, data, attempts, max_attempts, generation, _, _ in rows:
        try:
            payload = decode_payload(data)
        except PayloadError as exc:
            # A poison row (its kind is registered, its payload is not one)
            # must not jam the queue: dead-letter it and hand out the rest.
            unusable.append((job_id, generation, str(exc)))
            continue
        if attempts <= max_attempts:
            leases.append(Lease(job_id, payload, attempts, max_attempts, generation))
            continue
        # Only an expired lease gets here: the worker holding the final
        # attempt stopped without finishing (crash, OOM kill).
        error = f"lease expired on the final attempt ({max_attempts}); the worker running it"
        unusable.append((job_id, generation, error + " stopped without finishing"))
    if unusable:
        dead_letter(conn, unusable)
    return leases
