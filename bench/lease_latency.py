"""Section 6: one lease transaction against a large backlog.

The backlog: `running` rows with live leases, scheduled first (so an index
that keeps running rows ahead of the due pending ones makes every lease step
over them), then `pending` rows, all due; then `VACUUM ANALYZE`. Each timed
call is a whole transaction on one connection: BEGIN, `lease(conn, None, 1,
...)`, COMMIT. The leased job is then acked done in its own, untimed
transaction, as a worker would, so the backlog shrinks by the calls made.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, text

from bench.db import seed_jobs, vacuum_analyze
from bench.noop import BENCH_KIND, register_bench_kind
from bench.report import percentile
from manga_page_analysis.queue import ack_done, lease

LEASE_DURATION = timedelta(seconds=60)


def build_backlog(engine: Engine, pending: int, running: int) -> None:
    register_bench_kind()  # `lease(conn, None, ...)` takes registered kinds only
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE crawler_jobs"))
        seed_jobs(
            conn, running, kind=BENCH_KIND, start="now() - interval '3 hours'",
            state="running", leased_until="now() + interval '1 hour'",
        )  # fmt: skip
        seed_jobs(conn, pending, kind=BENCH_KIND, start="now() - interval '2 hours'")
    vacuum_analyze(engine)


def measure(
    engine: Engine, pending: int, running: int, calls: int, budget: float
) -> dict[str, Any]:
    build_backlog(engine, pending, running)
    latencies: list[float] = []
    with engine.connect() as conn:
        deadline = time.perf_counter() + budget
        while len(latencies) < calls and time.perf_counter() < deadline:
            begun = time.perf_counter()
            with conn.begin():
                leased = lease(conn, None, 1, LEASE_DURATION)
            latencies.append(time.perf_counter() - begun)
            with conn.begin():
                for held in leased:
                    ack_done(conn, held)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE crawler_jobs"))
    return {
        "calls": len(latencies),
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }
