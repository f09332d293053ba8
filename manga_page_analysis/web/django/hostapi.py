"""The pages-in API and `request_analysis` on Django's own connection, inside
whatever `transaction.atomic()` block is open (docs/embedding.md, "Django").

Django has `transaction.on_commit` but no hook for a rollback. It does drop
the on-commit callbacks of a block that rolls back (the whole transaction, or
only a savepoint), and a dropped callback is freed: `add_page` registers one
per stored object and deletes the object when that callback is freed without
having run (`weakref.finalize`). Django's own bookkeeping thus decides, with
savepoints handled as Django handles them.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection

from manga_page_analysis.config import DEFAULT_MAX_IMAGE_BYTES
from manga_page_analysis.errors import DatabaseUnavailable, ServiceError
from manga_page_analysis.pages import ensure_chapter as ensure_chapter_on
from manga_page_analysis.pages import ensure_manga as ensure_manga_on
from manga_page_analysis.pages.adding import (
    AddedPage,
    check_page_number,
    insert_checked_page,
    page_image,
)
from manga_page_analysis.queue import request_analysis as request_analysis_on
from manga_page_analysis.storage import Storage, open_storage
from manga_page_analysis.web.django.apps import page_analysis_app

logger = logging.getLogger(__name__)

T = TypeVar("T")


def in_host_transaction(using: str, work: Callable[[Connection], T]) -> T:
    """Run `work` on Django's connection `using`, joining the open atomic block
    (no savepoint of its own), or in a transaction of its own outside one.

    A database error dooms the host's block, as any failed statement would.
    A refusal of ours (`ServiceError`: no such page, page exists, ...) comes
    after statements that succeeded, so it is raised once the block is left
    intact: the host's transaction stays usable.
    """
    from django.db import connections, transaction

    engine = page_analysis_app().borrowed.engine(using)
    refused: ServiceError | None = None
    with transaction.atomic(using=using, savepoint=False):
        connections[using].validate_no_broken_transaction()
        with engine.connect() as conn:
            try:
                return work(conn)
            except DatabaseUnavailable:
                raise  # the block is broken: Django rolls it back
            except ServiceError as exc:
                refused = exc
    assert refused is not None
    raise refused


def request_analysis(
    page_id: uuid.UUID | str, *, force: bool = False, using: str = "default"
) -> uuid.UUID | None:
    """`manga_page_analysis.queue.request_analysis` on Django's connection `using`: the id of
    the job that will analyse the page; `NoSuchPage` (nothing queued, the
    host's block still usable) when the id is no page.

    It joins the open `transaction.atomic(using=...)` block (no savepoint: the
    enqueue raises nothing on a duplicate), so a rollback leaves no job; no
    other connection is opened. Outside any atomic block it runs in a
    transaction of its own. `ImproperlyConfigured` unless PostgreSQL.
    """
    page_id = uuid.UUID(str(page_id))  # a bad id raises here, outside the host's transaction
    return in_host_transaction(using, lambda conn: request_analysis_on(conn, page_id, force=force))


def ensure_manga(
    *, source_id: str, source_key: str, title: str, using: str = "default"
) -> uuid.UUID:
    """`manga_page_analysis.pages.ensure_manga` on Django's connection `using`."""
    return in_host_transaction(
        using,
        lambda conn: ensure_manga_on(conn, source_id=source_id, source_key=source_key, title=title),
    )


def ensure_chapter(
    manga_id: uuid.UUID | str,
    *,
    number: Decimal | int | str,
    title: str = "",
    using: str = "default",
) -> uuid.UUID:
    """`manga_page_analysis.pages.ensure_chapter` on Django's connection `using`."""
    manga_id = uuid.UUID(str(manga_id))
    return in_host_transaction(
        using, lambda conn: ensure_chapter_on(conn, manga_id, number=number, title=title)
    )


def add_page(
    chapter_id: uuid.UUID | str,
    *,
    number: int,
    data: bytes | None = None,
    file: Path | str | None = None,
    storage_key: str | None = None,
    content_type: str | None = None,
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    analyze: bool = False,
    storage: Storage | None = None,
    using: str = "default",
) -> AddedPage:
    """`manga_page_analysis.pages.add_page` on Django's connection `using`.
    `storage` defaults to the store the worker reads (`STORAGE_ROOT` or
    `STORAGE_URL` from the environment). The image is checked before any
    statement runs; a rollback of the block (or of a savepoint around the
    call) deletes the object it stored."""
    chapter_id = uuid.UUID(str(chapter_id))
    check_page_number(number)
    image = page_image(
        data=data,
        file=file,
        storage_key=storage_key,
        content_type=content_type,
        max_bytes=max_bytes,
    )
    store = (
        storage if storage is not None else open_storage(page_analysis_app().environment_settings)
    )

    def on_rollback(key: str, page_id: uuid.UUID) -> None:
        delete_unless_committed(store, key, page_id, using=using)

    return in_host_transaction(
        using,
        lambda conn: insert_checked_page(
            conn, store, chapter_id, image, number=number, analyze=analyze, on_rollback=on_rollback
        ),
    )


def delete_unless_committed(storage: Storage, key: str, page_id: uuid.UUID, *, using: str) -> None:
    """Delete `key` unless the transaction open on `using` commits: when Django
    drops the on-commit callback registered here without running it."""
    from django.db import transaction

    committed: list[bool] = []

    def mark_committed() -> None:
        committed.append(True)

    transaction.on_commit(mark_committed, using=using)
    # The finalizer must not hold `mark_committed` itself, only what it shares.
    weakref.finalize(mark_committed, _delete_if_uncommitted, committed, storage, key, page_id)


def _delete_if_uncommitted(
    committed: list[bool], storage: Storage, key: str, page_id: uuid.UUID
) -> None:
    if committed:
        return
    try:
        storage.delete(key)
    except Exception:
        logger.warning(
            "could not delete stored object %r of page %s (its transaction was rolled back); "
            "it is left behind",
            key,
            page_id,
            exc_info=True,
        )
    else:
        logger.info(
            "deleted stored object %r of page %s: the transaction was rolled back", key, page_id
        )
