"""The jobs repository: the durable queue on `crawler_jobs`.

Every function takes `conn` first (a SQLAlchemy `Connection` or `Session`),
executes on it and never commits or rolls back: the caller owns the
transaction, so a host can enqueue inside its own.

Every write made on behalf of a lease is fenced by
`(id, lease_generation, state = 'running')`. A write that finds its lease gone
changes nothing, returns `False` and logs a warning naming the job.
"""

from __future__ import annotations

import functools
import logging
import operator
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Interval,
    Table,
    TextClause,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from app.errors import PayloadError
from app.models import Job
from app.queue.backoff import backoff_for
from app.queue.payloads import JobPayload, decode_payload

logger = logging.getLogger(__name__)

Conn = Connection | Session

LAST_ERROR_MAX_CHARS: Final = 4000
"""`last_error` keeps the start of long messages (tracebacks, HTML error pages)."""

WAKEUP_CHANNEL: Final = "crawler_jobs_wakeup"
"""The `NOTIFY` channel on which due jobs announce themselves (payload: their
kinds, comma-separated); sent by triggers of migration 0003, at commit."""

RECLAIM_LIMIT: Final = 3
"""At this many reclaims from a dead worker, `reclaim_orphaned` dead-letters the
job instead of giving it back: it seems to kill the process that runs it."""

CRASH_LOOP_ERROR: Final = (
    f"reclaimed from a dead worker {RECLAIM_LIMIT} times; it seems to crash its worker "
    "(segfault, OOM kill): dead-lettered"
)

jobs = cast(Table, Job.__table__)


def text_literal(value: str) -> ColumnElement[Any]:
    # Constants are rendered inline, not bound: the planner can then match
    # the partial indexes' predicates even for a cached generic plan.
    return literal_column("'" + value.replace("'", "''") + "'")


PENDING = text_literal("pending")
RUNNING = text_literal("running")
DONE = text_literal("done")
DEAD = text_literal("dead")


def payload_field(name: str) -> ColumnElement[Any]:
    """`payload ->> 'name'`, spelled exactly as in the indexes."""
    return jobs.c.payload.op("->>")(text_literal(name))


KIND = payload_field("kind")


@dataclass(frozen=True, slots=True)
class Lease:
    """A job held by a worker, valid while `(id, lease_generation)` is current."""

    id: uuid.UUID
    payload: JobPayload
    attempts: int
    max_attempts: int
    lease_generation: int


def _interval(duration: timedelta) -> ColumnElement[Any]:
    return literal(duration, Interval())


def _fenced(lease: Lease) -> ColumnElement[bool]:
    return and_(
        jobs.c.id == lease.id,
        jobs.c.lease_generation == lease.lease_generation,
        jobs.c.state == RUNNING,
    )


def _lost(action: str, lease: Lease) -> bool:
    logger.warning(
        "%s of job %s (generation %d) found its lease gone; nothing was written",
        action,
        lease.id,
        lease.lease_generation,
    )
    return False


def _truncate(error: str) -> str:
    if len(error) <= LAST_ERROR_MAX_CHARS:
        return error
    return error[: LAST_ERROR_MAX_CHARS - 15] + " …[truncated]"


# --- enqueue ---------------------------------------------------------------


def enqueue(
    conn: Conn,
    payload: JobPayload,
    *,
    scheduled_at: datetime | None = None,
    max_attempts: int | None = None,
) -> uuid.UUID | None:
    """Insert a pending job and return its id; `None` when a dedup index skipped it.

    A skipped insert raises nothing, so the caller's transaction stays usable.
    """
    values: dict[str, Any] = {"payload": payload.to_json()}
    if scheduled_at is not None:
        values["scheduled_at"] = scheduled_at
    if max_attempts is not None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        values["max_attempts"] = max_attempts
    statement = pg_insert(jobs).values(**values).on_conflict_do_nothing().returning(jobs.c.id)
    job_id: uuid.UUID | None = conn.execute(statement).scalar_one_or_none()
    return job_id


# --- lease -----------------------------------------------------------------


def lease(conn: Conn, kind: str | None, limit: int, lease_duration: timedelta) -> list[Lease]:
    """Lease up to `limit` due jobs of `kind` (`None`: any kind)."""
    return _lease(conn, None if kind is None else [kind], limit, lease_duration)


def lease_kinds(
    conn: Conn, kinds: Sequence[str], limit: int, lease_duration: timedelta
) -> list[Lease]:
    """Lease up to `limit` due jobs whose kind is one of `kinds`."""
    if not kinds:
        return []
    return _lease(conn, list(kinds), limit, lease_duration)


def _kind_filter(kinds: tuple[str, ...] | None) -> str:
    if kinds is None:
        return ""
    quoted = ", ".join("'" + kind.replace("'", "''") + "'" for kind in kinds)
    # Spelled exactly as in the index, so the planner can use it.
    return f"AND (payload ->> 'kind') IN ({quoted})"


@functools.lru_cache(maxsize=512)
def _lease_statement(kinds: tuple[str, ...] | None, limit: int) -> TextClause:
    """The lease statement for `kinds` and `limit`, built once: building a
    statement costs more client time than Postgres spends running it.

    One statement. Two arms each lock their first due rows with
    `FOR UPDATE SKIP LOCKED` and `LIMIT`, each through its own index so that
    neither steps over rows it cannot take: pending rows due now (the
    pending-only partial indexes, in schedule order), and running rows whose
    lease expired (their worker died; `ix_crawler_jobs_running_leased_until`
    finds only the expired ones, never the live leases). The first `limit`
    of both, in `scheduled_at, created_at` order, are updated. While expired
    leases exist, up to `limit` extra rows may stay locked until the caller
    commits (the arm's surplus); in the steady state that arm is empty.

    The payload comes back as text: pydantic parses and validates JSON text
    in one step, several times faster than `json.loads` and then validating
    the dict (the largest client cost of leasing a big batch).

    Constants (the kinds, the limit) are rendered inline: the planner can then
    match the partial indexes' predicates, and a bound `LIMIT` would make a
    generic plan guess 10 % of the table and hash-join a full scan.
    """
    kind = _kind_filter(kinds)
    n = int(limit)
    return text(
        f"""
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
            leased_until = now() + :lease_duration, updated_at = now()
        FROM candidates WHERE j.id = candidates.id
        RETURNING j.id, CAST(j.payload AS text), j.attempts, j.max_attempts,
                  j.lease_generation, j.scheduled_at, j.created_at
        """
    ).bindparams(bindparam("lease_duration", type_=Interval()))


def _lease(
    conn: Conn, kinds: list[str] | None, limit: int, lease_duration: timedelta
) -> list[Lease]:
    """Lease, then hand out the rows in schedule order, dead-lettering any that
    cannot be worked on. No row lock outlives the caller's transaction."""
    if limit < 1:
        return []
    statement = _lease_statement(None if kinds is None else tuple(sorted(set(kinds))), limit)
    result = conn.execute(statement, {"lease_duration": lease_duration})
    # Rows unpacked and indexed as tuples: per row, attribute access by name costs
    # more than the rest of the bookkeeping.
    rows = sorted(result.all(), key=operator.itemgetter(5, 6))

    leases: list[Lease] = []
    for job_id, data, attempts, max_attempts, generation, _, _ in rows:
        try:
            payload = decode_payload(data)
        except PayloadError as exc:
            # A poison row must not jam the queue: dead-letter it now and
            # hand out the rest of the batch.
            _dead_letter(conn, job_id, generation, str(exc))
            continue
        if attempts > max_attempts:
            # Only an expired lease gets here: the worker holding the final
            # attempt stopped without finishing (crash, OOM kill).
            _dead_letter(
                conn,
                job_id,
                generation,
                f"lease expired on the final attempt ({max_attempts}); "
                "the worker running it stopped without finishing",
            )
            continue
        leases.append(Lease(job_id, payload, attempts, max_attempts, generation))
    return leases


def _dead_letter(conn: Conn, job_id: uuid.UUID, generation: int, error: str) -> None:
    conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.lease_generation == generation)
        .values(state=DEAD, leased_until=None, last_error=_truncate(error), updated_at=func.now())
    )
    logger.error("job %s moved to dead: %s", job_id, error)


# --- writes on behalf of a lease -------------------------------------------


def renew(conn: Conn, lease: Lease, lease_duration: timedelta) -> bool:
    """Extend the lease to now + `lease_duration`; `False` once it is no longer current."""
    now = func.now()
    result = conn.execute(
        update(jobs)
        .where(_fenced(lease))
        .values(leased_until=now + _interval(lease_duration), updated_at=now)
        .returning(jobs.c.id)
    )
    return result.first() is not None or _lost("renew", lease)


def ack_done(conn: Conn, lease: Lease) -> bool:
    """Mark the job `done`, only while the lease is current."""
    result = conn.execute(
        update(jobs)
        .where(_fenced(lease))
        .values(state=DONE, leased_until=None, reclaim_count=0, updated_at=func.now())
        .returning(jobs.c.id)
    )
    return result.first() is not None or _lost("ack_done", lease)


def ack_failed(conn: Conn, lease: Lease, error: str) -> bool:
    """Record a failed attempt: `dead` once attempts are used up, else `pending`
    again after a jittered exponential backoff."""
    now = func.now()
    values: dict[str, Any] = {
        "leased_until": None,
        "last_error": _truncate(error),
        # The attempt ended normally: its worker survived it (see reclaim_orphaned).
        "reclaim_count": 0,
        "updated_at": now,
    }
    if lease.attempts >= lease.max_attempts:
        values["state"] = DEAD
    else:
        values["state"] = PENDING
        values["scheduled_at"] = now + _interval(backoff_for(lease.attempts))
    result = conn.execute(update(jobs).where(_fenced(lease)).values(**values).returning(jobs.c.id))
    return result.first() is not None or _lost("ack_failed", lease)


def ack_dead(conn: Conn, lease: Lease, error: str) -> bool:
    """Move the job straight to `dead`: for errors no retry can fix (an image
    that cannot decode, a storage key outside the root)."""
    result = conn.execute(
        update(jobs)
        .where(_fenced(lease))
        .values(
            state=DEAD,
            leased_until=None,
            last_error=_truncate(error),
            reclaim_count=0,
            updated_at=func.now(),
        )
        .returning(jobs.c.id)
    )
    return result.first() is not None or _lost("ack_dead", lease)


def holds(conn: Conn, lease: Lease) -> bool:
    """Lock the job's row and say whether the lease is still current.

    Call it first in the transaction that writes a job's result: while the
    row lock is held, no release or re-lease can slip in before the ack.
    """
    row = conn.execute(select(jobs.c.id).where(_fenced(lease)).with_for_update()).first()
    return row is not None


def _give_back_values() -> dict[str, Any]:
    # Back to pending at once, the attempt refunded, and the generation bumped
    # so the previous holder's late writes are fenced off.
    return {
        "state": PENDING,
        "attempts": func.greatest(jobs.c.attempts - 1, 0),
        "lease_generation": jobs.c.lease_generation + 1,
        "leased_until": None,
        "updated_at": func.now(),
    }


def release(conn: Conn, lease: Lease) -> bool:
    """Give the job back: `pending`, attempt refunded, generation bumped."""
    result = conn.execute(
        update(jobs).where(_fenced(lease)).values(**_give_back_values()).returning(jobs.c.id)
    )
    return result.first() is not None or _lost("release", lease)


def release_unowned(conn: Conn, job_id: uuid.UUID) -> bool:
    """`release` without a lease in hand, for any running row; `False` if it isn't running."""
    result = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.state == RUNNING)
        .values(**_give_back_values())
        .returning(jobs.c.id)
    )
    return result.first() is not None


# --- maintenance -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reclaim:
    """What `reclaim_expired` did: the jobs given back to `pending`, and the
    crash-looping ones moved to `dead` (as leases of their final generation,
    so a caller can record the failure where the job's kind keeps results)."""

    given_back: list[uuid.UUID]
    dead_lettered: list[Lease]
    error: str = CRASH_LOOP_ERROR

    def __len__(self) -> int:
        return len(self.given_back) + len(self.dead_lettered)


def reclaim_expired(conn: Conn) -> Reclaim:
    """Take back every running job whose lease has expired, in one statement.

    Each such job's `reclaim_count` goes up by one. Below `RECLAIM_LIMIT` the
    job goes back to `pending` with its attempt refunded and its generation
    bumped: it did not fail, its worker went away. At the limit it goes to
    `dead` with `CRASH_LOOP_ERROR`: a job that kills every worker that runs it
    (a decoder segfault, an OOM kill) would otherwise loop across restarts
    forever. The count is reset when an attempt ends normally (`ack_done`,
    `ack_failed`, `ack_dead`), so only reclaims in a row add up.
    """
    crashes = jobs.c.reclaim_count + 1
    looping = crashes >= RECLAIM_LIMIT
    result = conn.execute(
        update(jobs)
        .where(jobs.c.state == RUNNING, jobs.c.leased_until < func.now())
        .values(
            state=case((looping, DEAD), else_=PENDING),
            # The crashing attempt stays counted on a dead row; a give-back refunds it.
            attempts=case((looping, jobs.c.attempts), else_=func.greatest(jobs.c.attempts - 1, 0)),
            reclaim_count=crashes,
            lease_generation=jobs.c.lease_generation + 1,
            leased_until=None,
            last_error=case((looping, literal(CRASH_LOOP_ERROR)), else_=jobs.c.last_error),
            updated_at=func.now(),
        )
        .returning(
            jobs.c.id,
            jobs.c.state,
            jobs.c.payload,
            jobs.c.attempts,
            jobs.c.max_attempts,
            jobs.c.lease_generation,
        )
    )
    given_back: list[uuid.UUID] = []
    dead: list[Lease] = []
    for row in result:
        if row.state != "dead":
            given_back.append(row.id)
            continue
        logger.error("job %s moved to dead: %s", row.id, CRASH_LOOP_ERROR)
        try:
            payload = decode_payload(row.payload)
        except PayloadError:
            continue  # nothing more to record for a payload nobody can read
        dead.append(
            Lease(
                id=row.id,
                payload=payload,
                attempts=row.attempts,
                max_attempts=row.max_attempts,
                lease_generation=row.lease_generation,
            )
        )
    if given_back:
        logger.warning(
            "reclaimed %d orphaned job(s) with expired leases: %s",
            len(given_back),
            ", ".join(str(job_id) for job_id in given_back[:20]),
        )
    return Reclaim(given_back, dead)


def reclaim_orphaned(conn: Conn) -> int:
    """`reclaim_expired`, counted: how many expired leases were taken back
    (given back to `pending`, or dead-lettered as crash loops).

    Meant for worker start-up: the attempt is refunded because the job did
    not fail, its worker went away.
    """
    return len(reclaim_expired(conn))


def reap_done(conn: Conn, retention_days: int) -> int:
    """Delete `done` jobs last updated more than `retention_days` ago; `0` disables."""
    if retention_days <= 0:
        return 0
    result = conn.execute(
        delete(jobs).where(
            jobs.c.state == DONE,
            jobs.c.updated_at < func.now() - _interval(timedelta(days=retention_days)),
        )
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


__all__ = [
    "CRASH_LOOP_ERROR",
    "RECLAIM_LIMIT",
    "WAKEUP_CHANNEL",
    "Conn",
    "Lease",
    "Reclaim",
    "ack_dead",
    "ack_done",
    "ack_failed",
    "enqueue",
    "holds",
    "lease",
    "lease_kinds",
    "payload_field",
    "reap_done",
    "reclaim_expired",
    "reclaim_orphaned",
    "release",
    "release_unowned",
    "renew",
]
