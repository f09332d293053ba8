"""Requesting analysis of many pages at once: a chapter, a manga, or every page
that has no usable analysis yet (`analyze --missing`).

Every function takes `conn` first and never commits: the caller commits once
per batch, so a long run over tens of thousands of pages keeps its
transactions short and an interrupted run keeps what it enqueued (running it
again skips those pages: dedup).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from sqlalchemy import ColumnElement, exists, func, select, text

from app.errors import ServiceError
from app.models import Chapter, Manga, Page, PageAnalysis
from app.queue.batch import enqueue_many
from app.queue.jobs import Conn, release_unowned
from app.queue.payloads import AnalyzePage

logger = logging.getLogger(__name__)

BATCH_SIZE: Final = 1000
"""Pages per enqueue statement (and per transaction of the CLI)."""

Target = Literal["page", "chapter", "manga"]


class NoSuchTarget(ServiceError):
    """The page, chapter or manga asked for does not exist."""

    retryable = False


@dataclass
class RequestCounts:
    """What a request for many pages did. `skipped` = `in_flight` + `already_done`."""

    enqueued: int = 0
    in_flight: int = 0
    """A job was already pending or running for the page (dedup); with `force`,
    that job was marked forced instead."""
    already_done: int = 0
    """The page has a done analysis and `force` was not given."""

    @property
    def skipped(self) -> int:
        return self.in_flight + self.already_done

    def add(self, other: RequestCounts) -> None:
        self.enqueued += other.enqueued
        self.in_flight += other.in_flight
        self.already_done += other.already_done


def target_page_ids(conn: Conn, target: Target, target_id: uuid.UUID) -> list[uuid.UUID]:
    """The pages of a page, chapter or manga, in reading order.

    `NoSuchTarget` ("no such chapter <id>") when the row does not exist; a
    chapter or manga without pages gives `[]`.
    """
    key = {"page": Page.id, "chapter": Chapter.id, "manga": Manga.id}[target]
    if conn.execute(select(key).where(key == target_id)).first() is None:
        raise NoSuchTarget(f"no such {target} {target_id}")
    if target == "page":
        return [target_id]
    statement = select(Page.id).join(Chapter, Chapter.id == Page.chapter_id)
    if target == "chapter":
        statement = statement.where(Page.chapter_id == target_id)
    else:
        statement = statement.where(Chapter.manga_id == target_id)
    statement = statement.order_by(Chapter.number, Page.number, Page.id)
    return list(conn.execute(statement).scalars())


def _missing() -> list[ColumnElement[bool]]:
    done = exists().where(PageAnalysis.page_id == Page.id, PageAnalysis.status == "done")
    return [~done]


def count_missing(conn: Conn) -> int:
    """Pages with no `done` analysis: never analysed, or whose analysis failed."""
    return int(conn.execute(select(func.count()).select_from(Page).where(*_missing())).scalar_one())


def missing_page_ids(
    conn: Conn, *, after: uuid.UUID | None = None, limit: int = BATCH_SIZE
) -> list[uuid.UUID]:
    """The next `limit` pages (by id, after `after`) with no `done` analysis.

    Keyset pagination: pass the last id of one batch as `after` for the next,
    so pages enqueued meanwhile (still without a done analysis) are not seen twice.
    """
    statement = select(Page.id).where(*_missing())
    if after is not None:
        statement = statement.where(Page.id > after)
    return list(conn.execute(statement.order_by(Page.id).limit(limit)).scalars())


def request_many(
    conn: Conn, page_ids: Sequence[uuid.UUID], *, force: bool = False
) -> RequestCounts:
    """Enqueue `analyze_page` jobs for `page_ids` (existing pages) in one statement.

    Dedup is respected: a page with a job already pending or running gets no
    second one (with `force`, that job is marked forced, as `request_analysis`
    does). Without `force`, pages whose analysis is done are skipped: their
    job would do nothing.
    """
    counts = RequestCounts()
    wanted = list(dict.fromkeys(page_ids))
    if not wanted:
        return counts
    if not force:
        done = set(
            conn.execute(
                select(PageAnalysis.page_id).where(
                    PageAnalysis.page_id.in_(wanted), PageAnalysis.status == "done"
                )
            ).scalars()
        )
        counts.already_done = len(done)
        wanted = [page_id for page_id in wanted if page_id not in done]
    enqueued = _insert_jobs(conn, wanted, force=force)
    counts.enqueued = len(enqueued)
    skipped = [page_id for page_id in wanted if page_id not in enqueued]
    counts.in_flight = len(skipped)
    if force and skipped:
        _force_in_flight(conn, skipped)
    return counts


def _force_in_flight(conn: Conn, page_ids: list[uuid.UUID]) -> None:
    """What `request_analysis(..., force=True)` does to a job already in flight, for
    many pages in one statement: mark it forced, and give a running one back
    (attempt refunded) so it restarts as forced."""
    rows = conn.execute(_FORCE_IN_FLIGHT, {"ids": [str(page_id) for page_id in page_ids]})
    for job_id, state in rows:
        if state == "running":
            release_unowned(conn, job_id)
            logger.info("job %s was running; released to restart as forced", job_id)


def _insert_jobs(conn: Conn, page_ids: list[uuid.UUID], *, force: bool) -> set[uuid.UUID]:
    """The pages that got a new job (one `enqueue_many` statement; dedup skips the rest)."""
    payloads = [AnalyzePage(page_id=page_id, force=force) for page_id in page_ids]
    job_ids = enqueue_many(conn, payloads)
    return {page_id for page_id, job_id in zip(page_ids, job_ids, strict=True) if job_id}


# One probe of the in-flight index per page (LATERAL ... LIMIT 1 keeps the planner
# from hashing the whole in-flight set), whatever the queue's size and statistics.
_FORCE_IN_FLIGHT = text(
    """
    UPDATE crawler_jobs AS job
    SET payload = job.payload || '{"force": true}'::jsonb, updated_at = now()
    FROM unnest(CAST(:ids AS text[])) AS wanted(page_id)
    CROSS JOIN LATERAL (
        SELECT id FROM crawler_jobs
        WHERE payload ->> 'page_id' = wanted.page_id
          AND payload ->> 'kind' = 'analyze_page' AND state IN ('pending', 'running')
        LIMIT 1
    ) AS in_flight
    WHERE job.id = in_flight.id AND job.payload ->> 'force' IS DISTINCT FROM 'true'
    RETURNING job.id, job.state
    """
)
