"""Pickup latency: from an enqueue's COMMIT to the handler's start, with an idle worker.

Two processes per system: the worker (`pickup_worker`, idle once it is
ready) and a producer (`pickup_produce`) that enqueues one job every `gap`
seconds and notes `time.time()` just before its COMMIT is sent and as soon as
the COMMIT returns. The worker's handler notes `time.time()` as it starts each
job; the clocks are the same machine's. Each job carries a marker that pairs
the times.

Pickup is measured from the COMMIT sent: a job cannot start before that, so no
figure is negative. From the COMMIT returned it can be: the worker may start
the job before the producer has read the server's answer (`after_commit_p50_ms`
reports that end too). A peer whose enqueue commits by itself (autocommit, or
a transaction of its own) is timed from before that call, which also covers
its INSERT.
"""

from __future__ import annotations

import time
from typing import Any

from bench.child import Child, run
from bench.report import percentile

SETTLE_SECONDS = 5.0
"""How long a stopped worker still waits for jobs it has not started yet."""


def measure(
    system: str, url: str, count: int, gap: float, worker_args: dict[str, Any]
) -> dict[str, Any]:
    worker = Child.start(
        system,
        "pickup_worker",
        {"url": url, "count": count, "settle": SETTLE_SECONDS, **worker_args},
    )
    try:
        worker.wait_ready()
        time.sleep(0.5)  # let it fall idle
        commits: dict[str, tuple[float, float]] = run(
            system, "pickup_produce", {"url": url, "count": count, "gap": gap}
        )["commits"]
    finally:
        result = worker.result()
    starts: dict[str, float] = result["starts"]
    picked = [(starts[marker], sent, returned)
              for marker, (sent, returned) in commits.items() if marker in starts]  # fmt: skip
    latencies = [start - sent for start, sent, _ in picked]
    after_commit = [start - returned for start, _, returned in picked]
    return {
        "jobs": len(latencies),
        "after_commit_p50_ms": percentile(after_commit, 0.50) * 1000,
        "missed": count - len(latencies),
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p95_ms": percentile(latencies, 0.95) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "rss_mb": result["rss_mb"],
    }
