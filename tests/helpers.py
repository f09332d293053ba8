"""Small helpers shared by the integration tests."""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, insert, text

from manga_page_analysis.models import Chapter, Job, Manga, Page

T = TypeVar("T")


def job_row(conn: Connection, job_id: uuid.UUID) -> Any:
    return conn.execute(
        text("SELECT *, now() AS db_now FROM crawler_jobs WHERE id = :id"), {"id": job_id}
    ).one()


def insert_raw_job(conn: Connection, payload: Any, **values: Any) -> uuid.UUID:
    """Insert a row the way another writer might, bypassing payload validation."""
    job_id: uuid.UUID = conn.execute(
        insert(Job).values(payload=payload, **values).returning(Job.id)
    ).scalar_one()
    return job_id


def queue_outcome(conn: Connection) -> tuple[collections.Counter[str], int, int]:
    """After a run: the jobs by state, the pages analysed `done`, and the
    attempts charged over all jobs."""
    states = collections.Counter(
        conn.execute(text("SELECT state FROM crawler_jobs")).scalars().all()
    )
    analysed = conn.execute(
        text("SELECT count(*) FROM page_analysis WHERE status = 'done'")
    ).scalar_one()
    attempts = conn.execute(
        text("SELECT coalesce(sum(attempts), 0) FROM crawler_jobs")
    ).scalar_one()
    return states, int(analysed), int(attempts)


def expire_lease(conn: Connection, job_id: uuid.UUID) -> None:
    conn.execute(
        text("UPDATE crawler_jobs SET leased_until = now() - interval '1 second' WHERE id = :id"),
        {"id": job_id},
    )


def make_page(
    conn: Connection,
    *,
    storage_key: str = "page.png",
    manga_title: str = "Yotsuba&!",
    chapter_number: str = "1",
    page_number: int = 1,
    content_type: str | None = "image/png",
) -> uuid.UUID:
    manga_id = conn.execute(
        insert(Manga).values(title=manga_title).returning(Manga.id)
    ).scalar_one()
    chapter_id = conn.execute(
        insert(Chapter)
        .values(manga_id=manga_id, number=Decimal(chapter_number), title="")
        .returning(Chapter.id)
    ).scalar_one()
    page_id: uuid.UUID = conn.execute(
        insert(Page)
        .values(
            chapter_id=chapter_id,
            number=page_number,
            storage_key=storage_key,
            content_type=content_type,
        )
        .returning(Page.id)
    ).scalar_one()
    return page_id


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05) -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def count(engine: Engine, sql: str, **params: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


def fail_first_call(real: Callable[..., T], error: BaseException) -> Callable[..., T]:
    """A stand-in for `real` that raises `error` on its first call only; `.calls` counts calls."""

    def stand_in(*args: Any, **kwargs: Any) -> T:
        stand_in.calls += 1  # type: ignore[attr-defined]
        if stand_in.calls == 1:  # type: ignore[attr-defined]
            raise error
        return real(*args, **kwargs)

    stand_in.calls = 0  # type: ignore[attr-defined]
    return stand_in
