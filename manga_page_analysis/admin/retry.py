"""Retrying dead jobs: one by one from the admin API, all at once from the CLI
(`manga_page_analysis.admin` re-exports them and states the contract they keep)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, InternalError, ProgrammingError

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import BadRequest, Conflict, NotFound
from manga_page_analysis.queue.kinds import registered_kinds
from manga_page_analysis.queue.states import dead_job_ids, retry_all_dead, retry_dead
from manga_page_analysis.queue.table import jobs

logger = logging.getLogger(__name__)

MAX_KIND_CHARS: Final = 200
"""A kind filter longer than this is certainly not a kind: refused before it reaches SQL."""


REFUSALS: Final = (IntegrityError, DataError, InternalError, ProgrammingError)
"""What the database answers when it refuses a row's change (a unique index, a
value out of range, a trigger's exception); a lost connection is not one of them."""
SLOT_TAKEN: Final = "another job for the same page or chapter is already pending or running"


def check_kind(kind: str | None) -> None:
    """`BadRequest` for a kind filter no job can have (empty, huge, control characters:
    Postgres text cannot even hold a NUL)."""
    if kind is None:
        return
    if not kind or len(kind) > MAX_KIND_CHARS or not kind.isprintable():
        raise BadRequest("kind must be a job kind: printable, 1 to 200 characters")


def retry_job(conn: Conn, job_id: uuid.UUID) -> dict[str, Any]:
    """Move a dead job back to `pending`, attempts (and reclaims) reset, due now.

    Fenced on `state = 'dead'` in the UPDATE itself, so a concurrent change
    of state wins and this answers `Conflict`. `last_error` is kept: it
    still explains why the job died until the next attempt overwrites it.
    `NotFound` for an unknown id; `Conflict` when the job is not dead, or
    when another job of the same page (or chapter) is already pending or
    running: then nothing changes and the caller's transaction stays usable.
    """
    if not _retry_one(conn, job_id):
        current = conn.execute(select(jobs.c.state).where(jobs.c.id == job_id)).scalar_one_or_none()
        if current is None:
            raise NotFound(f"no job {job_id}")
        raise Conflict(f"job {job_id} is {current}, not dead; only dead jobs can be retried")
    logger.info("job %s retried by an admin: back to pending, attempts reset", job_id)
    return {"id": str(job_id), "state": "pending"}


@dataclass(frozen=True, slots=True)
class RetryReport:
    """What `retry_dead_jobs` did: `retried`, the ids moved to pending; `left_dead`,
    each dead job it could not retry with the reason, in words."""

    retried: list[uuid.UUID] = field(default_factory=list)
    left_dead: list[tuple[uuid.UUID, str]] = field(default_factory=list)


def retry_dead_jobs(conn: Conn, *, kind: str | None = None) -> RetryReport:
    """Retry every dead job (of `kind`, if given) that can be, and say why each
    other one cannot.

    A dead job whose page (or chapter) already has a job in flight is left
    dead; of several dead jobs for one page, the most recently updated is
    retried and the others are left. One statement when nothing goes wrong;
    when the database refuses it (a slot taken meanwhile, a row a trigger
    refuses), one savepoint per job, so a job that cannot be retried never
    holds back the others.
    """
    check_kind(kind)
    try:
        with conn.begin_nested():
            retried = retry_all_dead(conn, kind)
        left_dead = [(job_id, SLOT_TAKEN) for job_id in dead_job_ids(conn, kind)]
    except REFUSALS as exc:
        logger.info(
            "the batch retry was refused (%s); retrying the dead jobs one by one",
            _first_line(exc),
        )
        retried, left_dead = [], []
        for job_id in dead_job_ids(conn, kind):
            try:
                if _retry_one(conn, job_id):
                    retried.append(job_id)
            except _RetryRefused as refused:
                left_dead.append((job_id, refused.reason))
    logger.info(
        "retried %d dead job(s)%s; %d left dead",
        len(retried),
        f" of kind {kind}" if kind else "",
        len(left_dead),
    )
    return RetryReport(retried, left_dead)


def _is_dedup_clash(exc: DBAPIError) -> bool:
    constraint = getattr(getattr(exc.orig, "diag", None), "constraint_name", None)
    return constraint is not None and any(
        kind.dedup_index == constraint for kind in registered_kinds()
    )


def _first_line(exc: DBAPIError) -> str:
    text = str(exc.orig).strip()
    return text.splitlines()[0] if text else type(exc.orig).__name__


def _retry_one(conn: Conn, job_id: uuid.UUID) -> bool:
    """`True` if the job was dead and is now pending; `False` if it was not dead.
    `Conflict` (nothing changed) when its dedup slot is taken or the database
    refuses the change."""
    try:
        # The savepoint confines a refused statement to itself, so the caller's
        # transaction (a host's request, say) is still usable after.
        with conn.begin_nested():
            return job_id in retry_dead(conn, [job_id])
    except REFUSALS as exc:
        if _is_dedup_clash(exc):
            raise _RetryRefused(job_id, SLOT_TAKEN) from None
        # A row the database refuses to move back to pending (a trigger's
        # exception, say): the job stays dead, and the message says why.
        raise _RetryRefused(job_id, f"the database refused it: {_first_line(exc)}") from None


class _RetryRefused(Conflict):
    """A dead job that cannot be retried; `reason` says why in words."""

    def __init__(self, job_id: uuid.UUID, reason: str) -> None:
        super().__init__(f"job {job_id} cannot be retried: {reason}")
        self.reason = reason
