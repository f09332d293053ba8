"""Browsing the library: mangas -> chapters -> pages, each with its analysis progress,
and one page's view (its analysis, its jobs) and image.

A page is in exactly one of four states, first match wins: `queued` (an
`analyze_page` job for it is pending or running), `analysed` (its analysis is
`done`), `failed` (its analysis failed, or a job for it is dead),
`never_requested`. A chapter's or a
manga's `progress` counts its pages by state.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import uuid
from typing import Any, Final, cast

from sqlalchemy import ColumnElement, Table, Text, case, exists, func, select, tuple_
from sqlalchemy import cast as sql_cast

from manga_page_analysis.admin.jobs import job_summary
from manga_page_analysis.admin.labels import chapter_number_text, with_labels
from manga_page_analysis.admin.queries import get_page_analysis, parse_limit
from manga_page_analysis.db import Conn
from manga_page_analysis.errors import BadRequest, NotFound, StorageError, UnsupportedImage
from manga_page_analysis.models import Chapter, Manga, Page, PageAnalysis
from manga_page_analysis.queue.payloads import KIND_ANALYZE_PAGE
from manga_page_analysis.queue.table import KIND, jobs, payload_field, text_literal
from manga_page_analysis.storage import Storage

logger = logging.getLogger(__name__)

PAGE_STATES: Final = ("analysed", "failed", "queued", "never_requested")
"""What a page's `status` can be, and the keys of every `progress`."""

PAGE_JOBS_LIMIT: Final = 50
"""How many of a page's jobs its view lists, newest first."""

IMAGE_TYPES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)
"""Magic numbers of the image formats served as such (WebP is checked apart): those a
browser shows, which are those `add_page` takes."""

pages = cast(Table, Page.__table__)
chapters = cast(Table, Chapter.__table__)
mangas = cast(Table, Manga.__table__)
analyses = cast(Table, PageAnalysis.__table__)


def _queued() -> ColumnElement[bool]:
    # Spelled like the dedup slot's partial unique index, so this is one index probe.
    return exists().where(
        KIND == text_literal(KIND_ANALYZE_PAGE),  # noqa: SIM300  (as the index spells it)
        jobs.c.state.in_([text_literal("pending"), text_literal("running")]),
        payload_field("page_id") == sql_cast(pages.c.id, Text),
    )


def _dead() -> ColumnElement[bool]:
    # A job that died without an analysis row: a payload nobody could read, or
    # one ended by `jobs reclaim` (its end is the row alone), or from before
    # every end was recorded. The page was requested and failed. The page_id index.
    return exists().where(
        KIND == text_literal(KIND_ANALYZE_PAGE),  # noqa: SIM300  (as the index spells it)
        payload_field("page_id") == sql_cast(pages.c.id, Text),
        jobs.c.state == text_literal("dead"),
    )


def _status() -> ColumnElement[str]:
    return case(
        (_queued(), "queued"),
        (analyses.c.status == "done", "analysed"),
        (analyses.c.status == "failed", "failed"),
        (_dead(), "failed"),
        else_="never_requested",
    )


def _page_states() -> Any:
    """Every page with its chapter, manga and state (a subquery to aggregate over)."""
    return (
        select(
            pages.c.id,
            pages.c.number,
            pages.c.chapter_id,
            chapters.c.manga_id,
            _status().label("status"),
        )
        .join(chapters, chapters.c.id == pages.c.chapter_id)
        .outerjoin(analyses, analyses.c.page_id == pages.c.id)
        .subquery("page_states")
    )


def _progress_columns(states: Any) -> list[Any]:
    return [
        func.count(states.c.id).filter(states.c.status == state).label(state)
        for state in PAGE_STATES
    ]


def _progress(row: Any) -> dict[str, int]:
    return {state: int(getattr(row, state) or 0) for state in PAGE_STATES}


def _encode(position: list[str]) -> str:
    raw = json.dumps(position, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_manga_cursor(cursor: str) -> tuple[str, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        title, manga_id = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        return str(title), uuid.UUID(manga_id)
    except (ValueError, TypeError, AttributeError, binascii.Error, UnicodeError):
        raise BadRequest("cursor is not one this API issued") from None


def list_mangas(conn: Conn, *, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
    """`{"mangas": [...], "next_cursor"}`: mangas by title (then id), each with
    its numbers of chapters and pages and its `progress`."""
    limit = parse_limit(limit)
    conditions = []
    if cursor:
        title, manga_id = _decode_manga_cursor(cursor)
        conditions.append(tuple_(mangas.c.title, mangas.c.id) > tuple_(title, manga_id))
    page = (
        select(mangas.c.id, mangas.c.title)
        .where(*conditions)
        .order_by(mangas.c.title, mangas.c.id)
        .limit(limit + 1)
        .subquery("manga_page")
    )
    states = _page_states()
    chapter_count = (
        select(func.count())
        .select_from(chapters)
        .where(chapters.c.manga_id == page.c.id)
        .scalar_subquery()
    )
    statement = (
        select(
            page.c.id,
            page.c.title,
            chapter_count.label("chapters"),
            func.count(states.c.id).label("pages"),
            *_progress_columns(states),
        )
        .select_from(page)
        .outerjoin(states, states.c.manga_id == page.c.id)
        .group_by(page.c.id, page.c.title)
        .order_by(page.c.title, page.c.id)
    )
    rows = conn.execute(statement).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return {
        "mangas": [
            {
                "id": str(row.id),
                "title": row.title,
                "chapters": int(row.chapters),
                "pages": int(row.pages),
                "progress": _progress(row),
            }
            for row in rows
        ],
        "next_cursor": _encode([rows[-1].title, str(rows[-1].id)]) if more else None,
    }


def get_manga(conn: Conn, manga_id: uuid.UUID) -> dict[str, Any]:
    """The manga and its chapters in order, each with its pages' `progress`."""
    manga = conn.execute(select(mangas).where(mangas.c.id == manga_id)).first()
    if manga is None:
        raise NotFound(f"no manga {manga_id}")
    states = _page_states()
    statement = (
        select(
            chapters.c.id,
            chapters.c.number,
            chapters.c.title,
            func.count(states.c.id).label("pages"),
            *_progress_columns(states),
        )
        .outerjoin(states, states.c.chapter_id == chapters.c.id)
        .where(chapters.c.manga_id == manga_id)
        .group_by(chapters.c.id, chapters.c.number, chapters.c.title)
        .order_by(chapters.c.number, chapters.c.id)
    )
    return {
        "id": str(manga.id),
        "title": manga.title,
        "chapters": [
            {
                "id": str(row.id),
                "number": chapter_number_text(row.number),
                "title": row.title,
                "pages": int(row.pages),
                "progress": _progress(row),
            }
            for row in conn.execute(statement)
        ],
    }


def get_chapter(conn: Conn, chapter_id: uuid.UUID) -> dict[str, Any]:
    """The chapter, its manga, its pages in order with each one's `status`, and its `progress`."""
    chapter = conn.execute(
        select(chapters, mangas.c.title.label("manga_title"))
        .join(mangas, mangas.c.id == chapters.c.manga_id)
        .where(chapters.c.id == chapter_id)
    ).first()
    if chapter is None:
        raise NotFound(f"no chapter {chapter_id}")
    states = _page_states()
    rows = conn.execute(
        select(states.c.id, states.c.number, states.c.status)
        .where(states.c.chapter_id == chapter_id)
        .order_by(states.c.number, states.c.id)
    ).all()
    progress = dict.fromkeys(PAGE_STATES, 0)
    for row in rows:
        progress[row.status] += 1
    return {
        "id": str(chapter.id),
        "number": chapter_number_text(chapter.number),
        "title": chapter.title,
        "manga": {"id": str(chapter.manga_id), "title": chapter.manga_title},
        "progress": progress,
        "pages": [{"id": str(row.id), "number": row.number, "status": row.status} for row in rows],
    }


def _neighbour(conn: Conn, chapter_id: uuid.UUID, number: int, *, after: bool) -> str | None:
    column = pages.c.number
    statement = (
        select(pages.c.id)
        .where(pages.c.chapter_id == chapter_id, column > number if after else column < number)
        .order_by(column if after else column.desc())
        .limit(1)
    )
    found = conn.execute(statement).scalar_one_or_none()
    return None if found is None else str(found)


def get_page(conn: Conn, page_id: uuid.UUID) -> dict[str, Any]:
    """The page's view: where it belongs, its `status`, the previous and next page
    of its chapter, its `analysis` (as `GET api/pages/<id>/analysis`, or `None`)
    and its `jobs` (`analyze_page` jobs, newest first, at most 50)."""
    row = conn.execute(
        select(
            pages.c.id,
            pages.c.number,
            pages.c.content_type,
            pages.c.chapter_id,
            chapters.c.number.label("chapter_number"),
            chapters.c.title.label("chapter_title"),
            chapters.c.manga_id,
            mangas.c.title.label("manga_title"),
            _status().label("status"),
        )
        .join(chapters, chapters.c.id == pages.c.chapter_id)
        .join(mangas, mangas.c.id == chapters.c.manga_id)
        .outerjoin(analyses, analyses.c.page_id == pages.c.id)
        .where(pages.c.id == page_id)
    ).first()
    if row is None:
        raise NotFound(f"no page {page_id}")
    try:
        analysis: dict[str, Any] | None = get_page_analysis(conn, page_id)
    except NotFound:
        analysis = None
    return {
        "id": str(row.id),
        "number": row.number,
        "content_type": row.content_type,
        "status": row.status,
        "chapter": {
            "id": str(row.chapter_id),
            "number": chapter_number_text(row.chapter_number),
            "title": row.chapter_title,
        },
        "manga": {"id": str(row.manga_id), "title": row.manga_title},
        "previous_page_id": _neighbour(conn, row.chapter_id, row.number, after=False),
        "next_page_id": _neighbour(conn, row.chapter_id, row.number, after=True),
        "analysis": analysis,
        "jobs": page_jobs(conn, page_id),
    }


def page_jobs(conn: Conn, page_id: uuid.UUID, limit: int = PAGE_JOBS_LIMIT) -> list[dict[str, Any]]:
    """The page's `analyze_page` jobs, newest first, as the listing shows them."""
    recent = (
        select(*jobs.c, KIND.label("kind"))
        .where(
            KIND == text_literal(KIND_ANALYZE_PAGE),  # noqa: SIM300  (as the index spells it)
            payload_field("page_id") == str(page_id),
        )
        .order_by(jobs.c.created_at.desc(), jobs.c.id.desc())
        .limit(limit)
        .cte("recent")
    )
    # with_labels orders by updated_at; the history reads by creation.
    rows = sorted(
        conn.execute(with_labels(recent)), key=lambda job: (job.created_at, job.id), reverse=True
    )
    return [{**job_summary(job), "created_at": job.created_at.isoformat()} for job in rows]


def sniff_image_type(data: bytes) -> str | None:
    """The image type `data` starts like (PNG, JPEG, GIF, WebP), else `None`."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for magic, content_type in IMAGE_TYPES:
        if data.startswith(magic):
            return content_type
    return None


def page_image_key(conn: Conn, page_id: uuid.UUID) -> str:
    """The storage key of the page's image; `NotFound` for an unknown page."""
    key = conn.execute(select(pages.c.storage_key).where(pages.c.id == page_id)).scalar()
    if key is None:
        raise NotFound(f"no page {page_id}")
    return str(key)


def read_page_image(
    storage: Storage, page_id: uuid.UUID, key: str, *, max_bytes: int
) -> tuple[bytes, str]:
    """The image under `key` (the page's) and its content type, read from `storage`
    (at most `max_bytes`). The type comes from the bytes, not from `pages.content_type`,
    and only a format a browser shows is served: anything else (a host's TIFF, an
    HTML file under a page's key) is `UnsupportedImage`, never bytes a browser might
    sniff. `NotFound` for a missing, unreadable or oversized image."""
    try:
        data = storage.read_bytes(key, max_bytes)
    except StorageError as exc:
        # The reason is logged, not answered: it names the storage key.
        logger.warning("admin API: image of page %s not served: %s", page_id, exc)
        raise NotFound(f"the image of page {page_id} is missing or cannot be read") from None
    content_type = sniff_image_type(data)
    if content_type is None:
        logger.warning(
            "admin API: image of page %s not served: not a format browsers show", page_id
        )
        raise UnsupportedImage(
            f"the image of page {page_id} is not in a format a browser shows "
            "(PNG, JPEG, GIF, WebP, BMP)"
        )
    return data, content_type


def get_page_image(
    conn: Conn, storage: Storage, page_id: uuid.UUID, *, max_bytes: int
) -> tuple[bytes, str]:
    """`read_page_image` of the page's key (`page_image_key`), in one call."""
    return read_page_image(storage, page_id, page_image_key(conn, page_id), max_bytes=max_bytes)


__all__ = [
    "PAGE_STATES",
    "get_chapter",
    "get_manga",
    "get_page",
    "get_page_image",
    "list_mangas",
    "page_image_key",
    "page_jobs",
    "read_page_image",
    "sniff_image_type",
]
