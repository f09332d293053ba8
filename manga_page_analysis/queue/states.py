"""Every change of a job's state, each written once, in one SQL statement over a
batch; the single-job function is the batch function called with one job.

Writes made for leases are fenced per row: a row changes only while its
`(id, lease_generation)` matches and it is `running`, so a stale lease in a
batch changes nothing. The batch functions return the ids they changed, the
single ones `bool` (logging a warning when the lease was gone). Changed rows
stay locked until the caller's transaction ends, so "ack, write results for
the ids returned, commit" is a fenced completion. Nothing here commits.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

from manga_page_analysis.config import MAX_RETENTION_DAYS
from manga_page_analysis.db import Conn
from manga_page_analysis.errors import PayloadError, truncated
from manga_page_analysis.queue.backoff import backoff_for
from manga_page_analysis.queue.kinds import decode_payload, registered_kinds
from manga_page_analysis.queue.table import (
    CRASH_LOOP_ERROR,
    LAST_ERROR_MAX_CHARS,
    RECLAIM_LIMIT,
    Lease,
    run,
)

logger = logging.getLogger(__name__)


def _fenced(set_clause: str, *per_row: tuple[str, str]) -> str:
    """`UPDATE ... SET set_clause` of the rows whose lease is current, one per
    lease; `per_row` adds `(name, type)` columns to `v`, bound as arrays of
    `%(names)s` (a shorter array is padded with NULL by `unnest`)."""
    columns = [("id", "uuid"), ("generation", "bigint"), *per_row]
    arrays = ", ".join(f"%({name}s)s::{sql_type}[]" for name, sql_type in columns)
    names = ", ".join(name for name, _ in columns)
    return (
        f"UPDATE <<crawler_jobs>> AS j SET {set_clause} FROM unnest({arrays}) AS v({names}) "
        "WHERE j.id = v.id AND j.lease_generation = v.generation AND j.state = 'running' "
        "RETURNING j.id"
    )


@functools.cache
def _end_attempt(state: str) -> str:
    """The fenced end of attempts in `state` (written inline: a plan per state)."""
    return _fenced(
        f"state = '{state}', "
        "scheduled_at = coalesce(now() + v.delay, j.scheduled_at), "
        "last_error = coalesce(v.error, j.last_error), "
        # The attempt ended and its worker survived it: only reclaims in a row
        # count towards a crash loop (see reclaim_expired).
        "reclaim_count = 0, leased_until = NULL, updated_at = now()",
        ("error", "text"),
        ("delay", "interval"),
    )


_RENEW: Final = _fenced("leased_until = now() + %(lease_duration)s::interval, updated_at = now()")

_GIVE_BACK: Final = (
    # Pending at once, the attempt refunded (the job did not fail), and the
    # generation bumped so the previous holder's late writes are fenced off.
    "state = 'pending', attempts = greatest(j.attempts - 1, 0), "
    "lease_generation = j.lease_generation + 1, leased_until = NULL, updated_at = now()"
)

_RELEASE: Final = _fenced(_GIVE_BACK)

_RELEASE_UNOWNED: Final = (
    f"UPDATE <<crawler_jobs>> AS j SET {_GIVE_BACK} "
    "WHERE j.id = ANY(%(ids)s::uuid[]) AND j.state = 'running' RETURNING j.id"
)

_RECLAIM_EXPIRED: Final = f"""
    WITH dead AS (
        UPDATE <<crawler_jobs>> AS j
        SET state = 'dead', reclaim_count = j.reclaim_count + 1,
            lease_generation = j.lease_generation + 1, leased_until = NULL,
            last_error = %(error)s, updated_at = now()
        WHERE j.state = 'running' AND j.leased_until < now()
          AND j.reclaim_count + 1 >= %(limit)s
        RETURNING j.id, CAST(j.payload AS text) AS payload, j.attempts, j.max_attempts,
                  j.lease_generation
    ), given_back AS (
        UPDATE <<crawler_jobs>> AS j SET {_GIVE_BACK}, reclaim_count = j.reclaim_count + 1
        WHERE j.state = 'running' AND j.leased_until < now()
          AND j.reclaim_count + 1 < %(limit)s
        RETURNING j.id
    )
    SELECT id, payload, attempts, max_attempts, lease_generation FROM dead
    UNION ALL
    SELECT id, NULL, NULL, NULL, NULL FROM given_back
"""

_REAP_DONE: Final = (
    "DELETE FROM <<crawler_jobs>> WHERE state = 'done' AND updated_at < now() - %(age)s::interval"
)


def _held(leases: Iterable[Lease]) -> list[tuple[uuid.UUID, int]]:
    # Two batched statements touching the same rows lock them in the same
    # order (id order), so the acker and the heartbeat never deadlock.
    ordered = sorted(leases, key=lambda lease: lease.id)
    return [(lease.id, lease.lease_generation) for lease in ordered]


def _write(
    conn: Conn, statement: str, held: Sequence[tuple[uuid.UUID, int]], **arrays: Any
) -> set[uuid.UUID]:
    """Run a `_fenced` statement for `held` (`(id, generation)`), with the
    per-row `arrays` in the same order; returns the ids changed."""
    if not held:
        return set()
    ids = [job_id for job_id, _ in held]
    generations = [generation for _, generation in held]
    return set(run(conn, statement, {"ids": ids, "generations": generations, **arrays}).scalars())


def _end_attempts(
    conn: Conn,
    state: Literal["done", "pending", "dead"],
    held: Sequence[tuple[uuid.UUID, int]],
    errors: Iterable[str] = (),
    delays: Iterable[timedelta] = (),
) -> set[uuid.UUID]:
    errors = [truncated(error, LAST_ERROR_MAX_CHARS) for error in errors]
    return _write(conn, _end_attempt(state), held, errors=errors, delays=list(delays))


def _one(changed: set[uuid.UUID], action: str, lease: Lease) -> bool:
    if lease.id in changed:
        return True
    logger.warning(
        "%s of job %s (generation %d) found its lease gone; nothing was written",
        action,
        lease.id,
        lease.lease_generation,
    )
    return False


# --- the end of an attempt -------------------------------------------------------


def ack_done_many(conn: Conn, leases: Sequence[Lease]) -> set[uuid.UUID]:
    """Mark the jobs `done`."""
    return _end_attempts(conn, "done", _held(leases))


def ack_done(conn: Conn, lease: Lease) -> bool:
    """`ack_done_many` for one lease."""
    return _one(ack_done_many(conn, [lease]), "ack_done", lease)


def ack_failed_many(conn: Conn, failures: Sequence[tuple[Lease, str]]) -> set[uuid.UUID]:
    """Record failed attempts, each with its error: `dead` once a job's attempts are
    used up, else `pending` again after a jittered exponential backoff (two statements)."""
    ordered = sorted(failures, key=lambda failure: failure[0].id)
    dead = [(lease, error) for lease, error in ordered if lease.attempts >= lease.max_attempts]
    retry = [(lease, error) for lease, error in ordered if lease.attempts < lease.max_attempts]
    return ack_dead_many(conn, dead) | _end_attempts(
        conn,
        "pending",
        _held(lease for lease, _ in retry),
        [error for _, error in retry],
        [backoff_for(lease.attempts) for lease, _ in retry],
    )


def ack_failed(conn: Conn, lease: Lease, error: str) -> bool:
    """`ack_failed_many` for one lease: `dead` or `pending` after a backoff."""
    return _one(ack_failed_many(conn, [(lease, error)]), "ack_failed", lease)


def ack_dead_many(conn: Conn, failures: Sequence[tuple[Lease, str]]) -> set[uuid.UUID]:
    """Move the jobs straight to `dead` with their errors: for errors no retry can fix."""
    return _dead(conn, [(lease.id, lease.lease_generation, error) for lease, error in failures])


def ack_dead(conn: Conn, lease: Lease, error: str) -> bool:
    """`ack_dead_many` for one lease (an image that cannot decode, say)."""
    return _one(ack_dead_many(conn, [(lease, error)]), "ack_dead", lease)


def dead_letter(conn: Conn, held: Sequence[tuple[uuid.UUID, int, str]]) -> set[uuid.UUID]:
    """`ack_dead_many` for `(id, generation, error)` of rows that have no `Lease`
    (a payload nobody can decode); logs each at ERROR."""
    for job_id, _, error in sorted(held):
        logger.error("job %s moved to dead: %s", job_id, error)
    return _dead(conn, held)


def _dead(conn: Conn, held: Iterable[tuple[uuid.UUID, int, str]]) -> set[uuid.UUID]:
    ordered = sorted(held)  # id order, as in `_held`
    return _end_attempts(conn, "dead", [row[:2] for row in ordered], [row[2] for row in ordered])


# --- while an attempt runs, and giving a job back -------------------------------------


def renew_many(conn: Conn, leases: Sequence[Lease], lease_duration: timedelta) -> set[uuid.UUID]:
    """Extend the leases to now + `lease_duration`."""
    return _write(conn, _RENEW, _held(leases), lease_duration=lease_duration)


def renew(conn: Conn, lease: Lease, lease_duration: timedelta) -> bool:
    """`renew_many` for one lease."""
    return _one(renew_many(conn, [lease], lease_duration), "renew", lease)


def release_many(conn: Conn, leases: Sequence[Lease]) -> set[uuid.UUID]:
    """Give the jobs back: `pending` at once, attempt refunded, generation bumped."""
    return _write(conn, _RELEASE, _held(leases))


def release(conn: Conn, lease: Lease) -> bool:
    """`release_many` for one lease."""
    return _one(release_many(conn, [lease]), "release", lease)


def give_back(conn: Conn, held: Sequence[tuple[uuid.UUID, int]]) -> set[uuid.UUID]:
    """`release_many` for `(id, generation)` of rows that have no `Lease` (leased by
    `lease(conn, None, ...)` but of a kind this process has not registered)."""
    return _write(conn, _RELEASE, sorted(held))


def release_unowned_many(conn: Conn, job_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """`release_many` without leases in hand, for any running rows; returns
    the ids that were running and are now pending."""
    ids = sorted(set(job_ids))
    if not ids:
        return set()
    return set(run(conn, _RELEASE_UNOWNED, {"ids": ids}).scalars())


def release_unowned(conn: Conn, job_id: uuid.UUID) -> bool:
    """`release` without a lease in hand, for any running row; `False` if it isn't running."""
    return job_id in release_unowned_many(conn, [job_id])


# --- maintenance --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reclaim:
    """What `reclaim_expired` did: the jobs given back to `pending`, and the
    crash-looping ones moved to `dead` (as leases of their final generation,
    so a caller can record the failure where the job's kind keeps results)."""

    given_back: list[uuid.UUID]
    dead_lettered: list[Lease]
    error: str = CRASH_LOOP_ERROR


def reclaim_expired(conn: Conn) -> Reclaim:
    """Take back every running job whose lease has expired, in one statement.

    Each such job's `reclaim_count` goes up by one. Below `RECLAIM_LIMIT` the
    job goes back to `pending`, attempt refunded, generation bumped: its
    worker went away. At the limit it goes to `dead` with `CRASH_LOOP_ERROR`,
    its attempt counted: a job that kills every worker that runs it would
    otherwise loop across restarts forever. Ending an attempt resets the
    count, so only reclaims in a row add up.
    """
    rows = run(conn, _RECLAIM_EXPIRED, {"error": CRASH_LOOP_ERROR, "limit": RECLAIM_LIMIT})
    given_back: list[uuid.UUID] = []
    dead: list[Lease] = []
    for job_id, payload, attempts, max_attempts, generation in rows:
        if payload is None:
            given_back.append(job_id)
            continue
        logger.error("job %s moved to dead: %s", job_id, CRASH_LOOP_ERROR)
        try:
            dead.append(Lease(job_id, decode_payload(payload), attempts, max_attempts, generation))
        except PayloadError:
            continue  # nothing more to record for a payload nobody can read
    if given_back:
        logger.warning(
            "reclaimed %d orphaned job(s) with expired leases: %s",
            len(given_back),
            ", ".join(str(job_id) for job_id in given_back[:20]),
        )
    return Reclaim(given_back, dead)


def reclaim_orphaned(conn: Conn) -> int:
    """`reclaim_expired`, counted: expired leases given back or dead-lettered."""
    reclaim = reclaim_expired(conn)
    return len(reclaim.given_back) + len(reclaim.dead_lettered)


def reap_done(conn: Conn, retention_days: int) -> int:
    """Delete `done` jobs last updated more than `retention_days` ago; `0` disables.
    `ValueError` past `MAX_RETENTION_DAYS` (no timestamp is that old)."""
    if retention_days > MAX_RETENTION_DAYS:
        raise ValueError(
            f"retention_days must be at most {MAX_RETENTION_DAYS}, not {retention_days}"
        )
    if retention_days <= 0:
        return 0
    result = run(conn, _REAP_DONE, {"age": timedelta(days=retention_days)})
    return int(result.rowcount or 0)


# --- retrying dead jobs ------------------------------------------------------------------

_RETRY: Final = (
    # A retried job starts over: attempts and reclaims reset, due now.
    "UPDATE <<crawler_jobs>> AS j SET state = 'pending', attempts = 0, reclaim_count = 0, "
    "leased_until = NULL, scheduled_at = now(), updated_at = now() "
    "FROM ({candidates}) AS retried WHERE j.id = retried.id AND j.state = 'dead' "
    "RETURNING j.id"
)

_RETRY_IDS: Final = _RETRY.format(candidates="SELECT unnest(%(ids)s::uuid[]) AS id")


def _slot_of(kind: str, field: str) -> str:
    return f"WHEN '{kind}' THEN '{kind}:' || (d.payload ->> '{field}')"


def _slot_taken(kind: str, field: str) -> str:
    # The literal kind and states let the planner probe that kind's partial
    # unique index for the in-flight check.
    return (
        f"(dead.payload ->> 'kind' = '{kind}' AND EXISTS ("
        f"SELECT 1 FROM <<crawler_jobs>> f WHERE f.payload ->> 'kind' = '{kind}' "
        "AND f.state IN ('pending', 'running') "
        f"AND f.payload ->> '{field}' = dead.payload ->> '{field}'))"
    )


@functools.cache
def _retry_all_dead_statement(slots: tuple[tuple[str, str], ...]) -> str:
    """`_RETRY` of the newest dead job per dedup slot (`(kind, field)` of every
    registered kind with a dedup rule; every job of another kind is its own
    slot) whose slot is free."""
    slot = " ".join(_slot_of(kind, field) for kind, field in slots)
    free = " AND NOT ".join(_slot_taken(kind, field) for kind, field in slots)
    candidates = f"""
        SELECT DISTINCT ON (slot) id
        FROM (
            SELECT d.id, d.updated_at, d.payload,
                   coalesce({f"CASE d.payload ->> 'kind' {slot} END" if slots else "NULL"},
                            d.id::text) AS slot
            FROM <<crawler_jobs>> d
            WHERE d.state = 'dead'
              AND (CAST(%(kind)s AS text) IS NULL OR d.payload ->> 'kind' = %(kind)s)
        ) dead
        WHERE {f"NOT {free}" if slots else "true"}
        ORDER BY slot, dead.updated_at DESC, dead.id DESC
    """
    return _RETRY.format(candidates=candidates)


_DEAD_IDS: Final = (
    "SELECT id FROM <<crawler_jobs>> WHERE state = 'dead' "
    "AND (CAST(%(kind)s AS text) IS NULL OR payload ->> 'kind' = %(kind)s) "
    "ORDER BY updated_at DESC, id DESC"
)


def retry_dead(conn: Conn, job_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """Move the dead jobs among `job_ids` back to `pending`, attempts and
    reclaims reset, due now; returns the ids moved (jobs not dead are left).
    A job whose slot (page or chapter) has a job in flight raises the driver's
    unique violation: the caller decides, usually inside a savepoint."""
    return set(run(conn, _RETRY_IDS, {"ids": sorted(set(job_ids))}).scalars())


def retry_all_dead(conn: Conn, kind: str | None = None) -> list[uuid.UUID]:
    """`retry_dead` for every dead job (of `kind`, if given), in one statement.
    A dead job whose slot has a job in flight is left dead; of several for
    one slot, the most recently updated is retried. A job enqueued for one
    of those slots meanwhile raises the unique violation."""
    slots = tuple(
        (known.name, known.dedup_field)
        for known in registered_kinds()
        if known.dedup_field is not None
    )
    return list(run(conn, _retry_all_dead_statement(slots), {"kind": kind}).scalars())


def dead_job_ids(conn: Conn, kind: str | None = None) -> list[uuid.UUID]:
    """Dead jobs (of `kind`, if given), most recently updated first."""
    return list(run(conn, _DEAD_IDS, {"kind": kind}).scalars())


_CANCEL_PENDING: Final = (
    "UPDATE <<crawler_jobs>> SET state = 'dead', last_error = %(reason)s, "
    "leased_until = NULL, updated_at = now() "
    "WHERE id = ANY(%(ids)s::uuid[]) AND state = 'pending' RETURNING id"
)


def cancel_pending(conn: Conn, job_ids: Iterable[uuid.UUID], reason: str) -> set[uuid.UUID]:
    """Move the pending jobs among `job_ids` to `dead` with `reason` as their
    `last_error` (a dead job can be retried, so a cancel can be undone);
    returns the ids moved. A job that is not pending (a worker took it) is left."""
    params = {"ids": sorted(set(job_ids)), "reason": truncated(reason, LAST_ERROR_MAX_CHARS)}
    return set(run(conn, _CANCEL_PENDING, params).scalars())
