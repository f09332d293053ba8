"""Retrying dead jobs: one by one from the admin API, all at once from the CLI
(`manga_page_analysis.admin` re-exports them and states the contract they keep)."""

from __future__ import annotations

import logging
import uuid
from contextlib import suppress
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import BadRequest, Conflict, NotFound
from manga_page_analysis.queue.kinds import registered_kinds
from manga_page_analysis.queue.states import dead_job_ids, retry_all_dead, retry_dead
from manga_page_analysis.queue.table import jobs

logger = logging.getLogger(__name__)

MAX_KIND_CHARS: Final = 200
"""A kind filter longer than this is certainly not a kind: refused before it reaches SQL."""


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


def retry_dead_jobs(conn: Conn, *, kind: str | None = None) -> list[uuid.UUID]:
    """Retry every dead job (of `kind`, if given); returns the ids moved to pending.

    A dead job whose page (or chapter) already has a job in flight is skipped
    and left dead; of several dead jobs for one page, the most recently
    updated is retried and the others are skipped.
    """
    check_kind(kind)
    try:
        with conn.begin_nested():
            retried = retry_all_dead(conn, kind)
    except IntegrityError as exc:
        # A job was enqueued for one of those pages meanwhile: the batch is rolled
        # back to its savepoint; one savepoint per job, so a clash skips that job only.
        if not _is_dedup_clash(exc):
            raise
        logger.info("a dead job's slot was taken during the batch retry; retrying one by one")
        retried = []
        for job_id in dead_job_ids(conn, kind):
            with suppress(Conflict):
                if _retry_one(conn, job_id):
                    retried.append(job_id)
    logger.info("retried %d dead job(s)%s", len(retried), f" of kind {kind}" if kind else "")
    return retried


def _is_dedup_clash(exc: IntegrityError) -> bool:
    constraint = getattr(getattr(exc.orig, "diag", None), "constraint_name", None)
    return constraint is not None and any(
        kind.dedup_index == constraint for kind in registered_kinds()
    )


def _retry_one(conn: Conn, job_id: uuid.UUID) -> bool:
    """`True` if the job was dead and is now pending; `False` if it was not dead.
    `Conflict` (nothing changed) when its dedup slot is taken."""
    try:
        # The savepoint confines a unique violation to this statement, so the
        # caller's transaction (a host's request, say) is still usable after.
        with conn.begin_nested():
            return job_id in retry_dead(conn, [job_id])
    except IntegrityError as exc:
        if not _is_dedup_clash(exc):
            raise
        raise Conflict(
            f"job {job_id} cannot be retried: another job for the same "
            "page or chapter is already pending or running"
        ) from None
