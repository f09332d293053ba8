"""Section 2: lease + ack throughput with concurrent workers.

Each thread has its own connection and loops: lease up to `batch` jobs in one
transaction, then `ack_done` each job in its own transaction (what a worker
does after finishing each job). The queue is drained from a fresh seed of
`sync_manga` jobs, leased by kind as the real runner does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import Engine

from app.queue import KIND_SYNC_MANGA, ack_done, lease
from bench.activity import ActivitySampler
from bench.db import reset, seed_jobs, vacuum_analyze
from bench.report import emit, heading, ms, note, percentile, progress, rate, table

LEASE_DURATION = timedelta(seconds=60)
THREAD_COUNTS = (1, 2, 4, 8)
BATCH_SIZES = (1, 25)


@dataclass
class WorkerTally:
    """What one thread did; merged after the run."""

    acked: int = 0
    lost_acks: int = 0
    lease_latencies: list[float] = field(default_factory=list)
    error: BaseException | None = None
    backend_pid: int | None = None


@dataclass(frozen=True)
class DrainResult:
    threads: int
    batch: int
    acked: int
    lost_acks: int
    seconds: float
    lease_latencies: list[float]
    drained: bool
    errors: list[str]
    server_activity: str


def _worker(
    engine: Engine,
    batch: int,
    start: threading.Barrier,
    deadline_holder: list[float],
    tally: WorkerTally,
) -> None:
    try:
        with engine.connect() as conn:
            with conn.begin():
                tally.backend_pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            start.wait(timeout=30)
            deadline = deadline_holder[0]
            while time.perf_counter() < deadline:
                begun = time.perf_counter()
                with conn.begin():
                    leases = lease(conn, KIND_SYNC_MANGA, batch, LEASE_DURATION)
                tally.lease_latencies.append(time.perf_counter() - begun)
                if not leases:
                    return
                for held in leases:
                    with conn.begin():
                        if ack_done(conn, held):
                            tally.acked += 1
                        else:
                            tally.lost_acks += 1
    except BaseException as exc:  # reported in the table, never swallowed silently
        tally.error = exc


def drain(engine: Engine, threads: int, batch: int, jobs: int, time_budget: float) -> DrainResult:
    """Seed `jobs` jobs, then drain them with `threads` threads (bounded by `time_budget`)."""
    reset(engine)
    with engine.begin() as conn:
        seed_jobs(conn, jobs, kind=KIND_SYNC_MANGA)
    vacuum_analyze(engine)
    tallies = [WorkerTally() for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    deadline_holder = [0.0]
    workers = [
        threading.Thread(
            target=_worker,
            args=(engine, batch, start, deadline_holder, tally),
            name=f"bench-lease-{index}",
            daemon=True,
        )
        for index, tally in enumerate(tallies)
    ]
    for worker in workers:
        worker.start()
    started = time.perf_counter()
    deadline_holder[0] = started + time_budget
    start.wait(timeout=30)
    # Past the barrier every worker has recorded its backend's pid.
    pids = [tally.backend_pid for tally in tallies if tally.backend_pid is not None]
    with ActivitySampler(engine, pids) as activity:
        for worker in workers:
            # Every loop checks the deadline; the slack covers one last transaction.
            worker.join(timeout=max(0.0, deadline_holder[0] - time.perf_counter()) + 10)
        seconds = time.perf_counter() - started
    acked = sum(tally.acked for tally in tallies)
    return DrainResult(
        threads=threads,
        batch=batch,
        acked=acked,
        lost_acks=sum(tally.lost_acks for tally in tallies),
        seconds=seconds,
        lease_latencies=[sample for tally in tallies for sample in tally.lease_latencies],
        drained=acked >= jobs,
        errors=[repr(tally.error) for tally in tallies if tally.error is not None],
        server_activity=activity.summary(),
    )


def run(engine: Engine, jobs: int, time_budget: float) -> None:
    """Measure and print section 2."""
    heading(
        f"2. Lease + ack throughput (drain {jobs:,} jobs, at most {time_budget:.0f} s per case)"
    )
    rows = []
    activity_rows = []
    errors: list[str] = []
    for batch in BATCH_SIZES:
        for threads in THREAD_COUNTS:
            progress(f"lease+ack: {threads} thread(s), batch {batch}")
            result = drain(engine, threads, batch, jobs, time_budget)
            latencies = result.lease_latencies
            rows.append(
                [
                    f"batch={batch:<2} threads={threads}",
                    f"{result.acked:,}" + ("" if result.drained else " (time)"),
                    f"{result.seconds:.2f}",
                    rate(result.acked, result.seconds),
                    f"{len(latencies):,}",
                    ms(percentile(latencies, 0.5)),
                    ms(percentile(latencies, 0.95)),
                    ms(percentile(latencies, 0.99)),
                    str(result.lost_acks),
                ]
            )
            activity_rows.append([rows[-1][0], result.server_activity])
            errors.extend(result.errors)
    reset(engine)
    table(
        ["case", "acked", "s", "jobs/s", "leases", "p50 ms", "p95 ms", "p99 ms", "lost acks"],
        rows,
    )
    note(
        "Lease latency is one lease transaction (statement + commit). Each ack is its own\n"
        "transaction, so batch=25 saves lease round trips and commits, not ack commits.\n"
        "'(time)' marks a case stopped by its time budget before the queue was empty.\n"
        "Client threads share one Python process (GIL) and the CPUs with the server."
    )
    emit()
    emit("  Where the worker connections' backends were (pg_stat_activity, sampled every 50 ms):")
    table(["case", "backend states and top waits, share of samples"], activity_rows)
    note(
        "idle / idle-in-txn: the backend waits for its client (Python).\n"
        "waiting: an active backend's wait event: Lock = row/transaction locks,\n"
        "LWLock = internal locks (WALWrite: queueing to flush WAL), IO:WALSync = the disk flush."
    )
    for error in errors:
        note(f"worker error: {error}")
