"""How a job ends: one typed value, the rules that choose it, and the one
function that writes a batch of them.

An attempt ends `done`, `retry` (pending again after a backoff), `dead` (no
more tries) or `release` (pending at once, the attempt refunded: the job did
not fail). The rules, each written once here:

- a failed attempt retries unless it was the last (`attempts >= max_attempts`)
  or no retry can fix it (`after_failure`);
- an expired lease, whoever finds it (`after_expiry`): at `RECLAIM_LIMIT`
  expiries in a row the job is dead (a crash loop); else a reclaim releases it
  (the seed's `reclaim_orphaned`), and a lease takes it for another attempt,
  unless the attempt that expired was the last.

`write_ends` writes any mix of ends, fenced per row on `(id, lease_generation)`
and `state = 'running'`; `discard_pending` is the one end of a job that was
never leased. Nothing here commits or logs: the caller reports what changed.
"""

from __future__ import annotations

import enum
import functools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import truncated
from manga_page_analysis.queue.backoff import backoff_for
from manga_page_analysis.queue.table import (
    CRASH_LOOP_ERROR,
    LAST_ERROR_MAX_CHARS,
    RECLAIM_LIMIT,
    Lease,
    fetch_rows,
    run,
)


class Outcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"
    DEAD = "dead"
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class End:
    """How one held job ends, with its reason (the error, or why it was released)
    and, for a retry, the delay before it is due again."""

    outcome: Outcome
    reason: str = ""
    delay: timedelta | None = None


DONE: Final = End(Outcome.DONE)


def dead(reason: str) -> End:
    return End(Outcome.DEAD, reason)


def released(reason: str) -> End:
    return End(Outcome.RELEASE, reason)


def last_attempt(attempts: int, max_attempts: int) -> bool:
    """Whether attempt number `attempts` is the job's last: the terminal rule."""
    return attempts >= max_attempts


def after_failure(lease: Lease, error: str, *, permanent: bool = False) -> End:
    """A failed attempt: `dead` when it was the last or no retry can fix it
    (`permanent`), else a retry after a jittered exponential backoff."""
    if permanent or last_attempt(lease.attempts, lease.max_attempts):
        return dead(error)
    return End(Outcome.RETRY, error, backoff_for(lease.attempts))


FINAL_ATTEMPT_EXPIRED: Final = (
    "lease expired on the final attempt; the worker running it stopped without finishing"
)
RECLAIMED: Final = "reclaimed: the worker holding it went away (attempt refunded)"


def after_expiry(lease: Lease, expiries: int, *, refund: bool) -> End | None:
    """What becomes of a job whose lease expired, whoever found it. `expiries`
    counts the expired leases in a row, this one included (`reclaim_count`).
    `refund`: a reclaim found it (the seed's `reclaim_orphaned`): released,
    attempt refunded. Otherwise a lease took it, counting a new attempt in
    `lease.attempts`: `None` (run it) unless the expired attempt was the last."""
    if expiries >= RECLAIM_LIMIT:
        return dead(CRASH_LOOP_ERROR)
    if refund:
        return released(RECLAIMED)
    if last_attempt(lease.attempts - 1, lease.max_attempts):
        return dead(FINAL_ATTEMPT_EXPIRED)
    return None


# --- the writer -------------------------------------------------------------------


def _fenced(set_clause: str, *per_row: tuple[str, str]) -> str:
    """`UPDATE ... SET set_clause` of the rows whose lease is current, one per
    lease; `per_row` adds `(name, type)` columns to `v`, bound as arrays of
    `%(names)s` (a shorter array is padded with NULL by `unnest`).

    It answers with the ordinals (1-based, in the arrays) of the leases whose
    row did NOT change: none, as a rule. Returning the changed ids instead
    cost the client a UUID object and a result row per job, the largest part
    of writing a batch of no-op jobs."""
    columns = [("id", "uuid"), ("generation", "bigint"), *per_row]
    arrays = ", ".join(f"%({name}s)s::{sql_type}[]" for name, sql_type in columns)
    names = ", ".join(name for name, _ in columns)
    return (
        f"WITH changed AS (UPDATE <<crawler_jobs>> AS j SET {set_clause} "
        f"FROM unnest({arrays}) WITH ORDINALITY AS v({names}, n) "
        "WHERE j.id = v.id AND j.lease_generation = v.generation AND j.state = 'running' "
        "RETURNING v.n) "
        "SELECT s.n FROM generate_series(1, %(count)s::int) AS s(n) "
        "WHERE NOT EXISTS (SELECT FROM changed WHERE changed.n = s.n)"
    )


RELEASE_SET: Final = (
    # Pending at once, the attempt refunded (the job did not fail), and the
    # generation bumped so the previous holder's late writes are fenced off.
    # The expiry count is kept: only an attempt that ends resets it.
    "state = 'pending', attempts = greatest(j.attempts - 1, 0), "
    "lease_generation = j.lease_generation + 1, leased_until = NULL, updated_at = now()"
)


@functools.cache
def _statement(outcome: Outcome) -> str:
    """The fenced statement of one outcome (a plan each)."""
    if outcome is Outcome.RELEASE:
        return _fenced(RELEASE_SET)
    if outcome is Outcome.DONE:
        return _fenced("state = 'done', reclaim_count = 0, leased_until = NULL, updated_at = now()")
    state = "dead" if outcome is Outcome.DEAD else "pending"
    # The attempt ended and its worker survived it: only expiries in a row
    # count towards a crash loop (and a dead job's `last_error` says why).
    return _fenced(
        f"state = '{state}', "
        "scheduled_at = coalesce(now() + v.delay, j.scheduled_at), "
        "last_error = coalesce(v.error, j.last_error), "
        "reclaim_count = 0, leased_until = NULL, updated_at = now()",
        ("error", "text"),
        ("delay", "interval"),
    )


def write_ends(conn: Conn, ends: Iterable[tuple[Lease, End]]) -> set[uuid.UUID]:
    """Write each held job's end, fenced: a row changes only while its lease is
    current. One statement per outcome present, rows in id order (two batched
    statements on the same rows then never deadlock). Returns the ids changed;
    they stay locked until the caller's transaction ends, so "write the ends,
    save results for the ids returned, commit" is a fenced completion."""
    by_outcome: dict[Outcome, list[tuple[Lease, End]]] = {}
    for entry in ends:
        by_outcome.setdefault(entry[1].outcome, []).append(entry)
    changed: set[uuid.UUID] = set()
    for outcome, group in by_outcome.items():
        # Sorted on the UUID's integer, which orders exactly as the UUIDs (and
        # as Postgres does) without a Python-level comparison per step.
        group.sort(key=_lease_id)
        ids = [lease.id for lease, _ in group]
        params: dict[str, Any] = {
            "ids": ids,
            "generations": [lease.lease_generation for lease, _ in group],
            "count": len(ids),
        }
        if outcome is Outcome.RETRY or outcome is Outcome.DEAD:
            params["errors"] = [truncated(end.reason, LAST_ERROR_MAX_CHARS) for _, end in group]
            params["delays"] = [end.delay for _, end in group]
        unchanged = {n - 1 for (n,) in fetch_rows(conn, _statement(outcome), params)}
        if unchanged:
            changed.update(job_id for at, job_id in enumerate(ids) if at not in unchanged)
        else:
            changed.update(ids)
    return changed


def _lease_id(entry: tuple[Lease, End]) -> int:
    return entry[0].id.int


_DISCARD_PENDING: Final = (
    "UPDATE <<crawler_jobs>> SET state = 'dead', last_error = %(reason)s, "
    "leased_until = NULL, updated_at = now() "
    "WHERE id = ANY(%(ids)s::uuid[]) AND state = 'pending' "
    "RETURNING id, CAST(payload AS text)"
)


def discard_pending(
    conn: Conn, job_ids: Sequence[uuid.UUID], reason: str
) -> list[tuple[uuid.UUID, str]]:
    """End the pending jobs among `job_ids`: `dead` with `reason` as their
    `last_error` (a dead job can be retried, so a discard can be undone).
    Returns `(id, payload text)` of each job discarded; a job that is not
    pending (a worker took it) is left."""
    params = {"ids": sorted(set(job_ids)), "reason": truncated(reason, LAST_ERROR_MAX_CHARS)}
    return [(job_id, payload) for job_id, payload in run(conn, _DISCARD_PENDING, params)]
