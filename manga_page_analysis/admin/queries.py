"""Admin queries and actions: job listing, input parsing, page analysis.

Every returned dict is JSON-ready (UUIDs as str, times ISO 8601 with an offset)
and is exactly the body of the matching admin route (the CLI's `--json` prints
it too). Bad input raises `BadRequest` (an `AdminError`: it carries its HTTP status).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime
from typing import Any, Final, cast

from sqlalchemy import ColumnElement, Select, Table, or_, select, tuple_, union_all

from manga_page_analysis.admin.labels import label, with_labels
from manga_page_analysis.admin.request_json import parse_json
from manga_page_analysis.admin.retry import check_kind
from manga_page_analysis.db import Conn
from manga_page_analysis.errors import BadRequest, Conflict, NoSuchPage, NotFound
from manga_page_analysis.models import JOB_STATES, PageAnalysis
from manga_page_analysis.queue.requests import request_analysis
from manga_page_analysis.queue.stats import UNKNOWN_KIND
from manga_page_analysis.queue.table import KIND, jobs, payload_field, text_literal

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
MAX_LIMIT_DIGITS: Final = 9
"""A `limit` string longer than this is refused unread (leading zeros are fine)."""
MAX_CURSOR_CHARS: Final = 256
"""A cursor this API issues is about 110 characters; a longer one is refused unread."""


def parse_uuid(value: str, what: str = "id") -> uuid.UUID:
    """`value` as a UUID; `BadRequest` naming `what` when it is not one."""
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        raise BadRequest(f"{what} is not a valid UUID: {str(value)[:80]!r}") from None


def parse_limit(value: str | int | None) -> int:
    """A page size in 1..500; `None` or `""` means the default, 50. A string must be
    plain ASCII digits (not `+5`, ` 5`, `5_0` or `٥`, which `int()` would take).
    Anything else: `BadRequest`."""
    if value is None or value == "":
        return DEFAULT_LIMIT
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit() and len(value) <= MAX_LIMIT_DIGITS):
            raise BadRequest(f"limit must be an integer from 1 to {MAX_LIMIT}")
        limit = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        limit = value
    else:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_LIMIT}")
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit}")
    return limit


def parse_force_body(raw: bytes) -> bool:
    """`force` from the optional JSON body `{"force": bool}` of a request for
    analysis; an empty body means `False`. Anything else: `BadRequest`."""
    if not raw.strip():
        return False
    body = parse_json(raw, what='the body ({"force": true|false})')
    if not isinstance(body, dict):
        raise BadRequest('the body must be a JSON object: {"force": true|false}')
    unknown = set(body) - {"force"}
    if unknown:
        raise BadRequest(f"unknown field(s) in the body: {', '.join(sorted(unknown))}")
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise BadRequest("force must be true or false")
    return force


def encode_cursor(updated_at: datetime, job_id: uuid.UUID) -> str:
    """The opaque cursor that continues a listing after the job `(updated_at, id)`."""
    raw = json.dumps({"u": updated_at.isoformat(), "i": str(job_id)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The position a cursor stands for; `BadRequest` for anything this module did not make
    (extra keys included)."""
    not_issued = BadRequest("cursor is not one this API issued")
    if len(cursor) > MAX_CURSOR_CHARS:
        raise not_issued
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.urlsafe_b64decode(padded.encode("ascii"))
    except (ValueError, binascii.Error, UnicodeError):
        raise not_issued from None
    try:
        data = parse_json(raw, what="cursor")
    except BadRequest:
        raise not_issued from None
    if not isinstance(data, dict) or set(data) != {"u", "i"}:
        raise not_issued
    try:
        updated_at = datetime.fromisoformat(data["u"])
        job_id = uuid.UUID(data["i"])
    except (ValueError, TypeError, AttributeError):
        raise not_issued from None
    if updated_at.tzinfo is None:
        raise not_issued
    return updated_at, job_id


def list_jobs(
    conn: Conn,
    *,
    state: str | None = None,
    kind: str | None = None,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
) -> dict[str, Any]:
    """One page of jobs, newest `updated_at` first (ties by id, descending).

    Returns `{"jobs": [...], "next_cursor": str | None}`; pass `next_cursor`
    back as `cursor` for the next page (`None`: this was the last). Each job
    carries a human `label` (`manga_page_analysis.admin.labels`; `None` when nothing is known).
    An unknown `state`, a bad `limit` or a cursor this API did not issue raise
    `BadRequest`. `kind` is any string (hosts run kinds of their own); `unknown`
    also lists the rows with no kind, which `queue_stats` counts under it.
    """
    if state is not None and state not in JOB_STATES:
        raise BadRequest(f"state must be one of {', '.join(JOB_STATES)}")
    check_kind(kind)
    limit = parse_limit(limit)
    position = decode_cursor(cursor) if cursor else None

    conditions: list[ColumnElement[bool]] = []
    row_kind = payload_field("kind")
    if kind == UNKNOWN_KIND:
        # The stats' bucket: rows with no kind at all count there, so they list here.
        conditions.append(or_(row_kind == kind, row_kind.is_(None)))
    elif kind is not None:
        conditions.append(row_kind == kind)
    if position is not None:
        conditions.append(tuple_(jobs.c.updated_at, jobs.c.id) < tuple_(*position))

    def newest(of_state: str) -> Select[Any]:
        # One more row than asked tells whether another page exists. A literal
        # state (so the planner can match the partial indexes of migration
        # 0010): each branch walks its own range of (state, updated_at, id),
        # or of (state, kind, updated_at, id) for dead rows, and stops after
        # limit + 1 rows; the few running rows are read whole and sorted.
        return (
            select(*jobs.c, KIND.label("kind"))
            .where(jobs.c.state == text_literal(of_state), *conditions)
            .order_by(jobs.c.updated_at.desc(), jobs.c.id.desc())
            .limit(limit + 1)
        )

    if state is not None:
        page = newest(state).cte("page")
    else:
        # Every state: the newest of each state, merged (no index leads with updated_at).
        merged = union_all(*(newest(each) for each in JOB_STATES)).subquery("merged")
        page = (
            select(merged)
            .order_by(merged.c.updated_at.desc(), merged.c.id.desc())
            .limit(limit + 1)
            .cte("page")
        )
    rows = conn.execute(with_labels(page)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(rows[-1].updated_at, rows[-1].id) if more else None
    return {
        "jobs": [
            {
                "id": str(row.id),
                "kind": row.kind,
                "state": row.state,
                "attempts": row.attempts,
                "max_attempts": row.max_attempts,
                "last_error": row.last_error,
                "scheduled_at": row.scheduled_at.isoformat(),
                "updated_at": row.updated_at.isoformat(),
                "label": label(row),
            }
            for row in rows
        ],
        "next_cursor": next_cursor,
    }


def get_page_analysis(conn: Conn, page_id: uuid.UUID) -> dict[str, Any]:
    """The page's latest analysis, as `GET api/pages/<id>/analysis` answers it.

    `nsfw` is `None` when no verdict was recorded (the OCR backend, a failed
    analysis). `NotFound` when the page has no analysis.
    """
    table = cast(Table, PageAnalysis.__table__)
    row = conn.execute(select(table).where(table.c.page_id == page_id)).first()
    if row is None:
        raise NotFound(f"page {page_id} has no analysis")
    nsfw = None
    if row.nsfw_rating is not None:
        score = None if row.nsfw_score is None else float(row.nsfw_score)
        nsfw = {"rating": row.nsfw_rating, "score": score}
    return {
        "page_id": str(row.page_id),
        "status": row.status,
        "ocr_text": row.ocr_text,
        "ocr_blocks": row.ocr_blocks,
        "tags": list(row.tags or []),
        "description": row.description,
        "nsfw": nsfw,
        "model": row.model,
        "duration_ms": row.duration_ms,
        "error": row.error,
        "updated_at": row.updated_at.isoformat(),
    }


def request_page_analysis(conn: Conn, page_id: uuid.UUID, *, force: bool = False) -> dict[str, Any]:
    """Ask for the page to be analysed (again, with `force`): `{"job_id": str}`.

    Dedup as `request_analysis`: a job already pending or running for the
    page is the answer (and is forced, with `force`). `NotFound` when no such
    page exists.
    """
    try:
        job_id = request_analysis(conn, page_id, force=force)
    except NoSuchPage:
        raise NotFound(f"no page {page_id}") from None
    if job_id is None:
        # request_analysis lost its insert/look-up race three times in a row.
        raise Conflict(f"could not enqueue analysis of page {page_id}; try again")
    return {"job_id": str(job_id)}
