"""Every measurement of `make bench`, in order; returns the results as plain JSON data.

Sections 1-3 run for each system in turn within a round (so noise shows up
as spread between rounds, and no system always goes first); sections 4 and
6, ours only, close each round. See bench/summary.py for the table.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from bench import child, lease_latency, ours, pickup, pipeline
from bench.config import BenchConfig
from bench.report import progress

PEERS = {
    "pgqueuer": "PGQueuer 1.6, asyncpg + uvloop, one connection per QueueManager, batch_size=500, "
    "durable tables; single = Queries.enqueue per job inside a transaction, many = its list form",
    "procrastinate": "procrastinate 3.10, psycopg pool, concurrency=10, LISTEN on; single = "
    "defer_async, one transaction per job (its API has no caller's transaction outside Django), "
    "many = batch_defer_async",
}
"""The peers of `make bench PEERS=1`, and how each is configured (from its docs)."""


def _drain_cases(system: str, config: BenchConfig) -> list[tuple[str, dict[str, Any]]]:
    """(label, extra args) of each throughput run: ours per pool size, a peer once."""
    if system == "ours":
        prefetch = f", prefetch {config.prefetch}" if config.prefetch else ""
        return [
            (
                f"{threads} thread{'s' * (threads != 1)}{prefetch}",
                {"threads": threads, "prefetch": config.prefetch},
            )
            for threads in config.pool_threads
        ]
    return [({"pgqueuer": "batch 500", "procrastinate": "concurrency 10"}[system], {})]


def _round(
    results: dict[str, Any], system: str, engine: Engine, url: str, config: BenchConfig
) -> None:
    budget = config.budget_seconds
    progress(f"{system}: enqueue {config.enqueue_jobs:,} jobs")
    enqueued = child.run(
        system,
        "enqueue",
        {"url": url, "jobs": config.enqueue_jobs, "per_txn": config.jobs_per_txn, "budget": budget},
    )
    results["enqueue"].setdefault(system, []).append(enqueued)
    for label, extra in _drain_cases(system, config):
        progress(f"{system}: no-op throughput, {config.drain_jobs:,} jobs, {label}")
        if system == "ours":
            ours.seed(engine, config.drain_jobs)
        drained = child.run(
            system, "drain", {"url": url, "jobs": config.drain_jobs, "budget": budget, **extra}
        )
        results["throughput"].setdefault(system, {}).setdefault(label, []).append(drained)
    if system == "ours":
        for processes in config.drain_processes:
            progress(f"ours: no-op throughput, {config.drain_jobs:,} jobs, {processes} processes")
            ours.seed(engine, config.drain_jobs)
            results["processes"].setdefault(str(processes), []).append(
                _drain_together(url, processes, config)
            )
    progress(f"{system}: pickup latency, {config.pickup_jobs} jobs {config.pickup_gap_ms} ms apart")
    worker_args = {"threads": config.pickup_threads} if system == "ours" else {}
    picked = pickup.measure(
        system, url, config.pickup_jobs, config.pickup_gap_ms / 1000, worker_args
    )
    results["pickup"].setdefault(system, []).append(picked)


def _drain_together(url: str, processes: int, config: BenchConfig) -> dict[str, Any]:
    """`processes` worker processes drain the seeded jobs, started together once
    every one of them has imported, connected and said it is ready."""
    with tempfile.TemporaryDirectory(prefix="bench-go-") as folder:
        go = Path(folder) / "go"
        args = {
            "url": url,
            "jobs": config.drain_jobs,
            "threads": config.process_threads,
            "go": str(go),
            "budget": config.budget_seconds,
        }
        children = [child.Child.start("ours", "drain_together", args) for _ in range(processes)]
        try:
            for worker in children:
                worker.wait_ready()
            start_at = time.time()
            go.touch()
        finally:
            results = [worker.result() for worker in children]
    # The first process to see every job done ends the clock.
    finished = [result["ended"] for result in results if result["done"] >= config.drain_jobs]
    ended = min(finished) if finished else max(result["ended"] for result in results)
    done = max(result["done"] for result in results)
    seconds = ended - start_at
    return {
        "processes": processes,
        "threads": config.process_threads,
        "jobs": done,
        "seconds": seconds,
        "jobs_per_s": done / seconds,
        "capped": done < config.drain_jobs,
        "late_start_s": max(result["started"] for result in results) - start_at,
        "rss_mb": max(result["rss_mb"] for result in results),
    }


def _ours_only(results: dict[str, Any], engine: Engine, url: str, config: BenchConfig) -> None:
    progress(f"pipeline: {config.pages} pages, {config.page_workers} workers")
    delay = config.model_delay_ms / 1000
    ideal_seconds = config.pages / config.page_workers * delay
    results["pipeline"].append(
        pipeline.measure(
            engine, url, config.pages, config.page_workers, delay,
            max(config.budget_seconds, 4 * ideal_seconds),
        )
    )  # fmt: skip
    progress(f"lease latency: {config.backlog:,} pending, {config.backlog_running} running")
    results["lease_latency"].append(
        lease_latency.measure(
            engine, config.backlog, config.backlog_running, config.lease_calls,
            config.budget_seconds,
        )
    )  # fmt: skip


def run(engine: Engine, url: str, config: BenchConfig) -> dict[str, Any]:
    results: dict[str, Any] = {
        "enqueue": {}, "throughput": {}, "processes": {}, "pickup": {}, "pipeline": [],
        "lease_latency": [],
    }  # fmt: skip
    systems = ("ours", *config.peers)
    for number in range(config.rounds):
        progress(f"round {number + 1} of {config.rounds}")
        # Rotate the order each round so that no system always runs first.
        for system in systems[number % len(systems) :] + systems[: number % len(systems)]:
            _round(results, system, engine, url, config)
        _ours_only(results, engine, url, config)
    return results
