"""Human labels for jobs ("Title ch. 12 p. 3"), joined onto a page of jobs in one query.

Only what a label shows leaves the database, cut to `LABEL_PART_CHARS` there:
never the payload (a host's kind may carry megabytes a crawler controls; the
listing of 500 such jobs would otherwise hold them all in the process)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final, cast

from sqlalchemy import ColumnElement, Table, and_, case, func, literal_column, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import UUID as PG_UUID

from manga_page_analysis.models import Chapter, Manga, Page
from manga_page_analysis.queue.payloads import (
    KIND_ANALYZE_PAGE,
    KIND_SYNC_CHAPTER_CONTENT,
    KIND_SYNC_CHAPTER_LIST,
    KIND_SYNC_MANGA,
)
from manga_page_analysis.queue.table import text_literal

LABEL_PART_CHARS: Final = 200
"""Longest title or payload field a label shows (cut in SQL): a label names a job
in a list row. Titles are capped where they are stored too (`pages.MAX_TITLE_CHARS`),
but rows older than that cap, and payload fields of any length, are cut here."""

_PAYLOAD_PARTS: Final = (
    "title",
    "source_id",
    "source_manga_key",
    "page_id",
    "chapter_id",
    "manga_id",
)
"""The payload fields a label may show (`label` reads them as `payload_<name>`)."""


def _uuid_or_null(text_value: ColumnElement[Any]) -> ColumnElement[Any]:
    # Payloads written by another writer may hold anything; a bad UUID must
    # give no label, not an error that fails the whole listing.
    canonical = text_value.op("~*")(
        literal_column("'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'")
    )
    return case((canonical, sql_cast(text_value, PG_UUID(as_uuid=True))), else_=None)


def _points_at(page: Any, kind: str, key: str, table: Any) -> ColumnElement[bool]:
    """The job is of `kind` and its payload's `key` is the id of a row of `table`."""
    target_id = _uuid_or_null(page.c.payload.op("->>")(text_literal(key)))
    return and_(page.c.kind == text_literal(kind), table.c.id == target_id)


def with_labels(page: Any) -> Any:
    """The page (a CTE of `crawler_jobs` rows with `kind` and `payload` columns) joined
    to what its payloads point at (`label(row)` renders a row): page -> chapter -> manga for
    `analyze_page`, chapter -> manga for `sync_chapter_content`, manga for
    `sync_chapter_list`. Joins by primary key, so the cost is per row of the page.
    Every column of the page but `payload` is selected, and of the payload only the
    fields a label shows, cut to `LABEL_PART_CHARS`."""
    pages = cast(Table, Page.__table__).alias("p")
    page_chapters = cast(Table, Chapter.__table__).alias("pc")
    page_mangas = cast(Table, Manga.__table__).alias("pm")
    chapters = cast(Table, Chapter.__table__).alias("c")
    chapter_mangas = cast(Table, Manga.__table__).alias("cm")
    mangas = cast(Table, Manga.__table__).alias("m")
    payload = page.c.payload
    return (
        select(
            *(column for column in page.c if column.name != "payload"),
            *(
                _cut(payload.op("->>")(text_literal(name))).label(f"payload_{name}")
                for name in _PAYLOAD_PARTS
            ),
            pages.c.number.label("page_number"),
            page_chapters.c.number.label("page_chapter_number"),
            _cut(page_mangas.c.title).label("page_manga_title"),
            chapters.c.number.label("chapter_number"),
            _cut(chapter_mangas.c.title).label("chapter_manga_title"),
            _cut(mangas.c.title).label("manga_title"),
        )
        .select_from(page)
        .outerjoin(pages, _points_at(page, KIND_ANALYZE_PAGE, "page_id", pages))
        .outerjoin(page_chapters, page_chapters.c.id == pages.c.chapter_id)
        .outerjoin(page_mangas, page_mangas.c.id == page_chapters.c.manga_id)
        .outerjoin(chapters, _points_at(page, KIND_SYNC_CHAPTER_CONTENT, "chapter_id", chapters))
        .outerjoin(chapter_mangas, chapter_mangas.c.id == chapters.c.manga_id)
        .outerjoin(mangas, _points_at(page, KIND_SYNC_CHAPTER_LIST, "manga_id", mangas))
        .order_by(page.c.updated_at.desc(), page.c.id.desc())
    )


def _cut(text_value: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.left(text_value, LABEL_PART_CHARS)


def chapter_number_text(number: Decimal | int | float) -> str:
    """`12`, `10.5`: a chapter number as a reader writes it (no `12.0`, no `1E+1`)."""
    return format(Decimal(str(number)).normalize(), "f")


_ID_NOUNS: Final = {
    KIND_ANALYZE_PAGE: "page",
    KIND_SYNC_CHAPTER_CONTENT: "chapter",
    KIND_SYNC_CHAPTER_LIST: "manga",
}
"""Kinds whose payload points at a row by `<noun>_id`: unlabelled, the label is that id."""


def label(row: Any) -> str | None:
    """The label of a row of `with_labels`, `None` when nothing is known."""
    if row.kind == KIND_ANALYZE_PAGE and row.page_manga_title is not None:
        chapter = chapter_number_text(row.page_chapter_number)
        return f"{row.page_manga_title} ch. {chapter} p. {row.page_number}"
    if row.kind == KIND_SYNC_CHAPTER_CONTENT and row.chapter_manga_title is not None:
        return f"{row.chapter_manga_title} ch. {chapter_number_text(row.chapter_number)}"
    if row.kind == KIND_SYNC_CHAPTER_LIST and row.manga_title is not None:
        return str(row.manga_title)
    if row.kind == KIND_SYNC_MANGA:
        if row.payload_title:
            return str(row.payload_title)
        key = row.payload_source_manga_key
        return f"{row.payload_source_id or ''}:{key}" if key else None
    noun = _ID_NOUNS.get(row.kind)
    shown_id = None if noun is None else getattr(row, f"payload_{noun}_id")
    if not shown_id:
        return None
    return f"{noun} {shown_id}"
