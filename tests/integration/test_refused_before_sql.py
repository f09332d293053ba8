"""Inputs Postgres cannot store are refused before any SQL, with the package's own
error, and the host's transaction stays usable: a NUL character (common in scraped
text) or a lone surrogate in a payload or a page's manga fields, numbers outside
their column's range, page numbers below 1 and negative chapter numbers."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Literal

import pytest
from sqlalchemy import Engine, text

from manga_page_analysis.errors import PayloadError
from manga_page_analysis.pages import PageRefused, add_page, ensure_chapter, ensure_manga
from manga_page_analysis.queue import SyncManga, enqueue, enqueue_many
from manga_page_analysis.queue.kinds import Payload, register_kind, unregister_kind
from manga_page_analysis.storage import LocalStorage
from tests.helpers import count
from tests.worker_support import png_bytes

NUL = "scraped\x00text"
SURROGATE = "half \ud83d of an emoji"


def _manga(title: str = "t", source_manga_key: str = "k") -> SyncManga:
    return SyncManga(source_id="s", source_manga_key=source_manga_key, title=title)


def _still_usable(conn: Any) -> None:
    """The transaction still runs statements (a failed statement would abort it)."""
    assert conn.execute(text("SELECT 1")).scalar() == 1


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_enqueue_refuses_an_unstorable_payload_and_the_transaction_goes_on(engine, bad):
    with engine.begin() as conn:
        enqueue(conn, _manga("kept"))
        with pytest.raises(PayloadError, match=r"NUL|surrogate"):
            enqueue(conn, _manga(bad))
        _still_usable(conn)
        enqueue(conn, _manga("kept too", "k2"))
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 2


def test_a_backslash_before_u0000_is_text_not_a_nul(engine):
    with engine.begin() as conn:
        assert enqueue(conn, _manga("C:\\u0000dir")) is not None
        title = conn.execute(text("SELECT payload ->> 'title' FROM crawler_jobs")).scalar()
    assert title == "C:\\u0000dir"


def test_enqueue_many_names_the_bad_payload_and_inserts_nothing(engine):
    with engine.begin() as conn:
        with pytest.raises(PayloadError, match="NUL"):
            enqueue_many(conn, [_manga("a", "1"), _manga(NUL, "2"), _manga("c", "3")])
        _still_usable(conn)
        assert len(enqueue_many(conn, [_manga("a", "1")])) == 1
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 1


def test_max_attempts_past_the_columns_range_is_refused_before_sql(engine):
    with engine.begin() as conn:
        with pytest.raises(ValueError, match="max_attempts"):
            enqueue(conn, _manga(), max_attempts=2**31)
        _still_usable(conn)


# --- pages, chapters, mangas -------------------------------------------------------


@pytest.fixture
def chapter_id(engine: Engine) -> uuid.UUID:
    with engine.begin() as conn:
        manga_id = ensure_manga(conn, source_id="site", source_key="blame", title="Blame!")
        return ensure_chapter(conn, manga_id, number=1)


@pytest.mark.parametrize("number", [0, -1, 2**31, 10**30])
def test_a_page_number_outside_1_to_int_max_is_refused(engine, tmp_path: Path, chapter_id, number):
    storage = LocalStorage(tmp_path)
    with engine.begin() as conn:
        with pytest.raises(PageRefused, match="page number"):
            add_page(conn, storage, chapter_id, number=number, data=png_bytes())
        _still_usable(conn)
    assert count(engine, "SELECT count(*) FROM pages") == 0
    assert not any(tmp_path.rglob("*.png"))


@pytest.mark.parametrize("number", ["-5", -5, "1e1000000", "1000001", "9" * 50])
def test_a_chapter_number_outside_its_range_is_refused(engine, number):
    with engine.begin() as conn:
        manga_id = ensure_manga(conn, source_id="s", source_key="k", title="t")
        with pytest.raises(PageRefused, match="chapter number"):
            ensure_chapter(conn, manga_id, number=number)
        _still_usable(conn)
        assert ensure_chapter(conn, manga_id, number=0) is not None  # a prologue is fine


@pytest.mark.parametrize(
    "field",
    ["source_id", "source_key", "title"],
)
@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_manga_fields_postgres_cannot_store_are_refused(engine, field, bad):
    fields = {"source_id": "s", "source_key": "k", "title": "t", field: bad}
    with engine.begin() as conn:
        with pytest.raises(PageRefused, match=r"NUL|surrogate"):
            ensure_manga(conn, **fields)
        _still_usable(conn)
    assert count(engine, "SELECT count(*) FROM mangas") == 0


def test_a_one_megabyte_title_is_refused_where_it_is_stored(engine):
    with engine.begin() as conn:
        with pytest.raises(PageRefused, match="characters"):
            ensure_manga(conn, source_id="s", source_key="k", title="x" * 1_000_000)
        manga_id = ensure_manga(conn, source_id="s", source_key="k", title="ok")
        with pytest.raises(PageRefused, match="characters"):
            ensure_chapter(conn, manga_id, number=1, title="y" * 100_000)


@pytest.mark.parametrize("key", ["host/a\x00.png", "host/", "host//a.png", "host/./a.png"])
def test_a_storage_key_s3_would_mangle_is_refused(engine, tmp_path: Path, chapter_id, key):
    with engine.begin() as conn:
        with pytest.raises(PageRefused):
            add_page(conn, LocalStorage(tmp_path), chapter_id, number=1, storage_key=key)
        _still_usable(conn)


# --- kinds -------------------------------------------------------------------------


class UnknownPayload(Payload):
    kind: Literal["unknown"] = "unknown"


class ClashPayload(Payload):
    kind: Literal["clash_kind"] = "clash_kind"
    item: str


def test_register_kind_refuses_the_admins_unknown_bucket():
    with pytest.raises(ValueError, match="reserved"):
        register_kind(UnknownPayload)


@pytest.mark.parametrize("index", ["pk_pages", "uq_crawler_jobs_analyze_page_inflight"])
def test_register_kind_refuses_a_dedup_index_named_like_one_of_ours(index):
    try:
        with pytest.raises(ValueError, match="dedup_index"):
            register_kind(ClashPayload, dedup_field="item", dedup_index=index)
    finally:
        unregister_kind("clash_kind")
