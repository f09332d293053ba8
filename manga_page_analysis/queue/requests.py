"""Asking for pages to be analysed (`analyze_page` jobs), many at once or one.
The queue knows a page as a payload's `page_id`, and here only as a row that
must exist in `pages` for its job to be queued. Nothing here commits."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from manga_page_analysis.db import Conn
from manga_page_analysis.dberrors import outage_raises_unavailable
from manga_page_analysis.errors import NoSuchPage, NotAPageId
from manga_page_analysis.queue.payloads import AnalyzePage
from manga_page_analysis.queue.states import release_unowned_many
from manga_page_analysis.queue.table import run
from manga_page_analysis.schema_errors import tells_missing_tables

logger = logging.getLogger(__name__)

BATCH_SIZE: Final = 1000
"""Pages per request statement (and per transaction of the CLI's `analyze`)."""

_RACE_RETRIES: Final = 3
"""An in-flight job can finish between our insert and our look-up; try again."""

# `enqueue_many`'s statement with the page check in it: a job is inserted only
# when every page asked for exists, so an unknown id queues nothing and costs
# no round trip of its own. Rows come back for the unknown pages (`known` false)
# and for the inserted jobs; a known page with neither was skipped by dedup.
# One probe of the primary key per page (LATERAL ... LIMIT 1): an EXISTS here
# is planned as a hashed subplan, a scan of every page on each call.
# The pages are not locked: one deleted meanwhile gets a job that finds no page
# and ends `done`, as when a page goes after its job was queued.
_ENQUEUE_KNOWN: Final = """
    WITH v AS MATERIALIZED (
        SELECT gen_random_uuid() AS id, payload, n, page.id IS NOT NULL AS known
        FROM jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS v(payload, n)
        LEFT JOIN LATERAL (
            SELECT pages.id FROM <<pages>> WHERE pages.id = (v.payload ->> 'page_id')::uuid LIMIT 1
        ) AS page ON true
    ), inserted AS (
        INSERT INTO <<crawler_jobs>> (id, payload)
        SELECT id, payload FROM v WHERE NOT EXISTS (SELECT FROM v WHERE NOT known) ORDER BY n
        ON CONFLICT DO NOTHING RETURNING id
    )
    SELECT v.n, v.known, inserted.id FROM v LEFT JOIN inserted ON inserted.id = v.id
    WHERE inserted.id IS NOT NULL OR NOT v.known
"""

# One probe of the in-flight index per page (LATERAL ... LIMIT 1 keeps the
# planner from hashing the whole in-flight set). Nothing is locked here: a
# job that finishes meanwhile was still the job that analysed the page.
_IN_FLIGHT: Final = """
    SELECT wanted.page_id, in_flight.id, in_flight.state, in_flight.forced
    FROM unnest(%(page_ids)s::text[]) AS wanted(page_id)
    CROSS JOIN LATERAL (
        SELECT id, state, payload ->> 'force' = 'true' AS forced FROM <<crawler_jobs>>
        WHERE payload ->> 'kind' = 'analyze_page' AND payload ->> 'page_id' = wanted.page_id
          AND state IN ('pending', 'running')
        LIMIT 1
    ) AS in_flight
"""

# Only while still in flight (checked again under the row's lock), and in id
# order like every batch, so it never deadlocks with the acker.
_FORCE: Final = (
    "UPDATE <<crawler_jobs>> SET payload = payload || '{\"force\": true}'::jsonb, "
    "updated_at = now() WHERE id = ANY(%(ids)s::uuid[]) AND state IN ('pending', 'running') "
    "RETURNING id, state"
)


@dataclass(frozen=True)
class Requested:
    """What a request for many pages did."""

    job_ids: list[uuid.UUID | None]
    """Per page asked for, in order: the job that will analyse it (new, or the
    one already in flight), or `None` if none could be enqueued or found."""
    enqueued: int
    """New jobs."""
    in_flight: int
    """Pages that already had a job pending or running (dedup); with `force`,
    that job was marked forced instead."""


@outage_raises_unavailable
@tells_missing_tables
def request_analysis_many(
    conn: Conn, page_ids: Sequence[uuid.UUID], *, force: bool = False
) -> Requested:
    """Enqueue an `analyze_page` job for each page, in one statement per try.

    A page with a job already pending or running gets no second one: that
    job's id is its answer. With `force`, that job's payload gets
    `force: true`, and a running one is released (attempt refunded) so it
    restarts with the new payload; the old holder's result is then fenced
    off. `NoSuchPage` (naming them) when some ids are no page: then nothing
    is queued or forced, and the transaction stays usable. `NotAPageId` when
    an id is neither a `uuid.UUID` nor its text, before any statement.
    """
    page_ids = [_page_id(page_id) for page_id in page_ids]
    job_of: dict[uuid.UUID, uuid.UUID] = {}
    enqueued = in_flight = 0
    todo = list(dict.fromkeys(page_ids))
    for _ in range(_RACE_RETRIES):
        if not todo:
            break
        job_ids = _enqueue_known(conn, todo, force=force)
        new = {page: job for page, job in zip(todo, job_ids, strict=True) if job is not None}
        job_of.update(new)
        enqueued += len(new)
        skipped = [page_id for page_id in todo if page_id not in new]
        found = _in_flight(conn, skipped, force=force)
        in_flight += len(found)
        job_of.update(found)
        todo = [page_id for page_id in skipped if page_id not in found]
    for page_id in todo:
        logger.warning("could not enqueue or find an analyze_page job for page %s", page_id)
    return Requested([job_of.get(page_id) for page_id in page_ids], enqueued, in_flight)


def request_analysis(conn: Conn, page_id: uuid.UUID, force: bool = False) -> uuid.UUID | None:
    """`request_analysis_many` for one page: the id of the job that will analyse it."""
    return request_analysis_many(conn, [page_id], force=force).job_ids[0]


def _page_id(value: object) -> uuid.UUID:
    """`value` as a UUID: one already, or its text (as a host's form or URL gives it)."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise NotAPageId(value)


def _enqueue_known(conn: Conn, page_ids: list[uuid.UUID], *, force: bool) -> list[uuid.UUID | None]:
    """Per page, in order, its new job's id or `None` (dedup skipped it);
    `NoSuchPage` instead, having inserted nothing, when some are no page."""
    payloads = (AnalyzePage(page_id=page_id, force=force).model_dump_json() for page_id in page_ids)
    rows = run(conn, _ENQUEUE_KNOWN, {"payloads": "[" + ",".join(payloads) + "]"}).all()
    unknown = sorted(ordinal for ordinal, known, _ in rows if not known)
    if unknown:
        raise NoSuchPage([page_ids[ordinal - 1] for ordinal in unknown])
    job_ids: list[uuid.UUID | None] = [None] * len(page_ids)
    for ordinal, _, job_id in rows:
        job_ids[ordinal - 1] = job_id
    return job_ids


def _in_flight(conn: Conn, page_ids: list[uuid.UUID], *, force: bool) -> dict[uuid.UUID, uuid.UUID]:
    """The in-flight job of each page that has one; with `force`, marked forced,
    and released if running (the rule is here only). A job to force that
    finished meanwhile is left out, so its page is requested anew."""
    if not page_ids:
        return {}
    by_text = {str(page_id): page_id for page_id in page_ids}
    found = {row.id: row for row in run(conn, _IN_FLIGHT, {"page_ids": list(by_text)})}
    to_force = sorted(job_id for job_id, row in found.items() if force and not row.forced)
    if to_force:
        forced = {job_id: state for job_id, state in run(conn, _FORCE, {"ids": to_force})}
        for job_id in set(to_force) - set(forced):
            del found[job_id]
        running = [job_id for job_id, state in forced.items() if state == "running"]
        for job_id in release_unowned_many(conn, running):
            logger.info(
                "job %s for page %s was running; released to restart as forced",
                job_id,
                found[job_id].page_id,
            )
    return {by_text[row.page_id]: job_id for job_id, row in found.items()}
