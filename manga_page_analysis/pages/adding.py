"""Adding one page: its image checked and stored, its row inserted, its
analysis requested if asked, all in the caller's transaction."""

from __future__ import annotations

import logging
import os
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sqlalchemy import Connection

from manga_page_analysis.config import DEFAULT_MAX_IMAGE_BYTES
from manga_page_analysis.db import Conn
from manga_page_analysis.dberrors import outage_raises_unavailable
from manga_page_analysis.errors import (
    ImageTooLarge,
    NotAnImage,
    ObjectTooLarge,
    PageRefused,
    StorageKeyError,
)
from manga_page_analysis.pages.cleanup import delete_on_rollback
from manga_page_analysis.pages.image_format import check_image
from manga_page_analysis.queue.requests import request_analysis
from manga_page_analysis.repos.catalog import insert_page
from manga_page_analysis.schema_errors import tells_missing_tables
from manga_page_analysis.storable import INT4_MAX, unstorable_text
from manga_page_analysis.storage import Storage, check_key, read_capped

logger = logging.getLogger(__name__)

KEY_PREFIX: Final = "pages"
"""Objects `add_page` stores are named `pages/<chapter id>/<page id>.<extension>`."""

MAX_TITLE_CHARS: Final = 500
"""Longest manga or chapter title (and host key) stored: a title is shown in every
job label and event; a crawler's 1 MB "title" would make each admin poll megabytes.
Real titles, even light-novel ones, stay well under 300 characters."""
MAX_CHAPTER_NUMBER: Final = 1_000_000
"""Largest chapter number (chapters are numbered from 0, a prologue)."""

OnRollback = Callable[[str, uuid.UUID], None]
"""Told the key of an object just written for the page id: delete it should the
transaction not commit that page's row."""


@dataclass(frozen=True, slots=True)
class AddedPage:
    """What `add_page` made: the page's id, the job that will analyse it
    (`None` unless `analyze=True`), and where its image is."""

    page_id: uuid.UUID
    job_id: uuid.UUID | None
    storage_key: str
    content_type: str | None


@dataclass(frozen=True, slots=True)
class PageImage:
    """A page's checked image, ready to store (`data` None: the host's own key)."""

    data: bytes | None
    content_type: str | None
    extension: str | None
    storage_key: str | None


def page_image(
    *,
    data: bytes | None,
    file: Path | str | None,
    storage_key: str | None,
    content_type: str | None,
    max_bytes: int,
) -> PageImage:
    """Check the arguments of `add_page` and the image's bytes; nothing touches
    the database or the storage here."""
    sources = {"data": data, "file": file, "storage_key": storage_key}
    given = [name for name, value in sources.items() if value is not None]
    if len(given) != 1:
        raise ValueError(
            "give exactly one of data, file or storage_key, not "
            + (" and ".join(given) if given else "none")
        )
    if storage_key is not None:
        if not isinstance(storage_key, str) or not storage_key:
            raise ValueError("storage_key must be a non-empty string")
        try:
            check_key(storage_key)
        except StorageKeyError as exc:
            raise PageRefused(str(exc)) from None
        if content_type is not None:
            check_text(content_type, "content_type", max_chars=MAX_TITLE_CHARS)
        return PageImage(None, content_type, None, storage_key)
    if file is not None:
        data = read_file(Path(file), max_bytes)
    assert data is not None
    checked = check_image(bytes(data), max_bytes=max_bytes)
    if content_type is not None and content_type != checked.content_type:
        raise PageRefused(
            f"content_type {content_type!r} was given, but the data is {checked.content_type}"
        )
    return PageImage(bytes(data), checked.content_type, checked.extension, None)


def check_page_number(number: int) -> None:
    """`PageRefused` (a `ValueError`) unless `number` is an int from 1 to 2**31-1
    (the column's range: checked here, so no database error breaks the transaction)."""
    if isinstance(number, bool) or not isinstance(number, int):
        raise PageRefused(f"a page number is an int, not {number!r}"[:200])
    if not 1 <= number <= INT4_MAX:
        raise PageRefused(f"a page number is from 1 to {INT4_MAX}, not {number}"[:200])


def check_text(value: str, what: str, *, max_chars: int | None = None) -> None:
    """`PageRefused` (a `ValueError`) for text Postgres cannot store (a NUL character,
    a lone surrogate) or longer than `max_chars`."""
    if not isinstance(value, str):
        raise PageRefused(f"{what} must be a str, not {type(value).__name__}")
    reason = unstorable_text(value)
    if reason is not None:
        raise PageRefused(f"{what} refused: {reason}")
    if max_chars is not None and len(value) > max_chars:
        raise PageRefused(f"{what} is {len(value)} characters, more than {max_chars}")


def read_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes` of them
    (`ImageTooLarge` past that; `NotAnImage` for a folder, a FIFO, a device)."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotAnImage(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as stream:
            fd = -1  # the stream closes it now
            return read_capped(stream, max_bytes, label=str(path))
    except ObjectTooLarge as exc:
        raise ImageTooLarge(f"page file {path} is more than the cap of {max_bytes} bytes") from exc
    finally:
        if fd >= 0:
            os.close(fd)


@tells_missing_tables
def add_page(
    conn: Conn,
    storage: Storage,
    chapter_id: uuid.UUID,
    *,
    number: int,
    data: bytes | None = None,
    file: Path | str | None = None,
    storage_key: str | None = None,
    content_type: str | None = None,
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    analyze: bool = False,
) -> AddedPage:
    """Add page `number` to the chapter; see docs/api.md, "Adding pages"."""
    check_page_number(number)
    image = page_image(
        data=data,
        file=file,
        storage_key=storage_key,
        content_type=content_type,
        max_bytes=max_bytes,
    )
    connection = conn if isinstance(conn, Connection) else conn.connection()

    def on_rollback(key: str, page_id: uuid.UUID) -> None:
        # In autocommit each statement commits alone: the row is there for good
        # once its insert returned, and no later rollback may take its object.
        if not getattr(connection.connection.dbapi_connection, "autocommit", False):
            delete_on_rollback(connection, storage, key, page_id)

    return insert_checked_page(
        conn, storage, chapter_id, image, number=number, analyze=analyze, on_rollback=on_rollback
    )


@outage_raises_unavailable
def insert_checked_page(
    conn: Conn,
    storage: Storage,
    chapter_id: uuid.UUID,
    image: PageImage,
    *,
    number: int,
    analyze: bool,
    on_rollback: OnRollback,
) -> AddedPage:
    """Store the image (when it is ours to store), insert the row, request the
    analysis; the object goes again if the row is refused or rolled back."""
    page_id = uuid.uuid4()
    key = image.storage_key
    if image.data is not None:
        key = f"{KEY_PREFIX}/{chapter_id}/{page_id}.{image.extension}"
        assert image.content_type is not None
        storage.write_bytes(key, image.data, content_type=image.content_type)
        on_rollback(key, page_id)
    assert key is not None
    try:
        insert_page(
            conn,
            page_id,
            chapter_id,
            number=number,
            storage_key=key,
            content_type=image.content_type,
        )
    except Exception:
        # Refused (no such chapter, page exists) or failed: no row names the
        # object. A rollback to come would delete it too; this is sooner.
        if image.data is not None:
            try:
                storage.delete(key)
            except Exception:
                logger.warning("could not delete stored object %r", key, exc_info=True)
        raise
    job_id = request_analysis(conn, page_id) if analyze else None
    return AddedPage(page_id, job_id, key, image.content_type)
