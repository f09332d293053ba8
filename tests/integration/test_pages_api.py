"""The pages-in API (`manga_page_analysis.pages`): mangas and chapters found or
created by the host's keys, race-safe; pages added from bytes, a file or a key
already stored, in the caller's transaction, and their stored objects gone
again when that transaction (or a savepoint around them) rolls back."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session

from manga_page_analysis.pages import (
    AddedPage,
    ImageTooLarge,
    NoSuchChapter,
    NoSuchManga,
    NotAnImage,
    PageExists,
    PageRefused,
    add_page,
    ensure_chapter,
    ensure_manga,
)
from manga_page_analysis.storage import LocalStorage
from tests.helpers import count, job_row, wait_until
from tests.worker_support import png_bytes


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "storage")


@pytest.fixture
def chapter_id(engine: Engine) -> uuid.UUID:
    with engine.begin() as conn:
        manga_id = ensure_manga(conn, source_id="site", source_key="blame", title="Blame!")
        return ensure_chapter(conn, manga_id, number=1)


def _stored(storage: LocalStorage) -> list[str]:
    """The keys of every object in the store."""
    root = storage.root
    if not root.exists():
        return []
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def _pages(engine: Engine) -> int:
    return count(engine, "SELECT count(*) FROM pages")


# --- mangas and chapters -----------------------------------------------------------


def test_ensure_manga_finds_the_manga_by_the_hosts_keys_and_keeps_its_title(engine):
    with engine.begin() as conn:
        first = ensure_manga(conn, source_id="site", source_key="k1", title="Blame!")
        again = ensure_manga(conn, source_id="site", source_key="k1", title="BLAME! (renamed)")
        other_key = ensure_manga(conn, source_id="site", source_key="k2", title="Blame!")
        other_source = ensure_manga(conn, source_id="mirror", source_key="k1", title="Blame!")
        title = conn.execute(text("SELECT title FROM mangas WHERE id = :id"), {"id": first})
    assert again == first and len({first, other_key, other_source}) == 3
    assert title.scalar_one() == "Blame!"
    with engine.begin() as conn, pytest.raises(ValueError, match="source_key"):
        ensure_manga(conn, source_id="site", source_key="", title="x")


def test_mangas_without_host_keys_stay_apart(engine):
    """Rows made before the keys existed (both NULL) never clash with each other."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO mangas (title) VALUES ('a'), ('a')"))
        keyed = ensure_manga(conn, source_id="site", source_key="a", title="a")
    assert count(engine, "SELECT count(*) FROM mangas") == 3
    assert count(engine, "SELECT count(*) FROM mangas WHERE id = :id", id=keyed) == 1


def test_ensure_chapter_finds_the_chapter_by_number(engine, chapter_id):
    with engine.begin() as conn:
        manga_id = conn.execute(
            text("SELECT manga_id FROM chapters WHERE id = :id"), {"id": chapter_id}
        ).scalar_one()
        assert (
            ensure_chapter(conn, manga_id, number=Decimal("1.0"), title="new title") == chapter_id
        )
        half = ensure_chapter(conn, manga_id, number="10.5", title="Extra")
        assert ensure_chapter(conn, manga_id, number=Decimal("10.50")) == half
        with pytest.raises(NoSuchManga):
            ensure_chapter(conn, uuid.uuid4(), number=1)
        # Refused without a database error: the transaction goes on.
        assert ensure_chapter(conn, manga_id, number=2) not in (chapter_id, half)
        with pytest.raises(ValueError):
            ensure_chapter(conn, manga_id, number="NaN")
    assert count(engine, "SELECT count(*) FROM chapters WHERE title = 'new title'") == 0


def _waiting_on_a_lock(engine: Engine, pid: int) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = :pid"),
                {"pid": pid},
            ).scalar()
        )


def _race(engine: Engine, ensure: Callable[[Connection], uuid.UUID], *, first_commits: bool):
    """`ensure` on two connections: the first holds its uncommitted insert while
    the second calls; the second must wait for it, then agree with it."""
    with engine.connect() as first, engine.connect() as second:
        first_id = ensure(first)
        second_pid = second.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with ThreadPoolExecutor(1) as pool:
            racing = pool.submit(lambda: ensure(second))
            wait_until(lambda: racing.done() or _waiting_on_a_lock(engine, second_pid))
            assert not racing.done(), "the second call did not wait for the first"
            if first_commits:
                first.commit()
            else:
                first.rollback()
            second_id = racing.result(timeout=30)
        second.commit()
    return first_id, second_id


@pytest.mark.parametrize("first_commits", [True, False], ids=["commit", "rollback"])
def test_two_connections_racing_for_one_manga_end_with_one(engine, first_commits):
    def ensure(conn: Connection) -> uuid.UUID:
        return ensure_manga(conn, source_id="site", source_key="race", title="Race")

    first_id, second_id = _race(engine, ensure, first_commits=first_commits)
    assert (second_id == first_id) is first_commits
    assert count(engine, "SELECT count(*) FROM mangas WHERE source_key = 'race'") == 1


def test_two_connections_racing_for_one_chapter_end_with_one(engine):
    with engine.begin() as conn:
        manga_id = ensure_manga(conn, source_id="site", source_key="m", title="M")

    def ensure(conn: Connection) -> uuid.UUID:
        return ensure_chapter(conn, manga_id, number=3)

    first_id, second_id = _race(engine, ensure, first_commits=True)
    assert second_id == first_id
    assert count(engine, "SELECT count(*) FROM chapters") == 1


# --- adding pages ---------------------------------------------------------------------


def test_a_page_from_bytes_is_decoded_stored_and_inserted(engine, storage, chapter_id):
    webp = png_bytes(fmt="WEBP")
    with engine.begin() as conn:
        added = add_page(conn, storage, chapter_id, number=1, data=webp)
        plain = add_page(conn, storage, chapter_id, number=2, data=png_bytes(), analyze=False)
    assert isinstance(added, AddedPage) and added.job_id is None and plain.job_id is None
    assert added.storage_key == f"pages/{chapter_id}/{added.page_id}.webp"
    assert added.content_type == "image/webp"
    assert storage.read_bytes(added.storage_key, 10**6) == webp
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT chapter_id, number, storage_key, content_type FROM pages WHERE id = :id"),
            {"id": added.page_id},
        ).one()
    assert tuple(row) == (chapter_id, 1, added.storage_key, "image/webp")
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_analyze_requests_the_analysis_in_the_same_transaction(engine, storage, chapter_id):
    with engine.connect() as conn:
        added = add_page(conn, storage, chapter_id, number=1, data=png_bytes(), analyze=True)
        assert added.job_id is not None
        assert job_row(conn, added.job_id).payload["page_id"] == str(added.page_id)
        assert count(engine, "SELECT count(*) FROM crawler_jobs") == 0  # not committed yet
        conn.commit()
    assert count(engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'pending'") == 1


def test_a_page_from_a_file_is_read_capped_and_checked(engine, storage, chapter_id, tmp_path):
    page = tmp_path / "001.jpeg"
    page.write_bytes(png_bytes(fmt="JPEG"))
    with engine.begin() as conn:
        added = add_page(conn, storage, chapter_id, number=1, file=page)
    assert added.content_type == "image/jpeg" and added.storage_key.endswith(".jpg")
    assert storage.read_bytes(added.storage_key, 10**6) == page.read_bytes()

    with engine.begin() as conn:
        with pytest.raises(ImageTooLarge, match="cap of 100 bytes"):
            add_page(conn, storage, chapter_id, number=2, file=page, max_bytes=100)
        fifo = tmp_path / "fifo.png"
        os.mkfifo(fifo)
        with pytest.raises(NotAnImage, match="not a regular file"):
            add_page(conn, storage, chapter_id, number=2, file=fifo)  # no writer: must not hang
    assert _stored(storage) == [added.storage_key] and _pages(engine) == 1


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"%PDF-1.7 not an image", NotAnImage, "not an image"),
        (png_bytes()[:60], NotAnImage, "damaged or cut short"),
        (b"", NotAnImage, "empty"),
        (png_bytes(size=(400, 400)), ImageTooLarge, "cap of 200 bytes"),
    ],
    ids=["not-an-image", "truncated", "empty", "oversized"],
)
def test_data_that_is_no_acceptable_image_is_refused_and_nothing_is_stored(
    engine, storage, chapter_id, data, error, match
):
    with engine.begin() as conn:
        with pytest.raises(error, match=match):
            add_page(conn, storage, chapter_id, number=1, data=data, max_bytes=200)
        # Refused before any statement: the transaction goes on.
        add_page(conn, storage, chapter_id, number=1, storage_key="elsewhere/1.png")
    assert _stored(storage) == [] and _pages(engine) == 1


def test_a_key_already_stored_is_taken_as_it_is(engine, storage, chapter_id):
    storage.write_bytes("host/1.png", png_bytes(), content_type="image/png")
    with engine.connect() as conn:
        added = add_page(
            conn, storage, chapter_id, number=1, storage_key="host/1.png", content_type="image/png"
        )
        conn.rollback()
    assert added.storage_key == "host/1.png" and added.content_type == "image/png"
    assert _stored(storage) == ["host/1.png"]  # the host's object: never ours to delete
    assert _pages(engine) == 0


@pytest.mark.parametrize(
    "sources",
    [{}, {"data": b"x", "storage_key": "k"}, {"data": b"x", "file": "f"}],
    ids=["none", "data-and-key", "data-and-file"],
)
def test_exactly_one_source_of_the_image(engine, storage, chapter_id, sources):
    with engine.begin() as conn, pytest.raises(ValueError, match="exactly one"):
        add_page(conn, storage, chapter_id, number=1, **sources)


def test_a_content_type_that_the_data_contradicts_is_refused(engine, storage, chapter_id):
    with engine.begin() as conn, pytest.raises(PageRefused, match="image/png"):
        add_page(conn, storage, chapter_id, number=1, data=png_bytes(), content_type="image/gif")
    assert _stored(storage) == []


def test_a_taken_number_or_an_unknown_chapter_stores_nothing(engine, storage, chapter_id):
    with engine.begin() as conn:
        first = add_page(conn, storage, chapter_id, number=1, data=png_bytes())
        with pytest.raises(PageExists) as taken:
            add_page(conn, storage, chapter_id, number=1, data=png_bytes(color="black"))
        assert taken.value.page_id == first.page_id
        with pytest.raises(NoSuchChapter):
            add_page(conn, storage, uuid.uuid4(), number=1, data=png_bytes())
        second = add_page(conn, storage, chapter_id, number=2, data=png_bytes())
    assert _stored(storage) == sorted([first.storage_key, second.storage_key])
    assert _pages(engine) == 2


# --- rollback leaves no object ------------------------------------------------------------


def _add(conn: Any, storage: LocalStorage, chapter_id: uuid.UUID, number: int) -> AddedPage:
    return add_page(conn, storage, chapter_id, number=number, data=png_bytes(), analyze=True)


def test_on_a_connection_commit_keeps_and_rollback_deletes(engine, storage, chapter_id):
    with engine.connect() as conn:
        kept = _add(conn, storage, chapter_id, 1)
        conn.commit()
        dropped = _add(conn, storage, chapter_id, 2)
        assert _stored(storage) == sorted([kept.storage_key, dropped.storage_key])
        conn.rollback()
        # The same connection, a later transaction: only its own objects count.
        later = _add(conn, storage, chapter_id, 3)
        conn.commit()
    assert _stored(storage) == sorted([kept.storage_key, later.storage_key])
    assert _pages(engine) == 2 and count(engine, "SELECT count(*) FROM crawler_jobs") == 2


def test_a_connection_closed_without_commit_deletes(engine, storage, chapter_id):
    with engine.connect() as conn:
        _add(conn, storage, chapter_id, 1)
    assert _stored(storage) == [] and _pages(engine) == 0


def test_an_error_in_the_hosts_transaction_after_adding_deletes(engine, storage, chapter_id):
    with pytest.raises(ZeroDivisionError), engine.begin() as conn:
        _add(conn, storage, chapter_id, 1)
        raise ZeroDivisionError
    assert _stored(storage) == [] and _pages(engine) == 0


def test_on_a_connection_a_rolled_back_savepoint_deletes_only_its_own(engine, storage, chapter_id):
    with engine.begin() as conn:
        before = _add(conn, storage, chapter_id, 1)
        with conn.begin_nested() as released:
            inside_released = _add(conn, storage, chapter_id, 2)
            released.commit()
        savepoint = conn.begin_nested()
        _add(conn, storage, chapter_id, 3)
        savepoint.rollback()
        after = _add(conn, storage, chapter_id, 4)
    kept = [before, inside_released, after]
    assert _stored(storage) == sorted(page.storage_key for page in kept)
    assert _pages(engine) == 3


def test_on_a_session_commit_keeps_and_rollback_deletes(engine, storage, chapter_id):
    with Session(engine) as session:
        kept = _add(session, storage, chapter_id, 1)
        session.commit()
        _add(session, storage, chapter_id, 2)
        session.rollback()
    assert _stored(storage) == [kept.storage_key] and _pages(engine) == 1


def test_on_a_session_a_rolled_back_savepoint_deletes_only_its_own(engine, storage, chapter_id):
    with Session(engine) as session:
        outer = _add(session, storage, chapter_id, 1)
        with pytest.raises(ZeroDivisionError), session.begin_nested():
            _add(session, storage, chapter_id, 2)
            raise ZeroDivisionError
        session.commit()
    assert _stored(storage) == [outer.storage_key] and _pages(engine) == 1
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 1


def test_in_autocommit_each_page_is_kept_once_inserted(engine, storage, chapter_id):
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        added = _add(conn, storage, chapter_id, 1)
        with pytest.raises(PageExists):
            _add(conn, storage, chapter_id, 1)
    assert _stored(storage) == [added.storage_key] and _pages(engine) == 1


@pytest.mark.parametrize("number", [True, 1.5, "1"])
def test_a_page_number_is_an_int(engine, storage, chapter_id, number):
    with engine.begin() as conn, pytest.raises(ValueError, match="page number"):
        add_page(conn, storage, chapter_id, number=number, data=png_bytes())
    assert _stored(storage) == []
