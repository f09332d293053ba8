"""Pages in, from Python, in the host's transaction: find or create a manga
and a chapter by the host's own keys, add a page from bytes, a file or a key
already stored, and optionally request its analysis in the same call.

Every function takes `conn` first (a SQLAlchemy `Connection` or `Session`),
runs on it and never commits or rolls back. docs/api.md, "Adding pages".
Django: the same functions in `manga_page_analysis.web.django`, on Django's
own connection.

Pages are the subject of two more places, each a layer of its own: their rows' SQL in
`repos/` (`catalog.py` writes them, `pages.py` reads what the worker and a request for
analysis need), and the admin's read-only browsing in `admin/browse.py`.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from manga_page_analysis.db import Conn
from manga_page_analysis.dberrors import outage_raises_unavailable
from manga_page_analysis.errors import (
    ImageTooLarge,
    NoSuchChapter,
    NoSuchManga,
    NotAnImage,
    PageExists,
    PageRefused,
    TablesNotFound,
)
from manga_page_analysis.pages.adding import (
    KEY_PREFIX,
    MAX_CHAPTER_NUMBER,
    MAX_TITLE_CHARS,
    AddedPage,
    add_page,
    check_text,
)
from manga_page_analysis.repos import catalog
from manga_page_analysis.schema_errors import tells_missing_tables

__all__ = [
    "KEY_PREFIX",
    "MAX_CHAPTER_NUMBER",
    "MAX_TITLE_CHARS",
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


@outage_raises_unavailable
@tells_missing_tables
def ensure_manga(conn: Conn, *, source_id: str, source_key: str, title: str) -> uuid.UUID:
    """The id of the manga the host knows as (`source_id`, `source_key`),
    created with `title` when there is none; an existing manga keeps its
    title. Safe under concurrent calls: one manga per pair. `PageRefused` (a
    `ValueError`) for an empty key, text Postgres cannot store, or a title
    longer than `MAX_TITLE_CHARS`."""
    for name, value in (("source_id", source_id), ("source_key", source_key)):
        if not isinstance(value, str) or not value:
            raise PageRefused(f"{name} must be a non-empty string")
        check_text(value, name, max_chars=MAX_TITLE_CHARS)
    check_text(title, "the manga's title", max_chars=MAX_TITLE_CHARS)
    return catalog.ensure_manga(conn, source_id=source_id, source_key=source_key, title=title)


@outage_raises_unavailable
@tells_missing_tables
def ensure_chapter(
    conn: Conn, manga_id: uuid.UUID, *, number: Decimal | int | str, title: str = ""
) -> uuid.UUID:
    """The id of chapter `number` (`10.5` is a chapter) of the manga, created
    with `title` when there is none; an existing chapter keeps its title.
    Safe under concurrent calls. `NoSuchManga` when `manga_id` is no manga;
    `PageRefused` (a `ValueError`) for a number outside 0..`MAX_CHAPTER_NUMBER`
    or a title as `ensure_manga` refuses it."""
    parsed = _chapter_number(number)
    check_text(title, "the chapter's title", max_chars=MAX_TITLE_CHARS)
    return catalog.ensure_chapter(conn, manga_id, number=parsed, title=title)


def _chapter_number(number: Decimal | int | str) -> Decimal:
    if isinstance(number, bool) or not isinstance(number, Decimal | int | str):
        raise PageRefused(f"a chapter number is a Decimal, an int or a str, not {number!r}"[:200])
    if isinstance(number, str) and len(number) > 40:
        raise PageRefused(f"{number[:40]!r}... is not a chapter number")
    try:
        parsed = Decimal(number)
    except ArithmeticError:
        raise PageRefused(f"{number!r} is not a chapter number"[:200]) from None
    # Checked in Decimal, never as a float: `1e1000000` is out of range, not infinite.
    if not parsed.is_finite() or not 0 <= parsed <= MAX_CHAPTER_NUMBER:
        raise PageRefused(
            f"a chapter number is from 0 to {MAX_CHAPTER_NUMBER}, not {str(number)[:40]}"
        )
    return parsed
