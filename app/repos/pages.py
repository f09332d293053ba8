"""Pages repository: what the worker needs to know about a page."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import select

from app.models import Chapter, Manga, Page
from app.queue.jobs import Conn


@dataclass(frozen=True, slots=True)
class PageContext:
    """A page with its breadcrumb: the chapter and manga it belongs to."""

    page_id: uuid.UUID
    storage_key: str
    content_type: str | None
    page_number: int
    chapter_id: uuid.UUID
    chapter_number: Decimal
    manga_id: uuid.UUID
    manga_title: str


def get_page_context(conn: Conn, page_id: uuid.UUID) -> PageContext | None:
    """The page and its breadcrumb, or `None` when the page no longer exists."""
    row = conn.execute(
        select(
            Page.id,
            Page.storage_key,
            Page.content_type,
            Page.number,
            Chapter.id.label("chapter_id"),
            Chapter.number.label("chapter_number"),
            Manga.id.label("manga_id"),
            Manga.title.label("manga_title"),
        )
        .join(Chapter, Chapter.id == Page.chapter_id)
        .join(Manga, Manga.id == Chapter.manga_id)
        .where(Page.id == page_id)
    ).first()
    if row is None:
        return None
    return PageContext(
        page_id=row.id,
        storage_key=row.storage_key,
        content_type=row.content_type,
        page_number=row.number,
        chapter_id=row.chapter_id,
        chapter_number=row.chapter_number,
        manga_id=row.manga_id,
        manga_title=row.manga_title,
    )
