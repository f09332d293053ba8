"""Mangas, chapters and pages as a host puts them in: find-or-create by the
host's keys, and inserting a page row. Like every repository here it never
commits; a lost race or a duplicate never raises a database error, so the
caller's transaction stays usable."""

from __future__ import annotations

import uuid
from decimal import Decimal

from sqlalchemy import Integer, Numeric, Text, Uuid, exists, literal, select
from sqlalchemy.dialects.postgresql import insert

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import NoSuchChapter, NoSuchManga, PageExists
from manga_page_analysis.models import Chapter, Manga, Page


def ensure_manga(conn: Conn, *, source_id: str, source_key: str, title: str) -> uuid.UUID:
    """The manga the host knows as (`source_id`, `source_key`), created with
    `title` if there is none; an existing manga keeps its title.

    Race-safe: `INSERT ... ON CONFLICT DO NOTHING` waits for a concurrent
    insert of the same keys to commit or roll back, then the select finds
    whichever row won (READ COMMITTED, Postgres's default).
    """
    created = conn.execute(
        insert(Manga)
        .values(source_id=source_id, source_key=source_key, title=title)
        .on_conflict_do_nothing(index_elements=[Manga.source_id, Manga.source_key])
        .returning(Manga.id)
    ).scalar_one_or_none()
    if created is not None:
        return created
    return conn.execute(
        select(Manga.id).where(Manga.source_id == source_id, Manga.source_key == source_key)
    ).scalar_one()


def ensure_chapter(conn: Conn, manga_id: uuid.UUID, *, number: Decimal, title: str) -> uuid.UUID:
    """Chapter `number` of the manga, created with `title` if there is none (an
    existing chapter keeps its title); race-safe as `ensure_manga`.
    `NoSuchManga` when `manga_id` is no manga (checked in the insert)."""
    values = select(
        literal(manga_id, Uuid).label("manga_id"),
        literal(number, Numeric).label("number"),
        literal(title, Text).label("title"),
    ).where(exists().where(Manga.id == manga_id))
    created = conn.execute(
        insert(Chapter)
        .from_select(["manga_id", "number", "title"], values)
        .on_conflict_do_nothing(index_elements=[Chapter.manga_id, Chapter.number])
        .returning(Chapter.id)
    ).scalar_one_or_none()
    if created is not None:
        return created
    found = conn.execute(
        select(Chapter.id).where(Chapter.manga_id == manga_id, Chapter.number == number)
    ).scalar_one_or_none()
    if found is None:
        raise NoSuchManga(f"no manga {manga_id}")
    return found


def insert_page(
    conn: Conn,
    page_id: uuid.UUID,
    chapter_id: uuid.UUID,
    *,
    number: int,
    storage_key: str,
    content_type: str | None,
) -> None:
    """Insert the page row under the id the caller chose. `NoSuchChapter` when
    the chapter does not exist, `PageExists` when it has a page `number`
    already: both checked in the insert itself, nothing written then."""
    values = select(
        literal(page_id, Uuid).label("id"),
        literal(chapter_id, Uuid).label("chapter_id"),
        literal(number, Integer).label("number"),
        literal(storage_key, Text).label("storage_key"),
        literal(content_type, Text).label("content_type"),
    ).where(exists().where(Chapter.id == chapter_id))
    inserted = conn.execute(
        insert(Page)
        .from_select(["id", "chapter_id", "number", "storage_key", "content_type"], values)
        .on_conflict_do_nothing(index_elements=[Page.chapter_id, Page.number])
        .returning(Page.id)
    ).scalar_one_or_none()
    if inserted is not None:
        return
    existing = conn.execute(
        select(Page.id).where(Page.chapter_id == chapter_id, Page.number == number)
    ).scalar_one_or_none()
    if existing is None:
        raise NoSuchChapter(f"no chapter {chapter_id}")
    raise PageExists(f"chapter {chapter_id} already has page {number}", page_id=existing)


def newest_manga_titled(conn: Conn, title: str) -> uuid.UUID | None:
    """The most recently created manga titled `title`, if any."""
    found: uuid.UUID | None = conn.execute(
        select(Manga.id).where(Manga.title == title).order_by(Manga.created_at.desc()).limit(1)
    ).scalar_one_or_none()
    return found


def create_manga(conn: Conn, title: str) -> uuid.UUID:
    """A new manga titled `title`, with no host keys."""
    created: uuid.UUID = conn.execute(
        insert(Manga).values(title=title).returning(Manga.id)
    ).scalar_one()
    return created


def has_chapter(conn: Conn, manga_id: uuid.UUID, number: Decimal) -> bool:
    found = conn.execute(
        select(Chapter.id).where(Chapter.manga_id == manga_id, Chapter.number == number)
    ).first()
    return found is not None
