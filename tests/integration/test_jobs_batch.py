"""Batched queue writes (enqueue_many, ack/renew/release many), the wake-up
notifications, and the lease plan not stepping over running rows."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, event, text

from manga_page_analysis.db import connect_kwargs
from manga_page_analysis.queue import (
    KIND_SYNC_CHAPTER_CONTENT,
    KIND_SYNC_MANGA,
    AnalyzePage,
    Lease,
    SyncChapterContent,
    SyncManga,
    ack_done_many,
    enqueue,
    enqueue_many,
    lease,
    release_many,
    release_unowned,
    renew_many,
)
from manga_page_analysis.queue.leasing import _lease_statement
from manga_page_analysis.queue.table import WAKEUP_CHANNEL, in_schema
from tests.helpers import job_row

LONG = timedelta(minutes=5)


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement sent through `engine` inside the block."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def manga(key: str) -> SyncManga:
    return SyncManga(source_id="s", source_manga_key=key)


def chapter(chapter_id: uuid.UUID) -> SyncChapterContent:
    return SyncChapterContent(source_id="s", chapter_id=chapter_id, source_chapter_key="k")


# --- enqueue_many -------------------------------------------------------------


def test_enqueue_many_is_one_statement_in_order_with_dedup_inside_and_across_calls(engine):
    first, second = uuid.uuid4(), uuid.uuid4()
    page = uuid.uuid4()
    with engine.begin() as conn:
        earlier = enqueue(conn, chapter(second))
    payloads = [
        manga("a"),
        chapter(first),
        chapter(first),  # same chapter inside the call: the first one wins
        chapter(second),  # already in flight from an earlier call
        AnalyzePage(page_id=page),
        AnalyzePage(page_id=page, force=True),
        manga("a"),  # crawl kinds without a dedup index are not deduplicated
    ]
    with engine.begin() as conn, statements(engine) as seen:
        ids = enqueue_many(conn, payloads)
    assert len(seen) == 1 and "INSERT INTO crawler_jobs" in seen[0]
    assert [job_id is None for job_id in ids] == [False, False, True, True, False, True, False]
    assert len({job_id for job_id in ids if job_id}) == 4 and earlier not in ids
    with engine.connect() as conn:
        for job_id, payload in zip(ids, payloads, strict=True):
            if job_id is not None:
                row = job_row(conn, job_id)
                assert row.payload == payload.to_json()
                assert row.state == "pending" and row.attempts == 0 and row.max_attempts == 5
        kept = job_row(conn, ids[4])
    assert kept.payload["force"] is False  # the first payload for the page took the slot

    with engine.begin() as conn:
        again = enqueue_many(conn, [chapter(first), manga("b")])
    assert again[0] is None and again[1] is not None
    with engine.begin() as conn:
        assert enqueue_many(conn, []) == []


def test_enqueue_many_honours_scheduled_at_and_max_attempts_and_rolls_back(engine):
    later = datetime.now(UTC) + timedelta(hours=1)
    with engine.begin() as conn:
        ids = enqueue_many(conn, [manga("x"), manga("y")], scheduled_at=later, max_attempts=2)
    with engine.connect() as conn:
        rows = [job_row(conn, job_id) for job_id in ids if job_id]
    assert len(rows) == 2
    assert all(row.scheduled_at == later and row.max_attempts == 2 for row in rows)
    with pytest.raises(ValueError), engine.begin() as conn:
        enqueue_many(conn, [manga("z")], max_attempts=0)

    with engine.connect() as conn:
        with conn.begin() as transaction:
            enqueue_many(conn, [manga("r1"), manga("r2")])
            transaction.rollback()
        assert conn.execute(text("SELECT count(*) FROM crawler_jobs")).scalar_one() == 2


# --- fenced batches with a stale generation inside -----------------------------


def _three_leases(engine) -> tuple[list[Lease], Lease]:
    """Three leased jobs; the second one's lease is then taken over (stale)."""
    with engine.begin() as conn:
        enqueue_many(conn, [manga(str(n)) for n in range(3)])
        held = lease(conn, KIND_SYNC_MANGA, 3, LONG)
    assert len(held) == 3
    with engine.begin() as conn:
        assert release_unowned(conn, held[1].id)
        (thief,) = lease(conn, KIND_SYNC_MANGA, 1, LONG)
    assert thief.id == held[1].id
    return held, thief


def test_ack_done_many_acks_current_leases_and_leaves_a_stale_one_alone(engine):
    held, thief = _three_leases(engine)
    with engine.begin() as conn, statements(engine) as seen:
        acked = ack_done_many(conn, held)
    assert len(seen) == 1
    assert acked == {held[0].id, held[2].id}
    with engine.connect() as conn:
        assert job_row(conn, held[0].id).state == "done"
        assert job_row(conn, held[2].id).state == "done"
        stolen = job_row(conn, thief.id)
    assert stolen.state == "running" and stolen.lease_generation == thief.lease_generation
    assert stolen.leased_until is not None


def test_renew_many_extends_current_leases_only(engine):
    held, thief = _three_leases(engine)
    with engine.connect() as conn:
        before = {job.id: job_row(conn, job.id).leased_until for job in held}
    with engine.begin() as conn, statements(engine) as seen:
        current = renew_many(conn, held, timedelta(hours=2))
    assert len(seen) == 1
    assert current == {held[0].id, held[2].id}
    with engine.connect() as conn:
        for job in (held[0], held[2]):
            assert job_row(conn, job.id).leased_until > before[job.id] + timedelta(minutes=30)
        assert job_row(conn, thief.id).leased_until == before[thief.id]


def test_release_many_gives_back_current_leases_only(engine):
    held, thief = _three_leases(engine)
    with engine.begin() as conn, statements(engine) as seen:
        released = release_many(conn, held)
    assert len(seen) == 1
    assert released == {held[0].id, held[2].id}
    with engine.connect() as conn:
        for job in (held[0], held[2]):
            row = job_row(conn, job.id)
            assert row.state == "pending" and row.attempts == 0
            assert row.lease_generation == job.lease_generation + 1 and row.leased_until is None
        stolen = job_row(conn, thief.id)
    assert stolen.state == "running" and stolen.lease_generation == thief.lease_generation


def test_batched_writes_with_nothing_to_do_send_nothing(engine):
    with engine.begin() as conn, statements(engine) as seen:
        assert ack_done_many(conn, []) == set()
        assert renew_many(conn, [], LONG) == set()
        assert release_many(conn, []) == set()
    assert seen == []


# --- wake-up notifications ---------------------------------------------------------


@contextmanager
def listening(engine: Engine) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(**{**connect_kwargs(engine), "autocommit": True}) as conn:
        conn.execute(f'LISTEN "{WAKEUP_CHANNEL}"')
        yield conn


def received(conn: psycopg.Connection[Any]) -> list[str]:
    """Notifications already delivered (they are sent at commit, before it returns)."""
    return [n.payload for n in conn.notifies(timeout=0.2)]


def test_enqueue_notifies_once_per_statement_at_commit_and_never_on_rollback(engine):
    with listening(engine) as listener:
        with engine.begin() as conn:
            enqueue_many(conn, [manga("1"), manga("2"), chapter(uuid.uuid4())])
            enqueue(conn, manga("3"))
        payloads = received(listener)
        # Two statements, but identical notifications fold into one per transaction.
        assert len(payloads) == 2
        assert set(payloads[0].split(",")) == {KIND_SYNC_MANGA, KIND_SYNC_CHAPTER_CONTENT}
        assert payloads[1] == KIND_SYNC_MANGA

        with engine.connect() as conn, conn.begin() as transaction:
            enqueue(conn, manga("rolled back"))
            transaction.rollback()
        with engine.begin() as conn:
            enqueue(conn, manga("later"), scheduled_at=datetime.now(UTC) + timedelta(hours=1))
        assert received(listener) == []


def test_a_job_moved_back_to_pending_and_due_notifies(engine):
    with engine.begin() as conn:
        enqueue(conn, manga("r"))
        (held,) = lease(conn, KIND_SYNC_MANGA, 1, LONG)
    with listening(engine) as listener:
        with engine.begin() as conn:
            assert release_many(conn, [held]) == {held.id}
        assert received(listener) == [KIND_SYNC_MANGA]
        with engine.begin() as conn:
            (again,) = lease(conn, KIND_SYNC_MANGA, 1, LONG)
            assert ack_done_many(conn, [again]) == {again.id}
        assert received(listener) == []  # leases and acks send nothing


# --- the lease plan -------------------------------------------------------------


@pytest.mark.slow
def test_the_lease_does_not_step_over_running_rows(engine):
    """100,000 due pending rows and 64 running ones scheduled ahead of them:
    the lease reads only the rows it takes (plus nothing filtered away)."""
    payload = json.dumps(manga("p").to_json())
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO crawler_jobs (payload, scheduled_at) "
                "SELECT CAST(:payload AS jsonb), now() - interval '1 hour' "
                "FROM generate_series(1, 100000)"
            ),
            {"payload": payload},
        )
        conn.execute(
            text(
                "INSERT INTO crawler_jobs (payload, state, leased_until, scheduled_at, attempts) "
                "SELECT CAST(:payload AS jsonb), 'running', now() + interval '1 hour', "
                "now() - interval '2 hours', 1 FROM generate_series(1, 64)"
            ),
            {"payload": payload},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE crawler_jobs"))

    for kinds in ((KIND_SYNC_MANGA,), None):
        statement = in_schema(_lease_statement(kinds, 16), "public")
        with engine.connect() as conn, conn.begin() as transaction:
            sql = statement.replace("%(lease_duration)s", "'60 seconds'").replace(
                "%(holder)s", "'bench:1:worker:0'"
            )
            (plan,) = conn.execute(
                text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql)
            ).scalar_one()
            transaction.rollback()
        nodes = list(_walk(plan["Plan"]))
        scans = [node for node in nodes if "Scan" in node["Node Type"]]
        assert scans and all(node["Node Type"] != "Seq Scan" for node in scans), scans
        assert sum(node.get("Rows Removed by Filter", 0) for node in nodes) == 0
        # No scan reads more rows than the lease takes: never the 64 running ones.
        assert max(node["Actual Rows"] for node in scans) <= 16
        assert plan["Plan"]["Actual Rows"] == 16  # the UPDATE returned 16 leases


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _walk(child)
