"""The jobs repository on a real Postgres: every function of the public queue API (docs/api.md)."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from manga_page_analysis.queue import (
    KIND_ANALYZE_PAGE,
    KIND_SYNC_CHAPTER_CONTENT,
    KIND_SYNC_MANGA,
    AnalyzePage,
    SyncChapterContent,
    SyncManga,
    ack_done,
    ack_failed,
    enqueue,
    lease,
    lease_kinds,
    reap_done,
    reclaim_orphaned,
    release,
    release_unowned,
    renew,
)
from tests.helpers import count, expire_lease, insert_raw_job, job_row

MINUTE = timedelta(minutes=1)

# The contract holds through PgBouncer in transaction mode too (testbed/pgbouncer.py).
pytestmark = pytest.mark.pgbouncer


def manga(key: str = "k") -> SyncManga:
    return SyncManga(source_id="src", source_manga_key=key)


def chapter_content(chapter_id: uuid.UUID) -> SyncChapterContent:
    return SyncChapterContent(source_id="src", chapter_id=chapter_id, source_chapter_key="c")


def make_due(conn, job_id: uuid.UUID) -> None:
    conn.execute(
        text("UPDATE crawler_jobs SET scheduled_at = now() - interval '1 s' WHERE id = :id"),
        {"id": job_id},
    )


# --- enqueue -------------------------------------------------------------


def test_enqueue_inserts_a_pending_job_with_the_documented_defaults(engine):
    page_id = uuid.uuid4()
    with engine.begin() as conn:
        job_id = enqueue(conn, AnalyzePage(page_id=page_id))
        row = job_row(conn, job_id)
    assert isinstance(job_id, uuid.UUID)
    assert row.state == "pending"
    assert (row.attempts, row.max_attempts, row.lease_generation) == (0, 5, 0)
    assert row.payload == {"kind": "analyze_page", "page_id": str(page_id), "force": False}
    assert row.leased_until is None and row.last_error is None
    assert row.scheduled_at <= row.db_now


def test_enqueue_honours_scheduled_at_and_max_attempts(engine):
    later = datetime.now(UTC) + timedelta(hours=2)
    with engine.begin() as conn:
        job_id = enqueue(conn, manga(), scheduled_at=later, max_attempts=2)
        row = job_row(conn, job_id)
    assert row.scheduled_at == later
    assert row.max_attempts == 2
    with pytest.raises(ValueError), engine.begin() as conn:
        enqueue(conn, manga(), max_attempts=0)


def test_enqueue_inside_a_transaction_that_rolls_back_leaves_no_job(engine):
    with engine.connect() as conn, conn.begin() as transaction:
        assert enqueue(conn, manga()) is not None
        transaction.rollback()
    with Session(engine) as session:
        assert enqueue(session, manga()) is not None
        session.rollback()
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_enqueue_with_a_session_is_committed_by_the_caller_only(engine):
    with Session(engine) as session:
        job_id = enqueue(session, manga())
        assert count(engine, "SELECT count(*) FROM crawler_jobs") == 0  # not committed yet
        session.commit()
    with engine.connect() as conn:
        assert job_row(conn, job_id).state == "pending"


def test_dedup_one_in_flight_job_per_chapter_and_per_page(engine):
    chapter_id, page_id = uuid.uuid4(), uuid.uuid4()
    with engine.begin() as conn:
        first = enqueue(conn, chapter_content(chapter_id))
        assert first is not None
        assert enqueue(conn, chapter_content(chapter_id)) is None
        assert enqueue(conn, chapter_content(uuid.uuid4())) is not None
        assert enqueue(conn, AnalyzePage(page_id=page_id)) is not None
        assert enqueue(conn, AnalyzePage(page_id=page_id, force=True)) is None
        # Crawl jobs of other kinds are never deduplicated.
        assert enqueue(conn, manga()) is not None
        assert enqueue(conn, manga()) is not None
    with engine.begin() as conn:
        (held,) = [
            held for held in lease(conn, KIND_SYNC_CHAPTER_CONTENT, 10, MINUTE) if held.id == first
        ]
        # Still running: the slot stays taken.
        assert enqueue(conn, chapter_content(chapter_id)) is None
        assert ack_done(conn, held)
        # Done: the slot is free again.
        assert enqueue(conn, chapter_content(chapter_id)) is not None


# --- lease ---------------------------------------------------------------


def test_lease_orders_by_scheduled_at_then_created_at(engine):
    base = datetime.now(UTC) - timedelta(hours=1)
    with engine.begin() as conn:
        ids = {}
        for name, scheduled_offset, created_offset in [
            ("c", 2, 0),
            ("a", 0, 5),
            ("b", 1, 0),
            ("a2", 0, 6),
            ("a1", 0, 1),
        ]:
            ids[name] = insert_raw_job(
                conn,
                manga(name).to_json(),
                scheduled_at=base + timedelta(seconds=scheduled_offset),
                created_at=base + timedelta(seconds=created_offset),
            )
    with engine.begin() as conn:
        leased = lease(conn, None, 10, MINUTE)
    assert [held.id for held in leased] == [ids[n] for n in ("a1", "a", "a2", "b", "c")]


def test_lease_filters_by_kind_and_none_means_any(engine):
    with engine.begin() as conn:
        crawl = enqueue(conn, manga())
        analysis = enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
        chapter = enqueue(conn, chapter_content(uuid.uuid4()))
    with engine.begin() as conn:
        assert [held.id for held in lease(conn, KIND_ANALYZE_PAGE, 10, MINUTE)] == [analysis]
        assert [held.id for held in lease(conn, KIND_ANALYZE_PAGE, 10, MINUTE)] == []
        assert lease_kinds(conn, [], 10, MINUTE) == []
        # Kinds are written into the statement: only registered ones ever are
        # (their names cannot hold quotes or `%`); others lease nothing.
        assert lease_kinds(conn, ["o'clock", "50%(x)s off"], 10, MINUTE) == []
        assert {
            held.id for held in lease_kinds(conn, [KIND_SYNC_MANGA, "unknown"], 10, MINUTE)
        } == {crawl}
        assert [held.id for held in lease(conn, None, 10, MINUTE)] == [chapter]


def test_lease_skips_jobs_scheduled_in_the_future(engine):
    with engine.begin() as conn:
        enqueue(conn, manga("later"), scheduled_at=datetime.now(UTC) + MINUTE)
        due = enqueue(conn, manga("due"), scheduled_at=datetime.now(UTC) - MINUTE)
    with engine.begin() as conn:
        assert [held.id for held in lease(conn, None, 10, MINUTE)] == [due]


def test_lease_marks_running_and_bumps_attempts_and_generation(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, manga())
    with engine.begin() as conn:
        (held,) = lease(conn, KIND_SYNC_MANGA, 5, timedelta(seconds=90))
        row = job_row(conn, job_id)
    assert held.id == job_id and held.payload == manga()
    assert (held.attempts, held.max_attempts, held.lease_generation) == (1, 5, 1)
    assert row.state == "running" and row.attempts == 1 and row.lease_generation == 1
    assert row.leased_until - row.db_now == timedelta(seconds=90)


def test_lease_without_a_holder_leaves_leased_by_null(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, manga())
    with engine.begin() as conn:
        (held,) = lease(conn, KIND_SYNC_MANGA, 5, MINUTE)
        assert job_row(conn, job_id).leased_by is None
        assert ack_done(conn, held)
        assert job_row(conn, job_id).leased_by is None


def test_the_holder_is_written_by_the_lease_and_kept_by_every_end(engine):
    with engine.begin() as conn:
        done, failed, released, reclaimed = (
            enqueue(conn, manga(key)) for key in ("done", "failed", "released", "reclaimed")
        )
    with engine.begin() as conn:
        held_by_a = lease_kinds(conn, [KIND_SYNC_MANGA], 5, MINUTE, holder="a:1:w:x")
        leases = {held.id: held for held in held_by_a}
        assert {job_row(conn, job_id).leased_by for job_id in leases} == {"a:1:w:x"}
        assert ack_done(conn, leases[done])
        assert ack_failed(conn, leases[failed], "boom")
        assert release(conn, leases[released])
        expire_lease(conn, reclaimed)
        assert reclaim_orphaned(conn) == 1
        rows = {job_id: job_row(conn, job_id) for job_id in leases}
    assert [rows[job_id].state for job_id in (done, failed, released, reclaimed)] == [
        "done",
        "pending",
        "pending",
        "pending",
    ]
    assert {row.leased_by for row in rows.values()} == {"a:1:w:x"}  # never cleared

    # The next lease names its own holder; one that names none leaves no stale name.
    with engine.begin() as conn:
        make_due(conn, failed)
        again = lease(conn, None, 10, MINUTE, holder="b:2:w:y")
        assert {held.id for held in again} == {failed, released, reclaimed}
        assert {job_row(conn, held.id).leased_by for held in again} == {"b:2:w:y"}
        assert release(conn, again[0])
        (anonymous,) = lease(conn, None, 10, MINUTE)
        assert anonymous.id == again[0].id
        assert job_row(conn, anonymous.id).leased_by is None


def test_live_leases_are_not_released_but_expired_ones_are_re_leased(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, manga())
    with engine.begin() as conn:
        (first,) = lease(conn, None, 5, MINUTE)
    with engine.begin() as conn:
        assert lease(conn, None, 5, MINUTE) == []
        expire_lease(conn, job_id)
    with engine.begin() as conn:
        (second,) = lease(conn, None, 5, MINUTE)
    assert second.id == job_id
    assert second.lease_generation == first.lease_generation + 1
    assert second.attempts == 2
    with engine.begin() as conn:
        assert not renew(conn, first, MINUTE)
        assert renew(conn, second, MINUTE)


def test_an_expired_lease_on_the_final_attempt_goes_dead_instead_of_looping(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, manga(), max_attempts=1)
    with engine.begin() as conn:
        assert len(lease(conn, None, 5, MINUTE)) == 1
        expire_lease(conn, job_id)
    with engine.begin() as conn:
        assert lease(conn, None, 5, MINUTE) == []
        row = job_row(conn, job_id)
    assert row.state == "dead"
    assert "final attempt" in row.last_error


def test_a_poison_row_goes_dead_in_the_same_call_and_the_batch_survives(engine, caplog):
    with engine.begin() as conn:
        good_1 = enqueue(conn, manga("1"))
        foreign = insert_raw_job(conn, {"kind": "teleport", "page_id": "x"})
        poison = insert_raw_job(conn, {"kind": "analyze_page", "page_id": "not-a-uuid"})
        good_2 = enqueue(conn, manga("2"))
    with caplog.at_level(logging.ERROR, logger="manga_page_analysis.queue"), engine.begin() as conn:
        leased = lease(conn, None, 10, MINUTE)
    assert [held.id for held in leased] == [good_1, good_2]
    with engine.connect() as conn:
        row = job_row(conn, poison)
        assert row.state == "dead"
        assert row.last_error.startswith("invalid job payload") and "page_id" in row.last_error
        assert str(poison) in caplog.text
        # A kind not registered here is some other process's, not poison: released.
        row = job_row(conn, foreign)
        assert (row.state, row.attempts, row.last_error) == ("pending", 0, None)
        assert str(foreign) not in caplog.text
    with engine.begin() as conn:
        assert lease(conn, None, 10, MINUTE) == []


# --- renew / ack / release -------------------------------------------------


def _leased(engine, payload=None, **enqueue_kwargs):
    with engine.begin() as conn:
        job_id = enqueue(conn, payload or manga(), **enqueue_kwargs)
    with engine.begin() as conn:
        (held,) = [held for held in lease(conn, None, 100, MINUTE) if held.id == job_id]
    return held


def test_renew_extends_the_lease_while_current(engine):
    held = _leased(engine)
    with engine.begin() as conn:
        assert renew(conn, held, timedelta(minutes=10))
        row = job_row(conn, held.id)
    assert timedelta(minutes=9) < row.leased_until - row.db_now <= timedelta(minutes=10)


def test_renew_is_false_after_release_and_logs_the_job(engine, caplog):
    held = _leased(engine)
    with engine.begin() as conn:
        assert release(conn, held)
    with (
        caplog.at_level(logging.WARNING, logger="manga_page_analysis.queue"),
        engine.begin() as conn,
    ):
        assert not renew(conn, held, MINUTE)
    assert str(held.id) in caplog.text and "lease gone" in caplog.text


def test_ack_done_only_once_and_only_while_current(engine):
    held = _leased(engine)
    with engine.begin() as conn:
        assert ack_done(conn, held)
        assert not ack_done(conn, held)
        row = job_row(conn, held.id)
    assert row.state == "done" and row.leased_until is None


def test_stale_generation_writes_change_nothing(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, manga())
    with engine.begin() as conn:
        (stale,) = lease(conn, None, 5, MINUTE)
        expire_lease(conn, job_id)
    with engine.begin() as conn:
        (current,) = lease(conn, None, 5, MINUTE)
        before = job_row(conn, job_id)
    with engine.begin() as conn:
        assert not renew(conn, stale, timedelta(hours=5))
        assert not ack_done(conn, stale)
        assert not ack_failed(conn, stale, "late failure")
        assert not release(conn, stale)
        after = job_row(conn, job_id)
    assert after._asdict() | {"db_now": None} == before._asdict() | {"db_now": None}
    with engine.begin() as conn:
        assert ack_done(conn, current)


def test_ack_failed_reschedules_within_the_jitter_band_and_records_the_error(engine):
    held = _leased(engine)
    with engine.begin() as conn:
        assert ack_failed(conn, held, "vision server said 500")
        row = job_row(conn, held.id)
    assert row.state == "pending" and row.leased_until is None
    assert row.last_error == "vision server said 500"
    delay = row.scheduled_at - row.db_now
    assert timedelta(seconds=48) <= delay <= timedelta(seconds=72)
    with engine.begin() as conn:
        assert lease(conn, None, 5, MINUTE) == []  # not due yet


def test_ack_failed_backoff_grows_with_attempts(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, manga())
    for attempt in (1, 2, 3):
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE crawler_jobs SET scheduled_at = now() - interval '1 s' WHERE id = :id"
                ),
                {"id": job_id},
            )
            (held,) = lease(conn, None, 5, MINUTE)
            assert held.attempts == attempt
            assert ack_failed(conn, held, f"failure {attempt}")
            row = job_row(conn, job_id)
        base = 60 * 2 ** (attempt - 1)
        assert timedelta(seconds=0.8 * base) <= row.scheduled_at - row.db_now
        assert row.scheduled_at - row.db_now <= timedelta(seconds=1.2 * base)


def test_ack_failed_goes_dead_at_max_attempts(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, manga(), max_attempts=2)
    for _ in range(2):
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE crawler_jobs SET scheduled_at = now() - interval '1 s' WHERE id = :id"
                ),
                {"id": job_id},
            )
            (held,) = lease(conn, None, 5, MINUTE)
            assert ack_failed(conn, held, f"boom on attempt {held.attempts}")
    with engine.connect() as conn:
        row = job_row(conn, job_id)
    assert row.state == "dead" and row.attempts == 2
    assert row.last_error == "boom on attempt 2"


def test_last_error_is_truncated(engine):
    held = _leased(engine)
    with engine.begin() as conn:
        ack_failed(conn, held, "x" * 100_000)
        row = job_row(conn, held.id)
    assert len(row.last_error) <= 4000 and row.last_error.endswith("[truncated]")


def test_release_refunds_the_attempt_and_bumps_the_generation(engine):
    held = _leased(engine)
    with engine.begin() as conn:
        assert release(conn, held)
        row = job_row(conn, held.id)
        assert not release(conn, held)
    assert row.state == "pending" and row.attempts == 0 and row.leased_until is None
    assert row.lease_generation == held.lease_generation + 1
    with engine.begin() as conn:
        (again,) = lease(conn, None, 5, MINUTE)
    assert again.id == held.id and again.attempts == 1


def test_release_unowned_gives_back_any_running_row_only(engine):
    held = _leased(engine)
    with engine.begin() as conn:
        pending = enqueue(conn, manga("other"))
        assert not release_unowned(conn, pending)
        assert not release_unowned(conn, uuid.uuid4())
        assert release_unowned(conn, held.id)
        row = job_row(conn, held.id)
        assert not ack_done(conn, held)
    assert row.state == "pending" and row.attempts == 0
    assert row.lease_generation == held.lease_generation + 1


def test_reclaim_orphaned_only_touches_expired_leases(engine):
    orphan = _leased(engine, manga("orphan"))
    live = _leased(engine, manga("live"))
    with engine.begin() as conn:
        expire_lease(conn, orphan.id)
        pending = enqueue(conn, manga("pending"))
    with engine.begin() as conn:
        assert reclaim_orphaned(conn) == 1
        orphan_row, live_row = job_row(conn, orphan.id), job_row(conn, live.id)
        assert job_row(conn, pending).state == "pending"
    assert orphan_row.state == "pending" and orphan_row.attempts == 0
    assert orphan_row.lease_generation == orphan.lease_generation + 1
    assert live_row.state == "running" and live_row.lease_generation == live.lease_generation
    with engine.begin() as conn:
        assert reclaim_orphaned(conn) == 0
        assert renew(conn, live, MINUTE)
        assert not renew(conn, orphan, MINUTE)


def test_reap_done_deletes_old_done_rows_only_and_zero_disables(engine):
    old_done = _leased(engine, manga("old"))
    new_done = _leased(engine, manga("new"))
    old_dead = _leased(engine, manga("dead"), max_attempts=1)
    with engine.begin() as conn:
        ack_done(conn, old_done)
        ack_done(conn, new_done)
        ack_failed(conn, old_dead, "gone")
        conn.execute(
            text(
                "UPDATE crawler_jobs SET updated_at = now() - interval '8 days' "
                "WHERE id IN (:a, :b)"
            ),
            {"a": old_done.id, "b": old_dead.id},
        )
    with engine.begin() as conn:
        assert reap_done(conn, 0) == 0
        assert reap_done(conn, 30) == 0
        assert reap_done(conn, 7) == 1
    remaining = count(engine, "SELECT count(*) FROM crawler_jobs WHERE id = :id", id=old_done.id)
    assert remaining == 0
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 2
