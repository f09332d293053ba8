"""Pickup latency: from an enqueue's COMMIT to the handler's start, with an idle worker.

Two processes per system: the worker (`pickup_worker`, idle once it is
ready) and a producer (`pickup_produce`) that enqueues one job every `gap`
seconds and notes `time.time()` as soon as its COMMIT returns. The worker's
handler notes `time.time()` as it starts each job; the two clocks are the
same machine's. Each job carries a marker that pairs the two times.
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
        commits: dict[str, float] = run(
            system, "pickup_produce", {"url": url, "count": count, "gap": gap}
        )["commits"]
    finally:
        result = worker.result()
    starts: dict[str, float] = result["starts"]
    latencies = [starts[marker] - at for marker, at in commits.items() if marker in starts]
    return {
        "jobs": len(latencies),
        "missed": count - len(latencies),
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p95_ms": percentile(latencies, 0.95) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "rss_mb": result["rss_mb"],
    }
