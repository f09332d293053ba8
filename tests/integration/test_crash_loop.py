"""Crash-loop protection: a job that kills every worker that runs it is
dead-lettered at its third reclaim, while one ordinary restart costs nothing."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, text

from manga_page_analysis.queue import (
    CRASH_LOOP_ERROR,
    KIND_ANALYZE_PAGE,
    KIND_SYNC_MANGA,
    RECLAIM_LIMIT,
    AnalyzePage,
    Lease,
    SyncManga,
    ack_failed,
    enqueue,
    lease,
    reclaim_expired,
    reclaim_orphaned,
)
from manga_page_analysis.worker import JobContext, NoopHandler, Runner
from manga_page_analysis.worker.reports.events import EventBus, JobEvent
from tests.helpers import expire_lease, job_row, wait_until
from tests.worker_support import png_bytes

MINUTE = timedelta(minutes=1)


def _crash(engine, kind: str = KIND_SYNC_MANGA) -> None:
    """A worker leases the job and dies: its lease simply runs out."""
    with engine.begin() as conn:
        (held,) = lease(conn, kind, 1, MINUTE)
        expire_lease(conn, held.id)


def test_the_third_reclaim_in_a_row_dead_letters_the_job(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="segfault"))
    assert RECLAIM_LIMIT == 3
    for crash in (1, 2):
        _crash(engine)
        with engine.begin() as conn:
            assert reclaim_orphaned(conn) == 1
            row = job_row(conn, job_id)
        # An ordinary restart costs no attempt, but it is counted.
        assert (row.state, row.attempts, row.reclaim_count) == ("pending", 0, crash)
        assert row.last_error is None

    _crash(engine)
    with engine.begin() as conn:
        reclaim = reclaim_expired(conn)
        row = job_row(conn, job_id)
    assert reclaim.released == [] and [lease.id for lease in reclaim.dead_lettered] == [job_id]
    assert reclaim.dead_lettered[0].lease_generation == row.lease_generation
    # Refunded three times; the end resets the count (its last_error says why).
    assert (row.state, row.attempts, row.reclaim_count) == ("dead", 1, 0)
    assert row.last_error == CRASH_LOOP_ERROR
    assert "3 times" in row.last_error and "crash its worker" in row.last_error
    with engine.begin() as conn:
        assert lease(conn, KIND_SYNC_MANGA, 1, MINUTE) == []
        assert reclaim_orphaned(conn) == 0


def test_an_attempt_that_ends_normally_resets_the_count(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="flaky"))
    for _ in range(2):
        _crash(engine)
        with engine.begin() as conn:
            reclaim_orphaned(conn)
    with engine.begin() as conn:
        (held,) = lease(conn, KIND_SYNC_MANGA, 1, MINUTE)
        assert ack_failed(conn, held, "upstream 502")
        assert job_row(conn, job_id).reclaim_count == 0
        conn.execute(
            text("UPDATE crawler_jobs SET scheduled_at = now() WHERE id = :id"), {"id": job_id}
        )
    # Two more crashes after a normal end: not three in a row, so not dead.
    for _ in range(2):
        _crash(engine)
        with engine.begin() as conn:
            reclaim_orphaned(conn)
    with engine.connect() as conn:
        row = job_row(conn, job_id)
    assert (row.state, row.reclaim_count, row.attempts) == ("pending", 2, 1)


def test_only_expired_leases_are_counted(engine):
    with engine.begin() as conn:
        live = enqueue(conn, SyncManga(source_id="s", source_manga_key="live"))
        lease(conn, KIND_SYNC_MANGA, 1, MINUTE)
        assert reclaim_orphaned(conn) == 0
        assert job_row(conn, live).reclaim_count == 0


def test_the_runner_records_a_failed_analysis_for_a_crash_looping_page(harness, vision_server):
    looping = harness.add_page(png_bytes(), page_number=1)
    restarted = harness.add_page(png_bytes(), page_number=2)
    looping_job = harness.request(looping)
    restarted_job = harness.request(restarted)
    with harness.engine.begin() as conn:
        conn.execute(
            text("UPDATE crawler_jobs SET reclaim_count = :n WHERE id = :id"),
            {"n": RECLAIM_LIMIT - 1, "id": looping_job},
        )
        conn.execute(
            text("UPDATE crawler_jobs SET reclaim_count = 0 WHERE id = :id"), {"id": restarted_job}
        )
        # Both were leased by a worker that then died.
        lease(conn, KIND_ANALYZE_PAGE, 2, MINUTE)
        expire_lease(conn, looping_job)
        expire_lease(conn, restarted_job)

    with harness.running():
        (failed,) = harness.events.wait_for("failed", looping)
        harness.events.wait_for("completed", restarted)

    assert failed.details["will_retry"] is False
    assert failed.details["error"] == CRASH_LOOP_ERROR
    dead = harness.job(looping_job)
    assert dead.state == "dead" and dead.last_error == CRASH_LOOP_ERROR
    analysis = harness.analysis(looping)
    assert analysis.status == "failed" and analysis.error == CRASH_LOOP_ERROR
    # The ordinary restart: refunded, run once, its count reset by the normal end.
    done = harness.job(restarted_job)
    assert (done.state, done.attempts, done.reclaim_count) == ("done", 1, 0)
    assert len(vision_server.requests) == 1


def test_a_crash_loop_of_a_page_already_analysed_keeps_the_good_row(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    with harness.running():
        harness.request(page_id)
        harness.events.wait_for("completed", page_id)
    with harness.engine.begin() as conn:
        forced = enqueue(conn, AnalyzePage(page_id=page_id, force=True))
        conn.execute(
            text("UPDATE crawler_jobs SET reclaim_count = 2 WHERE id = :id"), {"id": forced}
        )
        lease(conn, KIND_ANALYZE_PAGE, 1, MINUTE)
        expire_lease(conn, forced)
    with harness.running():
        harness.events.wait_for("failed", page_id)
    analysis = harness.analysis(page_id)
    assert analysis.status == "done" and analysis.error == CRASH_LOOP_ERROR
    assert harness.job(forced).state == "dead"
    assert len(vision_server.requests) == 1  # the crash-looping run never reached the model


class RecordingFailures(NoopHandler):
    """Records, from inside its `save_failure`, the thread and the transaction."""

    def __init__(self) -> None:
        super().__init__(KIND_SYNC_MANGA)
        self.recorded: list[tuple[str, int, str]] = []

    def breadcrumb(self, item: Lease) -> Mapping[str, Any] | None:
        return {"key": item.payload.source_manga_key}  # type: ignore[union-attr]

    def save_failure(self, conn: Connection, item: Lease, error: str, ctx: JobContext) -> None:
        txid = conn.execute(text("SELECT txid_current()")).scalar_one()
        self.recorded.append((threading.current_thread().name, int(txid), error))


def test_the_crash_loop_end_is_written_by_the_acker_in_one_transaction_with_its_record(engine):
    """Every job end has one writer: the crash-loop dead-lettering found by the
    runner's start-up reclaim (before the first lease) is written on the acker's
    thread, the dead row and the handler's record in one transaction, and is
    reported after."""
    with engine.begin() as conn:
        job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="segfault"))
        conn.execute(
            text("UPDATE crawler_jobs SET reclaim_count = :n WHERE id = :id"),
            {"n": RECLAIM_LIMIT - 1, "id": job_id},
        )
    _crash(engine)
    handler = RecordingFailures()
    events: list[JobEvent] = []
    bus = EventBus()
    bus.subscribe(events.append)
    runner = Runner(engine, [handler], workers=1, name="looping", events=bus, listen=False)
    runner.start()  # the start-up reclaim has handed the end to the acker
    try:
        wait_until(lambda: events, timeout=10)
        ((thread, txid, error),) = handler.recorded
        with engine.connect() as conn:
            row = job_row(conn, job_id)
            dead_row_txid = conn.execute(
                text("SELECT xmin::text::bigint FROM crawler_jobs WHERE id = :id"), {"id": job_id}
            ).scalar_one()
    finally:
        runner.stop()
        assert runner.join(10)
    assert thread == "looping-acker"
    assert (row.state, row.last_error, error) == ("dead", CRASH_LOOP_ERROR, CRASH_LOOP_ERROR)
    assert txid % 2**32 == dead_row_txid  # the row's dead state and the record: one commit
    (failed,) = [event for event in events if event.job_id == job_id]
    assert failed.type == "failed" and failed.details["will_retry"] is False
    assert failed.breadcrumb == {"key": "segfault"}
