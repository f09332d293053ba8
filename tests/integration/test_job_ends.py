"""Every end of a job gets the same record, whoever writes it: the ends found
at lease (a crash loop, a final attempt whose lease expired, a poison row) are
written by the runner's one writer with the page's `page_analysis.error`, the
`failed` event, the metric and the log line, as a handler's failure is."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from manga_page_analysis.queue import (
    CRASH_LOOP_ERROR,
    KIND_SYNC_MANGA,
    RECLAIM_LIMIT,
    AnalyzePage,
    SyncManga,
    enqueue,
    lease,
)
from manga_page_analysis.queue.ends import FINAL_ATTEMPT_EXPIRED
from tests.helpers import expire_lease, job_row, wait_until
from tests.worker_support import png_bytes

MINUTE = timedelta(minutes=1)


class Finished:
    """A runner observer that records `job_finished` (what the metric counts)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def job_finished(self, kind: str, outcome: str, seconds: float) -> None:
        with self._lock:
            self.calls.append((kind, outcome))


def _crashed_under(runner: Any, engine: Any, page_id: uuid.UUID, **columns: Any) -> uuid.UUID:
    """A job for the page, running under a lease that expired (its worker died),
    made once the runner's start-up reclaim and the leader's first reclaim are
    behind it: only a lease finds it then (the next reclaim is minutes away)."""
    wait_until(lambda: runner.maintainer.reclaims >= 1, timeout=15)
    sets = "".join(f", {name} = :{name}" for name in columns)
    with engine.begin() as conn:
        later = conn.execute(text("SELECT now() + interval '1 hour'")).scalar_one()
        job_id = enqueue(conn, AnalyzePage(page_id=page_id), scheduled_at=later)
        assert job_id is not None
        conn.execute(
            text(
                "UPDATE crawler_jobs SET scheduled_at = now(), state = 'running', attempts = 1, "
                f"lease_generation = 1, leased_until = now() - interval '1 second'{sets} "
                "WHERE id = :id"
            ),
            {**columns, "id": job_id},
        )
        conn.execute(text("NOTIFY crawler_jobs_wakeup"))
    return job_id


def test_a_crash_loop_found_by_a_lease_is_dead_lettered_and_recorded(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    observer = Finished()
    with harness.running(observer=observer, reclaim_interval_seconds=600) as runner:
        job_id = _crashed_under(runner, harness.engine, page_id, reclaim_count=RECLAIM_LIMIT - 1)
        (failed,) = harness.events.wait_for("failed", page_id)
    assert failed.details["will_retry"] is False
    assert failed.details["error"] == CRASH_LOOP_ERROR
    row = harness.job(job_id)
    assert (row.state, row.last_error) == ("dead", CRASH_LOOP_ERROR)
    analysis = harness.analysis(page_id)
    assert (analysis.status, analysis.error) == ("failed", CRASH_LOOP_ERROR)
    assert ("analyze_page", "dead") in observer.calls
    assert vision_server.requests == []  # it never ran


def test_a_final_attempt_whose_lease_expired_is_dead_lettered_and_recorded(harness):
    page_id = harness.add_page(png_bytes())
    observer = Finished()
    with harness.running(observer=observer, reclaim_interval_seconds=600) as runner:
        job_id = _crashed_under(runner, harness.engine, page_id, max_attempts=1)
        (failed,) = harness.events.wait_for("failed", page_id)
    assert failed.details["will_retry"] is False
    assert failed.details["error"] == FINAL_ATTEMPT_EXPIRED
    row = harness.job(job_id)
    assert (row.state, row.last_error) == ("dead", FINAL_ATTEMPT_EXPIRED)
    analysis = harness.analysis(page_id)
    assert (analysis.status, analysis.error) == ("failed", FINAL_ATTEMPT_EXPIRED)
    assert ("analyze_page", "dead") in observer.calls


def test_a_poison_row_is_dead_lettered_and_recorded(harness):
    """A payload of a registered kind that does not decode: what can be read of
    it (the page) is recorded; the rest of the queue goes on."""
    page_id = harness.add_page(png_bytes())
    good_page = harness.add_page(png_bytes(), page_number=2)
    observer = Finished()
    with harness.engine.begin() as conn:
        poison = conn.execute(
            text(
                "INSERT INTO crawler_jobs (payload, state) VALUES "
                "(CAST(:payload AS jsonb), 'pending') RETURNING id"
            ),
            {"payload": f'{{"kind": "analyze_page", "page_id": "{page_id}", "force": "perhaps"}}'},
        ).scalar_one()
    with harness.running(observer=observer):
        harness.request(good_page)
        (failed,) = harness.events.wait_for("failed", page_id)
        harness.events.wait_for("completed", good_page)
    row = harness.job(poison)
    assert row.state == "dead" and "force" in row.last_error
    assert failed.details["will_retry"] is False and failed.details["error"] == row.last_error
    analysis = harness.analysis(page_id)
    assert (analysis.status, analysis.error) == ("failed", row.last_error)
    assert ("analyze_page", "dead") in observer.calls


def test_the_lease_counts_an_expiry_towards_the_crash_loop(engine):
    """Whoever finds an expired lease counts it: three expiries in a row found
    by leases dead-letter the job as three reclaims would, with one message."""
    with engine.begin() as conn:
        job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="segfault"))
    for expiry in range(RECLAIM_LIMIT):
        with engine.begin() as conn:
            taken = lease(conn, KIND_SYNC_MANGA, 1, MINUTE)
            assert [held.id for held in taken] == [job_id]
            assert job_row(conn, job_id).reclaim_count == expiry
            expire_lease(conn, job_id)
    with engine.begin() as conn:
        assert lease(conn, KIND_SYNC_MANGA, 1, MINUTE) == []
        row = job_row(conn, job_id)
    assert (row.state, row.last_error) == ("dead", CRASH_LOOP_ERROR)
    # Each lease counted its attempt, as the seed's lease does.
    assert row.attempts == RECLAIM_LIMIT + 1
