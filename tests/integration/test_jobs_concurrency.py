"""The queue under concurrency: SKIP LOCKED, exactly-once acks fenced by the lease
generation, LIMIT honoured."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from sqlalchemy import insert, text

from manga_page_analysis.models import Job
from manga_page_analysis.queue import KIND_SYNC_MANGA, SyncManga, ack_done, ack_done_many, lease
from tests.helpers import count

THREADS = 8
JOBS = 2000
BATCH = 25


def _fill(engine, jobs: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(Job),
            [
                {"payload": SyncManga(source_id="s", source_manga_key=str(n)).to_json()}
                for n in range(jobs)
            ],
        )


def test_eight_workers_ack_every_job_exactly_once(engine):
    _fill(engine, JOBS)
    leased: Counter = Counter()
    acked: Counter = Counter()
    stale_acked: Counter = Counter()
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def worker() -> None:
        start.wait()
        with engine.connect() as conn:
            while True:
                with conn.begin():
                    batch = lease(conn, KIND_SYNC_MANGA, BATCH, timedelta(minutes=5))
                if not batch:
                    return
                assert len(batch) <= BATCH
                for held in batch:
                    # The lease its previous holder lost (one generation back):
                    # its late ack must change nothing, under any concurrency.
                    lost = dataclasses.replace(held, lease_generation=held.lease_generation - 1)
                    with conn.begin():
                        late = ack_done_many(conn, [lost])
                        ok = ack_done(conn, held)
                    with lock:
                        leased[held.id] += 1
                        stale_acked.update(late)
                        if ok:
                            acked[held.id] += 1

    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(worker) for _ in range(THREADS)]:
            future.result()

    assert len(leased) == JOBS and max(leased.values()) == 1
    assert len(acked) == JOBS and max(acked.values()) == 1
    assert not stale_acked, f"{len(stale_acked)} acks of lost leases landed"
    assert count(engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'done'") == JOBS


def _locked_rows(engine) -> int:
    """Rows locked by other transactions: those a SKIP LOCKED scan cannot see."""
    with engine.begin() as conn:
        visible = conn.execute(
            text("SELECT count(*) FROM (SELECT id FROM crawler_jobs FOR UPDATE SKIP LOCKED) s")
        ).scalar_one()
        total = conn.execute(text("SELECT count(*) FROM crawler_jobs")).scalar_one()
    return int(total - visible)


def test_lease_never_returns_or_locks_more_rows_than_asked(engine):
    _fill(engine, 200)
    limits = [1, 2, 3, 5, 7, 11]
    leased_all = threading.Barrier(len(limits) + 1)
    checked = threading.Event()
    returned: dict[int, int] = {}

    def holder(limit: int) -> None:
        with engine.connect() as conn, conn.begin():
            batch = lease(conn, None, limit, timedelta(minutes=5))
            returned[limit] = len(batch)
            leased_all.wait(timeout=30)
            checked.wait(timeout=30)  # keep the transaction, and its row locks, open

    with ThreadPoolExecutor(len(limits)) as pool:
        futures = [pool.submit(holder, limit) for limit in limits]
        leased_all.wait(timeout=30)
        try:
            locked = _locked_rows(engine)
        finally:
            checked.set()
        for future in futures:
            future.result()

    assert returned == {limit: limit for limit in limits}
    assert locked == sum(limits)
    assert count(engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'running'") == sum(limits)
