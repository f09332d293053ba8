"""Every change of a job's state, each written once, in one SQL statement over a
batch; the single-job function is the batch function called with one job.

The end of an attempt (done, retry, dead, release) is an `End`, written by
`ends.write_ends` with the rules in `ends`; the functions here name the usual
ends. Writes made for leases are fenced per row: a row changes only while its
`(id, lease_generation)` matches and it is `running`, so a stale lease in a
batch changes nothing. The batch functions return the ids they changed, the
single ones `bool` (logging a warning when the lease was gone). Nothing here
commits.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from manga_page_analysis.config import MAX_RETENTION_DAYS
from manga_page_analysis.db import Conn
from manga_page_analysis.errors import PayloadError
from manga_page_analysis.queue.ends import (
    DONE,
    RELEASE_SET,
    End,
    Outcome,
    after_expiry,
    after_failure,
    dead,
    released,
    write_ends,
)
from manga_page_analysis.queue.kinds import decode_payload, registered_kinds, salvage_payload
from manga_page_analysis.queue.table import Lease, run

logger = logging.getLogger(__name__)


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
    return write_ends(conn, [(lease, DONE) for lease in leases])


def ack_done(conn: Conn, lease: Lease) -> bool:
    """`ack_done_many` for one lease."""
    return _one(ack_done_many(conn, [lease]), "ack_done", lease)


def ack_failed_many(conn: Conn, failures: Sequence[tuple[Lease, str]]) -> set[uuid.UUID]:
    """Record failed attempts, each with its error (`ends.after_failure`): `dead`
    once a job's attempts are used up, else `pending` again after a backoff."""
    return write_ends(conn, [(lease, after_failure(lease, error)) for lease, error in failures])


def ack_failed(conn: Conn, lease: Lease, error: str) -> bool:
    """`ack_failed_many` for one lease: `dead` or `pending` after a backoff."""
    return _one(ack_failed_many(conn, [(lease, error)]), "ack_failed", lease)


def ack_dead_many(conn: Conn, failures: Sequence[tuple[Lease, str]]) -> set[uuid.UUID]:
    """Move the jobs straight to `dead` with their errors: for errors no retry can fix."""
    return write_ends(conn, [(lease, dead(error)) for lease, error in failures])


def ack_dead(conn: Conn, lease: Lease, error: str) -> bool:
    """`ack_dead_many` for one lease (an image that cannot decode, say)."""
    return _one(ack_dead_many(conn, [(lease, error)]), "ack_dead", lease)


# --- while an attempt runs, and releasing a job -------------------------------------

_RENEW: Final = (
    "UPDATE <<crawler_jobs>> AS j SET leased_until = now() + %(lease_duration)s::interval, "
    "updated_at = now() FROM unnest(%(ids)s::uuid[], %(generations)s::bigint[]) "
    "AS v(id, generation) "
    "WHERE j.id = v.id AND j.lease_generation = v.generation AND j.state = 'running' "
    "RETURNING j.id"
)


def renew_many(conn: Conn, leases: Sequence[Lease], lease_duration: timedelta) -> set[uuid.UUID]:
    """Extend the leases to now + `lease_duration`."""
    if not leases:
        return set()
    # Id order, as every batch: the acker and the heartbeat never deadlock.
    ordered = sorted(leases, key=lambda lease: lease.id.int)
    params = {
        "ids": [lease.id for lease in ordered],
        "generations": [lease.lease_generation for lease in ordered],
        "lease_duration": lease_duration,
    }
    return set(run(conn, _RENEW, params).scalars())


def renew(conn: Conn, lease: Lease, lease_duration: timedelta) -> bool:
    """`renew_many` for one lease."""
    return _one(renew_many(conn, [lease], lease_duration), "renew", lease)


def release_many(conn: Conn, leases: Sequence[Lease]) -> set[uuid.UUID]:
    """Release the jobs: `pending` at once, attempt refunded, generation bumped."""
    return write_ends(conn, [(lease, released("released")) for lease in leases])


def release(conn: Conn, lease: Lease) -> bool:
    """`release_many` for one lease."""
    return _one(release_many(conn, [lease]), "release", lease)


_RELEASE_UNOWNED: Final = (
    f"UPDATE <<crawler_jobs>> AS j SET {RELEASE_SET} "
    "WHERE j.id = ANY(%(ids)s::uuid[]) AND j.state = 'running' RETURNING j.id"
)


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


# --- expired leases -------------------------------------------------------------------

_TAKE_EXPIRED: Final = """
    WITH expired AS MATERIALIZED (
        SELECT id FROM <<crawler_jobs>>
        WHERE state = 'running' AND leased_until < now()
        ORDER BY id FOR UPDATE SKIP LOCKED
    )
    UPDATE <<crawler_jobs>> AS j
    SET reclaim_count = j.reclaim_count + 1, leased_until = now() + %(hold)s::interval,
        updated_at = now()
    FROM expired WHERE j.id = expired.id
    RETURNING j.id, CAST(j.payload AS text), j.attempts, j.max_attempts, j.lease_generation,
              j.reclaim_count
"""


def take_expired(conn: Conn, hold: timedelta) -> list[tuple[Lease, End]]:
    """Take over every running job whose lease has expired, each with its end
    (`ends.after_expiry` with the attempt refunded): released, or `dead` at the
    crash-loop limit. Each job's expiry is counted (`reclaim_count`); it stays
    `running` under its generation, held for `hold`, until the caller writes the
    ends (`write_ends`; a release bumps the generation). A payload that no
    longer decodes comes back as `kinds.salvage_payload` reads it. `leased_by`
    is left: nobody leased the job."""
    params = {"hold": hold}
    taken: list[tuple[Lease, End]] = []
    for job_id, data, attempts, max_attempts, generation, expiries in run(
        conn, _TAKE_EXPIRED, params
    ):
        try:
            payload = decode_payload(data)
        except PayloadError:
            payload = salvage_payload(data)
        held = Lease(job_id, payload, attempts, max_attempts, generation)
        end = after_expiry(held, expiries, refund=True)
        assert end is not None  # a refunded expiry always has an end
        taken.append((held, end))
    return taken


@dataclass(frozen=True, slots=True)
class Reclaim:
    """What `reclaim_expired` did: the jobs released to `pending`, and the
    crash-looping ones moved to `dead` (as leases of their final generation)."""

    released: list[uuid.UUID]
    dead_lettered: list[Lease]


def reclaim_expired(conn: Conn) -> Reclaim:
    """Take back every running job whose lease has expired (`take_expired`) and
    write their ends at once: released, attempt refunded, or `dead` with
    `CRASH_LOOP_ERROR` at `RECLAIM_LIMIT` expiries in a row. Logs what it did;
    a runner does the same through its job-end writer, which also records each
    end (`save_failure`, event, metric)."""
    taken = take_expired(conn, timedelta(minutes=1))
    changed = write_ends(conn, taken)
    released_ids: list[uuid.UUID] = []
    dead_lettered: list[Lease] = []
    for held, end in taken:
        if held.id not in changed:
            continue
        if end.outcome is Outcome.DEAD:
            logger.error("job %s moved to dead: %s", held.id, end.reason)
            dead_lettered.append(held)
        else:
            released_ids.append(held.id)
    if released_ids:
        logger.warning(
            "reclaimed %d orphaned job(s) with expired leases: %s",
            len(released_ids),
            ", ".join(str(job_id) for job_id in released_ids[:20]),
        )
    return Reclaim(released_ids, dead_lettered)


def reclaim_orphaned(conn: Conn) -> int:
    """`reclaim_expired`, counted: expired leases released or dead-lettered."""
    reclaim = reclaim_expired(conn)
    return len(reclaim.released) + len(reclaim.dead_lettered)


# --- maintenance --------------------------------------------------------------------

_REAP_DONE: Final = (
    "DELETE FROM <<crawler_jobs>> WHERE state = 'done' AND updated_at < now() - %(age)s::interval"
)


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
