"""Leasing due jobs: one statement, `FOR UPDATE SKIP LOCKED` feeding an `UPDATE`.

A row taken through its expired lease follows `ends.after_expiry`: the expiry
is counted (`reclaim_count`, the crash-loop rule) and the attempt counts, as
in the seed's `lease`; a job at the crash-loop limit, one whose expired
attempt was its last, and a poison row (a payload of a registered kind that
does not decode) are not handed out but come back with their end
(`lease_with_ends`), for the caller to write and record.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import PayloadError
from manga_page_analysis.queue.ends import End, Outcome, after_expiry, dead, released, write_ends
from manga_page_analysis.queue.kinds import decode_payload, job_kind, salvage_payload
from manga_page_analysis.queue.table import Lease, fetch_rows

logger = logging.getLogger(__name__)


def lease(
    conn: Conn,
    kind: str | None,
    limit: int,
    lease_duration: timedelta,
    *,
    holder: str | None = None,
) -> list[Lease]:
    """Lease up to `limit` due jobs of `kind` (`None`: any kind; a row of a kind
    this process has not registered is released at once).

    `holder` names who leases (a runner's id): it is written to each leased
    row's `leased_by`, which nothing clears afterwards; `None` writes NULL.
    Rows that end at lease (see the module) are written here, each logged."""
    if kind is None:
        return _written(conn, _lease(conn, None, limit, lease_duration, holder))
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
    return _written(conn, lease_with_ends(conn, kinds, limit, lease_duration, holder=holder))


@dataclass(slots=True)
class Leased:
    """What one lease took: the jobs to run, and those that ended at lease with
    their ends, still `running` under this lease until the ends are written."""

    leases: list[Lease] = field(default_factory=list)
    ended: list[tuple[Lease, End]] = field(default_factory=list)


def lease_with_ends(
    conn: Conn,
    kinds: Sequence[str],
    limit: int,
    lease_duration: timedelta,
    *,
    holder: str | None = None,
) -> Leased:
    """`lease_kinds`, leaving the jobs that end at lease to the caller: a
    runner writes and records them as it does every end."""
    registered = [kind for kind in kinds if job_kind(kind) is not None]
    if not registered:
        return Leased()
    return _lease(conn, registered, limit, lease_duration, holder)


def _written(conn: Conn, leased: Leased) -> list[Lease]:
    if leased.ended:
        changed = write_ends(conn, leased.ended)
        for held, end in leased.ended:
            if held.id in changed and end.outcome is Outcome.DEAD:
                logger.error("job %s moved to dead: %s", held.id, end.reason)
    return leased.leases


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
            SELECT id, expired FROM (
                SELECT *, false AS expired FROM pending
                UNION ALL SELECT *, true FROM expired
            ) AS due
            ORDER BY scheduled_at, created_at LIMIT {n}
        )
        UPDATE <<crawler_jobs>> AS j
        SET state = 'running', attempts = j.attempts + 1,
            reclaim_count = j.reclaim_count + candidates.expired::int,
            lease_generation = j.lease_generation + 1,
            leased_until = now() + %(lease_duration)s::interval, leased_by = %(holder)s,
            updated_at = now()
        FROM candidates WHERE j.id = candidates.id
        RETURNING j.id, CAST(j.payload AS text), j.attempts, j.max_attempts,
                  j.lease_generation, j.scheduled_at, j.created_at,
                  CASE WHEN candidates.expired THEN j.reclaim_count END
        """


def _lease(
    conn: Conn,
    kinds: list[str] | None,
    limit: int,
    lease_duration: timedelta,
    holder: str | None,
) -> Leased:
    """Lease, then sort the rows in schedule order into the jobs to run and
    those that end at lease. No row lock outlives the caller's transaction."""
    leased = Leased()
    if limit < 1:
        return leased
    statement = _lease_statement(None if kinds is None else tuple(sorted(set(kinds))), limit)
    rows = fetch_rows(conn, statement, {"lease_duration": lease_duration, "holder": holder})
    rows.sort(key=operator.itemgetter(5, 6))

    leases, ended = leased.leases, leased.ended
    for job_id, data, attempts, max_attempts, generation, _, _, expiries in rows:
        try:
            payload = decode_payload(data)
        except PayloadError as exc:
            held = Lease(job_id, salvage_payload(data), attempts, max_attempts, generation)
            if _registered(data):
                # A poison row (its kind is registered, its payload is not one)
                # must not jam the queue: it ends, and the rest are handed out.
                ended.append((held, dead(str(exc))))
            else:
                ended.append((held, released("not a kind this process runs")))
            continue
        held = Lease(job_id, payload, attempts, max_attempts, generation, len(data))
        end = None if expiries is None else after_expiry(held, expiries, refund=False)
        if end is None:
            leases.append(held)
        else:
            ended.append((held, end))
    return leased


def _registered(data: str) -> bool:
    """Whether the kind of stored payload text is registered here."""
    try:
        kind = json.loads(data).get("kind")
    except (ValueError, AttributeError):
        return True  # not even a JSON object: poison, whatever its kind
    return isinstance(kind, str) and job_kind(kind) is not None
