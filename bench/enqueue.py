"""Section 1: how fast `enqueue` fills the queue.

Payloads alternate `sync_manga` / `analyze_page` (the latter also maintains
the dedup unique index). They are built before the clock starts: the figure is
`enqueue` plus the transaction, not pydantic model construction in the caller.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from app.queue import AnalyzePage, JobPayload, SyncManga, enqueue
from bench.db import reset
from bench.report import heading, ms, note, percentile, progress, rate, table


@dataclass(frozen=True)
class EnqueueCase:
    label: str
    jobs_per_transaction: int
    synchronous_commit: bool


@dataclass(frozen=True)
class EnqueueResult:
    case: EnqueueCase
    jobs: int
    seconds: float
    transaction_latencies: list[float]


CASES = (
    EnqueueCase("1 job / txn, synchronous_commit=on", 1, True),
    EnqueueCase("1 job / txn, synchronous_commit=off", 1, False),
    EnqueueCase("1000 jobs / txn", 1000, True),
)


def mixed_payloads(count: int) -> list[JobPayload]:
    """Half `sync_manga`, half `analyze_page`, interleaved."""
    payloads: list[JobPayload] = []
    for index in range(count):
        if index % 2:
            payloads.append(AnalyzePage(page_id=uuid.uuid4()))
        else:
            payloads.append(SyncManga(source_id="bench", source_manga_key=f"m{index}"))
    return payloads


def run_case(
    engine: Engine, case: EnqueueCase, payloads: list[JobPayload], time_budget: float
) -> EnqueueResult:
    """Enqueue `payloads` in transactions of `case.jobs_per_transaction` jobs, on one
    connection, until done or `time_budget` seconds have passed."""
    latencies: list[float] = []
    done = 0
    with engine.connect() as conn:
        _set_synchronous_commit(conn, case.synchronous_commit)
        try:
            started = time.perf_counter()
            deadline = started + time_budget
            while done < len(payloads) and time.perf_counter() < deadline:
                batch = payloads[done : done + case.jobs_per_transaction]
                begun = time.perf_counter()
                with conn.begin():
                    for payload in batch:
                        enqueue(conn, payload)
                latencies.append(time.perf_counter() - begun)
                done += len(batch)
            seconds = time.perf_counter() - started
        finally:
            _set_synchronous_commit(conn, True)
    return EnqueueResult(case, done, seconds, latencies)


def _set_synchronous_commit(conn: Connection, enabled: bool) -> None:
    with conn.begin():
        conn.exec_driver_sql(f"SET synchronous_commit = {'on' if enabled else 'off'}")


def run(engine: Engine, jobs: int, time_budget: float) -> None:
    """Measure and print section 1; each case stops at `jobs` or `time_budget` seconds."""
    heading(f"1. Enqueue throughput (up to {jobs:,} jobs or {time_budget:.0f} s per case)")
    payloads = mixed_payloads(jobs)
    rows = []
    for case in CASES:
        reset(engine)
        progress(f"enqueue: {case.label}")
        result = run_case(engine, case, payloads, time_budget)
        latencies = result.transaction_latencies
        rows.append(
            [
                case.label,
                f"{result.jobs:,}",
                f"{result.seconds:.2f}",
                rate(result.jobs, result.seconds),
                ms(percentile(latencies, 0.5)),
                ms(percentile(latencies, 0.99)),
            ]
        )
    reset(engine)
    table(["case", "jobs", "s", "jobs/s", "txn p50 ms", "txn p99 ms"], rows)
    note(
        "One connection, one thread; mixed sync_manga/analyze_page payloads.\n"
        "synchronous_commit=off (per session) skips the WAL flush wait at commit: a crash\n"
        "can lose the last few hundred ms of commits, but never corrupts the queue."
    )
