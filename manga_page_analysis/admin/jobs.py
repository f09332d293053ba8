"""One job: its view (`GET api/jobs/<id>`) and discarding it while it waits.

`manga_page_analysis.admin` re-exports these; every function takes `conn`
first and never commits.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Final

from sqlalchemy import select

from manga_page_analysis.admin.labels import label, with_labels
from manga_page_analysis.db import Conn
from manga_page_analysis.errors import Conflict, NotFound
from manga_page_analysis.queue.ends import discard_pending
from manga_page_analysis.queue.kinds import decode_payload
from manga_page_analysis.queue.payloads import KIND_ANALYZE_PAGE, AnalyzePage
from manga_page_analysis.queue.table import CRASH_LOOP_ERROR, KIND, jobs
from manga_page_analysis.repos.page_analysis import save_failed

logger = logging.getLogger(__name__)

DISCARDED_ERROR: Final = "discarded by an admin before it ran"
"""The `last_error` of a job discarded while pending (it is then `dead`), and
the error recorded for its page."""


def _iso(value: Any) -> str | None:
    return None if value is None else str(value.isoformat())


def job_summary(row: Any) -> dict[str, Any]:
    """A job as the listing shows it (`GET api/jobs`): `row` is a `crawler_jobs`
    row with `kind` and the label columns of `with_labels`."""
    return {
        "id": str(row.id),
        "kind": row.kind,
        "state": row.state,
        "attempts": row.attempts,
        "max_attempts": row.max_attempts,
        "last_error": row.last_error,
        "scheduled_at": _iso(row.scheduled_at),
        "updated_at": _iso(row.updated_at),
        "label": label(row),
    }


def page_id_of(payload: Any) -> str | None:
    """The `page_id` of an `analyze_page` payload when it is a UUID, else `None`."""
    if not isinstance(payload, dict) or payload.get("kind") != KIND_ANALYZE_PAGE:
        return None
    try:
        return str(uuid.UUID(str(payload.get("page_id"))))
    except ValueError:
        return None


def get_job(conn: Conn, job_id: uuid.UUID) -> dict[str, Any]:
    """The job's view: the listing's fields plus `payload`, `created_at`,
    `leased_until` (set while running: when its lease expires unless renewed),
    `stopped_early` (a dead job with attempts left: why it stopped, `stopped_early`),
    `leased_by` (the runner that leased it last: while running, the one holding
    it; `None` if never leased by a named runner), and `page_id` (`analyze_page`
    only, else `None`). `NotFound` for an unknown id."""
    one = select(*jobs.c, KIND.label("kind")).where(jobs.c.id == job_id).cte("one")
    row = conn.execute(with_labels(one).add_columns(one.c.payload)).first()
    if row is None:
        raise NotFound(f"no job {job_id}")
    return {
        **job_summary(row),
        "payload": row.payload,
        "created_at": _iso(row.created_at),
        "leased_until": _iso(row.leased_until),
        "leased_by": row.leased_by,
        "page_id": page_id_of(row.payload),
        "stopped_early": stopped_early(row.state, row.attempts, row.max_attempts, row.last_error),
    }


def stopped_early(
    state: str, attempts: int, max_attempts: int, last_error: str | None
) -> str | None:
    """Why a dead job with attempts left ended early: `discarded` (by an admin while
    pending), `crash_loop` (it kept crashing its worker) or `permanent_error` (one no
    retry can fix); `None` for any other job."""
    if state != "dead" or attempts >= max_attempts:
        return None
    if last_error == DISCARDED_ERROR:
        return "discarded"
    if last_error == CRASH_LOOP_ERROR:
        return "crash_loop"
    return "permanent_error"


def discard_job(conn: Conn, job_id: uuid.UUID, *, who: str = "an admin") -> dict[str, Any]:
    """Discard a pending job: it ends `dead` (through the queue's one writer of
    ends, `discard_pending`) with `last_error` saying so, and a page's
    `page_analysis.error` records it as a worker's failure would; it never runs
    and Retry can still bring it back. Fenced on `state = 'pending'`: `Conflict`
    when the job is not pending (a worker took it meanwhile), `NotFound` for an
    unknown id."""
    discarded = discard_pending(conn, [job_id], DISCARDED_ERROR)
    if not discarded:
        current = conn.execute(select(jobs.c.state).where(jobs.c.id == job_id)).scalar_one_or_none()
        if current is None:
            raise NotFound(f"no job {job_id}")
        raise Conflict(
            f"job {job_id} is {current}, not pending; only pending jobs can be discarded"
        )
    for _, data in discarded:
        payload = decode_payload(data)
        if isinstance(payload, AnalyzePage):
            save_failed(conn, payload.page_id, DISCARDED_ERROR, model="", duration_ms=0)
    logger.info("job %s discarded by %s: pending -> dead", job_id, who)
    return {"id": str(job_id), "state": "dead"}
