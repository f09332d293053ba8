"""Asking for a page to be analysed, from a host's request handler or a crawler."""

from __future__ import annotations

import logging
import uuid
from typing import Final

from sqlalchemy import func, literal_column, select, update

from app.queue.jobs import (
    KIND,
    RUNNING,
    Conn,
    enqueue,
    jobs,
    payload_field,
    release_unowned,
    text_literal,
)
from app.queue.payloads import KIND_ANALYZE_PAGE, AnalyzePage

logger = logging.getLogger(__name__)

_RACE_RETRIES: Final = 3
"""The in-flight job can finish between our insert and our look-up; try again."""


def request_analysis(conn: Conn, page_id: uuid.UUID, force: bool = False) -> uuid.UUID | None:
    """Enqueue an `analyze_page` job for `page_id` and return the id of the job
    that will analyse it.

    When a job is already pending or running for the page, its id is returned;
    with `force`, that job's payload gets `force: true`, and a running one is
    released (attempt refunded) so it restarts with the new payload; the old
    holder's result is then fenced off. Never commits.
    """
    for _ in range(_RACE_RETRIES):
        job_id = enqueue(conn, AnalyzePage(page_id=page_id, force=force))
        if job_id is not None:
            return job_id
        existing = conn.execute(
            select(jobs.c.id, jobs.c.state, jobs.c.payload)
            .where(
                text_literal(KIND_ANALYZE_PAGE) == KIND,
                payload_field("page_id") == str(page_id),
                jobs.c.state.in_([text_literal("pending"), RUNNING]),
            )
            .with_for_update()
        ).first()
        if existing is None:
            continue
        if force and not existing.payload.get("force"):
            conn.execute(
                update(jobs)
                .where(jobs.c.id == existing.id)
                .values(
                    payload=jobs.c.payload.op("||")(literal_column("""'{"force": true}'::jsonb""")),
                    updated_at=func.now(),
                )
            )
            if existing.state == "running":
                release_unowned(conn, existing.id)
                logger.info(
                    "job %s for page %s was running; released to restart as forced",
                    existing.id,
                    page_id,
                )
        return uuid.UUID(str(existing.id))
    logger.warning("could not enqueue or find an analyze_page job for page %s", page_id)
    return None
