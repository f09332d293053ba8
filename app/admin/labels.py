"""Human labels for jobs ("Title ch. 12 p. 3"), joined onto a page of jobs in one query.

`with_labels(page)` takes a CTE of `crawler_jobs` rows (with `kind` and
`payload` columns) and joins what each payload points at; `label(row)`
renders one row of the result.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, case, literal_column, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import UUID as PG_UUID

from app.models import Chapter, Manga, Page
from app.queue.payloads import (
    KIND_ANALYZE_PAGE,
    KIND_SYNC_CHAPTER_CONTENT,
    KIND_SYNC_CHAPTER_LIST,
    KIND_SYNC_MANGA,
)
from app.queue.table import text_literal


def _uuid_or_null(text_value: ColumnElement[Any]) -> ColumnElement[Any]:
    # Payloads written by another writer may hold anything; a bad UUID must
    # give no label, not an error that fails the whole listing.
    canonical = text_value.op("~*")(
        literal_column("'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'")
    )
    return case((canonical, sql_cast(text_value, PG_UUID(as_uuid=True))), else_=None)


def with_labels(page: Any) -> Any:
    """The page joined to what its payloads point at: page -> chapter -> manga for
    `analyze_page`, chapter -> manga for `sync_chapter_content`, manga for
    `sync_chapter_list`. Joins by primary key, so the cost is per row of the page."""
    pages = cast(Table, Page.__table__).alias("p")
    page_chapters = cast(Table, Chapter.__table__).alias("pc")
    page_mangas = cast(Table, Manga.__table__).alias("pm")
    chapters = cast(Table, Chapter.__table__).alias("c")
    chapter_mangas = cast(Table, Manga.__table__).alias("cm")
    mangas = cast(Table, Manga.__table__).alias("m")
    field = page.c.payload.op("->>")
    return (
        select(
            page,
            pages.c.number.label("page_number"),
            page_chapters.c.number.label("page_chapter_number"),
            page_mangas.c.title.label("page_manga_title"),
            chapters.c.number.label("chapter_number"),
            chapter_mangas.c.title.label("chapter_manga_title"),
            mangas.c.title.label("manga_title"),
        )
        .select_from(page)
        .outerjoin(
            pages,
            and_(
                page.c.kind == text_literal(KIND_ANALYZE_PAGE),
                pages.c.id == _uuid_or_null(field(text_literal("page_id"))),
            ),
        )
        .outerjoin(page_chapters, page_chapters.c.id == pages.c.chapter_id)
        .outerjoin(page_mangas, page_mangas.c.id == page_chapters.c.manga_id)
        .outerjoin(
            chapters,
            and_(
                page.c.kind == text_literal(KIND_SYNC_CHAPTER_CONTENT),
                chapters.c.id == _uuid_or_null(field(text_literal("chapter_id"))),
            ),
        )
        .outerjoin(chapter_mangas, chapter_mangas.c.id == chapters.c.manga_id)
        .outerjoin(
            mangas,
            and_(
                page.c.kind == text_literal(KIND_SYNC_CHAPTER_LIST),
                mangas.c.id == _uuid_or_null(field(text_literal("manga_id"))),
            ),
        )
        .order_by(page.c.updated_at.desc(), page.c.id.desc())
    )


def chapter_number_text(number: Decimal | int | float) -> str:
    """`12`, `10.5`: a chapter number as a reader writes it (no `12.0`, no `1E+1`)."""
    text = format(Decimal(str(number)).normalize(), "f")
    return text


def label(row: Any) -> str | None:
    payload = row.payload if isinstance(row.payload, dict) else {}
    if row.kind == KIND_ANALYZE_PAGE:
        if row.page_manga_title is not None:
            chapter = chapter_number_text(row.page_chapter_number)
            return f"{row.page_manga_title} ch. {chapter} p. {row.page_number}"
        return f"page {payload['page_id']}" if payload.get("page_id") else None
    if row.kind == KIND_SYNC_CHAPTER_CONTENT:
        if row.chapter_manga_title is not None:
            return f"{row.chapter_manga_title} ch. {chapter_number_text(row.chapter_number)}"
        return f"chapter {payload['chapter_id']}" if payload.get("chapter_id") else None
    if row.kind == KIND_SYNC_CHAPTER_LIST:
        if row.manga_title is not None:
            return str(row.manga_title)
        return f"manga {payload['manga_id']}" if payload.get("manga_id") else None
    if row.kind == KIND_SYNC_MANGA:
        title = payload.get("title") or ""
        if title:
            return str(title)
        key = payload.get("source_manga_key")
        return f"{payload.get('source_id', '')}:{key}" if key else None
    return None
