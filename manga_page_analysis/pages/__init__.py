"""Pages in, from Python, in the host's transaction: find or create a manga
and a chapter by the host's own keys, add a page from bytes, a file or a key
already stored, and optionally request its analysis in the same call.

Every function takes `conn` first (a SQLAlchemy `Connection` or `Session`),
runs on it and never commits or rolls back. docs/api.md, "Adding pages".
Django: the same functions in `manga_page_analysis.web.django`, on Django's
own connection.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import (
    ImageTooLarge,
    NoSuchChapter,
    NoSuchManga,
    NotAnImage,
    PageExists,
    PageRefused,
    TablesNotFound,
)
from manga_page_analysis.pages.adding import KEY_PREFIX, AddedPage, add_page
from manga_page_analysis.repos import catalog
from manga_page_analysis.schema_errors import tells_missing_tables

__all__ = [
    "KEY_PREFIX",
    "AddedPage",
    "ImageTooLarge",
    "NoSuchChapter",
    "NoSuchManga",
    "NotAnImage",
    "PageExists",
    "PageRefused",
    "TablesNotFound",
    "add_page",
    "ensure_chapter",
    "ensure_manga",
]


@tells_missing_tables
def ensure_manga(conn: Conn, *, source_id: str, source_key: str, title: str) -> uuid.UUID:
    """The id of the manga the host knows as (`source_id`, `source_key`),
    created with `title` when there is none; an existing manga keeps its
    title. Safe under concurrent calls: one manga per pair."""
    for name, value in (("source_id", source_id), ("source_key", source_key)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string")
    return catalog.ensure_manga(conn, source_id=source_id, source_key=source_key, title=title)


@tells_missing_tables
def ensure_chapter(
    conn: Conn, manga_id: uuid.UUID, *, number: Decimal | int | str, title: str = ""
) -> uuid.UUID:
    """The id of chapter `number` (`10.5` is a chapter) of the manga, created
    with `title` when there is none; an existing chapter keeps its title.
    Safe under concurrent calls. `NoSuchManga` when `manga_id` is no manga."""
    return catalog.ensure_chapter(conn, manga_id, number=_chapter_number(number), title=title)


def _chapter_number(number: Decimal | int | str) -> Decimal:
    if isinstance(number, bool) or not isinstance(number, Decimal | int | str):
        raise ValueError(f"a chapter number is a Decimal, an int or a str, not {number!r}")
    try:
        parsed = Decimal(number)
    except ArithmeticError:
        raise ValueError(f"{number!r} is not a chapter number") from None
    if not parsed.is_finite():
        raise ValueError(f"{number!r} is not a chapter number")
    return parsed
