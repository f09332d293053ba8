"""The end of an attempt, batched and fenced: ack done / failed / dead for many
leases in one statement, acking first as a fenced completion, and the crash
counter that every ending attempt resets."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from manga_page_analysis.queue import (
    KIND_SYNC_MANGA,
    Lease,
    SyncManga,
    ack_dead,
    ack_dead_many,
    ack_done,
    ack_done_many,
    ack_failed,
    ack_failed_many,
    enqueue_many,
    lease,
    release_unowned,
    release_unowned_many,
)
from tests.helpers import job_row

LONG = timedelta(minutes=5)


def _leases(engine, count: int, *, max_attempts: int = 5) -> list[Lease]:
    with engine.begin() as conn:
        payloads = [SyncManga(source_id="s", source_manga_key=f"k{n}") for n in range(count)]
        enqueue_many(conn, payloads, max_attempts=max_attempts)
        held = lease(conn, KIND_SYNC_MANGA, count, LONG)
    assert len(held) == count
    return held


def _steal(engine, held: Lease) -> Lease:
    """Take the job's lease away from `held`: released, then leased again."""
    with engine.begin() as conn:
        assert release_unowned(conn, held.id)
        (thief,) = lease(conn, KIND_SYNC_MANGA, 1, LONG)
    assert thief.id == held.id
    return thief


def test_ack_failed_many_retries_or_buries_each_job_and_skips_a_stale_lease(engine):
    held = _leases(engine, 3, max_attempts=1)
    retried = _leases(engine, 1)[0]
    thief = _steal(engine, held[1])
    failures = [(held[0], "boom 0"), (held[1], "late"), (held[2], "boom 2"), (retried, "again")]
    with engine.begin() as conn:
        written = ack_failed_many(conn, failures)
    assert written == {held[0].id, held[2].id, retried.id}
    with engine.connect() as conn:
        for job, error in ((held[0], "boom 0"), (held[2], "boom 2")):
            row = job_row(conn, job.id)
            assert (row.state, row.last_error, row.leased_until) == ("dead", error, None)
        again = job_row(conn, retried.id)
        stolen = job_row(conn, thief.id)
    assert again.state == "pending" and again.last_error == "again"
    # Backoff after the first attempt: 60 s with a jitter of ±20 %.
    assert timedelta(seconds=47) <= again.scheduled_at - again.db_now <= timedelta(seconds=73)
    assert stolen.state == "running" and stolen.lease_generation == thief.lease_generation
    assert stolen.last_error is None


def test_ack_dead_many_buries_current_leases_whatever_their_attempts(engine):
    held = _leases(engine, 2)
    thief = _steal(engine, held[0])
    with engine.begin() as conn:
        assert ack_dead_many(conn, [(held[0], "stale"), (held[1], "no retry can fix this")]) == {
            held[1].id
        }
    with engine.connect() as conn:
        assert job_row(conn, held[1].id).state == "dead"
        assert job_row(conn, thief.id).state == "running"


def test_acking_first_locks_the_rows_until_the_result_is_written(engine):
    held = _leases(engine, 2)
    thief = _steal(engine, held[1])
    with engine.connect() as writer, engine.connect() as other:
        transaction = writer.begin()
        acked = ack_done_many(writer, held)
        assert acked == {held[0].id}  # only this one's result may be written
        # Until the writer commits, nothing can give the acked job back.
        with pytest.raises(OperationalError), other.begin():
            other.execute(text("SET LOCAL lock_timeout = '50ms'"))
            release_unowned(other, held[0].id)
        transaction.commit()
        with other.begin():
            assert not release_unowned(other, held[0].id)  # done: nothing to release
    with engine.connect() as conn:
        assert job_row(conn, held[0].id).state == "done"
        assert job_row(conn, thief.id).lease_generation == thief.lease_generation


@pytest.mark.parametrize(
    "end",
    [
        lambda conn, held: ack_done(conn, held),
        lambda conn, held: ack_failed(conn, held, "failed"),
        lambda conn, held: ack_dead(conn, held, "dead"),
    ],
    ids=["done", "failed", "dead"],
)
def test_every_ending_attempt_resets_the_crash_counter(engine, end):
    (held,) = _leases(engine, 1)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE crawler_jobs SET reclaim_count = 2 WHERE id = :id"), {"id": held.id}
        )
        assert end(conn, held)
    with engine.connect() as conn:
        assert job_row(conn, held.id).reclaim_count == 0


def test_release_unowned_many_gives_back_running_rows_only(engine):
    held = _leases(engine, 2)
    with engine.begin() as conn:
        assert ack_done(conn, held[1])
        released = release_unowned_many(conn, [held[0].id, held[1].id, uuid.uuid4()])
    assert released == {held[0].id}
    with engine.connect() as conn:
        row = job_row(conn, held[0].id)
    assert row.state == "pending" and row.lease_generation == held[0].lease_generation + 1
