"""Leasing due jobs: one statement, `FOR UPDATE SKIP LOCKED` feeding an `UPDATE`."""

from __future__ import annotations

import functools
import json
import operator
import uuid
from collections.abc import Sequence
from datetime import timedelta

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import PayloadError
from manga_page_analysis.queue.kinds import decode_payload, job_kind
from manga_page_analysis.queue.states import dead_letter, give_back
from manga_page_analysis.queue.table import Lease, run


def lease(
    conn: Conn,
    kind: str | None,
    limit: int,
    lease_duration: timedelta,
    *,
    holder: str | None = None,
) -> list[Lease]:
    """Lease up to `limit` due jobs of `kind` (`None`: any kind; a row of a kind
    this process has not registered is given back at once, untouched).

    `holder` names who leases (a runner's id): it is written to each leased
    row's `leased_by`, which nothing clears afterwards; `None` writes NULL."""
    if kind is None:
        return _lease(conn, None, limit, lease_duration, holder)
    return lease_kinds(conn, [kind], limit, lease_duration, holder=holder)


def lease_kinds(
    conn: Conn,
    kinds: Sequence[str],
    limit: int,
    lease_duration: timedelta,
    *,
    holder: str | None = None,
) -> list[Lease]:
    """Lease up to `limit` due jobs whose kind is one of `kinds`; kinds not
    registered in this process are left out (their rows could not be decoded).
    `holder`: as for `lease`."""
    registered = [kind for kind in kinds if job_kind(kind) is not None]
    if not registered:
        return []
    return _lease(conn, registered, limit, lease_duration, holder)


@functools.lru_cache(maxsize=512)
def _lease_statement(kinds: tuple[str, ...] | None, limit: int) -> str:
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
    generic plan guess 10 % of the table and hash-join a full scan. The holder
    is bound: one text per kinds and limit, whoever leases.
    """
    # Registered kind names are `[a-z][a-z0-9_]*`: safe inline; spelled as in the index.
    kind = ""
    if kinds is not None:
        kind = "AND (payload ->> 'kind') IN (" + ", ".join(f"'{k}'" for k in kinds) + ")"
    n = int(limit)
    return f"""
        WITH pending AS MATERIALIZED (
            SELECT id, scheduled_at, created_at FROM <<crawler_jobs>>
            WHERE state = 'pending' AND scheduled_at <= now() {kind}
            ORDER BY scheduled_at, created_at LIMIT {n}
            FOR UPDATE SKIP LOCKED
        ), expired AS MATERIALIZED (
            SELECT id, scheduled_at, created_at FROM <<crawler_jobs>>
            WHERE state = 'running' AND leased_until < now() AND scheduled_at <= now() {kind}
            ORDER BY scheduled_at, created_at LIMIT {n}
            FOR UPDATE SKIP LOCKED
        ), candidates AS MATERIALIZED (
            SELECT id FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS due
            ORDER BY scheduled_at, created_at LIMIT {n}
        )
        UPDATE <<crawler_jobs>> AS j
        SET state = 'running', attempts = j.attempts + 1,
            lease_generation = j.lease_generation + 1,
            leased_until = now() + %(lease_duration)s::interval, leased_by = %(holder)s,
            updated_at = now()
        FROM candidates WHERE j.id = candidates.id
        RETURNING j.id, CAST(j.payload AS text), j.attempts, j.max_attempts,
                  j.lease_generation, j.scheduled_at, j.created_at
        """


def _lease(
    conn: Conn,
    kinds: list[str] | None,
    limit: int,
    lease_duration: timedelta,
    holder: str | None,
) -> list[Lease]:
    """Lease, then hand out the rows in schedule order, dead-lettering any that
    cannot be worked on. No row lock outlives the caller's transaction."""
    if limit < 1:
        return []
    statement = _lease_statement(None if kinds is None else tuple(sorted(set(kinds))), limit)
    result = run(conn, statement, {"lease_duration": lease_duration, "holder": holder})
    # Rows unpacked and indexed as tuples: per row, attribute access by name costs
    # more than the rest of the bookkeeping.
    rows = sorted(result.all(), key=operator.itemgetter(5, 6))

    leases: list[Lease] = []
    unusable: list[tuple[uuid.UUID, int, str]] = []
    foreign: list[tuple[uuid.UUID, int]] = []
    for job_id, data, attempts, max_attempts, generation, _, _ in rows:
        try:
            payload = decode_payload(data)
        except PayloadError as exc:
            if not _registered(data):
                foreign.append((job_id, generation))  # another process's kind
                continue
            # A poison row (its kind is registered, its payload is not one)
            # must not jam the queue: dead-letter it and hand out the rest.
            unusable.append((job_id, generation, str(exc)))
            continue
        if attempts <= max_attempts:
            leases.append(Lease(job_id, payload, attempts, max_attempts, generation, len(data)))
            continue
        # Only an expired lease gets here: the worker holding the final
        # attempt stopped without finishing (crash, OOM kill).
        error = f"lease expired on the final attempt ({max_attempts}); the worker running it"
        unusable.append((job_id, generation, error + " stopped without finishing"))
    if unusable:
        dead_letter(conn, unusable)
    if foreign:
        give_back(conn, foreign)
    return leases


def _registered(data: str) -> bool:
    """Whether the kind of stored payload text is registered here."""
    try:
        kind = json.loads(data).get("kind")
    except (ValueError, AttributeError):
        return True  # not even a JSON object: poison, whatever its kind
    return isinstance(kind, str) and job_kind(kind) is not None
