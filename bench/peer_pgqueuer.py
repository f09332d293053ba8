"""PGQueuer (asyncpg driver, uvloop), measured like bench.ours (roles of bench.child).

Configured as its docs and benchmark tool recommend for short jobs: one
asyncpg connection per `QueueManager` (it also carries the LISTEN),
`batch_size=500` (docs: raise it for jobs under a second), durable (logged)
tables. Single enqueues run inside an explicit transaction of `per_txn`
calls; `enqueue_many` is its list form of `Queries.enqueue` (one statement).
Needs the `bench` extra (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import uvloop
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager
from pgqueuer.types import QueueExecutionMode

from bench.child import peak_rss_mb, ready, stop_requested

BATCH_SIZE = 500
ENTRYPOINT = "noop"


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


async def _connect(url: str) -> tuple[asyncpg.Connection, Queries]:
    conn = await asyncpg.connect(_dsn(url))
    queries = Queries(AsyncpgDriver(conn))
    if not await queries.has_table("pgqueuer"):
        await queries.install()
    return conn, queries


async def _timed(
    queries: Queries, payloads: list[bytes], per_txn: int, budget: float, write: Any
) -> dict[str, Any]:
    await queries.clear_queue()
    done = 0
    started = time.perf_counter()
    while done < len(payloads) and time.perf_counter() - started < budget:
        batch = payloads[done : done + per_txn]
        await write(batch)
        done += len(batch)
    seconds = time.perf_counter() - started
    await queries.clear_queue()
    return {
        "jobs": done,
        "seconds": seconds,
        "jobs_per_s": done / seconds,
        "capped": done < len(payloads),
    }


async def _enqueue(args: dict[str, Any]) -> dict[str, Any]:
    conn, queries = await _connect(args["url"])
    payloads = [f"e{index}".encode() for index in range(args["jobs"])]

    async def one_by_one(batch: list[bytes]) -> None:
        async with conn.transaction():
            for payload in batch:
                await queries.enqueue(ENTRYPOINT, payload, 0)

    async def many(batch: list[bytes]) -> None:
        await queries.enqueue([ENTRYPOINT] * len(batch), list(batch), [0] * len(batch))

    try:
        per_txn, budget = args["per_txn"], args["budget"]
        return {
            "single": await _timed(queries, payloads, per_txn, budget, one_by_one),
            "many": await _timed(queries, payloads, per_txn, budget, many),
        }
    finally:
        await conn.close()


async def _drain(args: dict[str, Any]) -> dict[str, Any]:
    jobs = args["jobs"]
    conn, queries = await _connect(args["url"])
    await queries.clear_queue()
    for start in range(0, jobs, 1_000):
        count = min(1_000, jobs - start)
        await queries.enqueue([ENTRYPOINT] * count, [b"d"] * count, [0] * count)
    await conn.close()

    conn, queries = await _connect(args["url"])
    manager = QueueManager(queries)
    executed = 0

    @manager.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        nonlocal executed
        executed += 1

    loop = asyncio.get_running_loop()
    capped = loop.call_later(args["budget"], manager.shutdown.set)
    begun = time.perf_counter()
    await manager.run(batch_size=BATCH_SIZE, mode=QueueExecutionMode.drain)
    seconds = time.perf_counter() - begun
    capped.cancel()
    await conn.close()
    return {
        "jobs": executed,
        "seconds": seconds,
        "jobs_per_s": executed / seconds,
        "capped": executed < jobs,
        "rss_mb": peak_rss_mb(),
    }


async def _pickup_worker(args: dict[str, Any]) -> dict[str, Any]:
    conn, queries = await _connect(args["url"])
    await queries.clear_queue()
    manager = QueueManager(queries)
    starts: dict[str, float] = {}

    @manager.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        starts[(job.payload or b"").decode()] = time.time()

    async def stop_when_asked() -> None:
        await asyncio.get_running_loop().run_in_executor(None, stop_requested.wait)
        deadline = time.monotonic() + args["settle"]
        while len(starts) < args["count"] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        manager.shutdown.set()

    stopper = asyncio.create_task(stop_when_asked())
    running = asyncio.create_task(manager.run(batch_size=BATCH_SIZE))
    await asyncio.sleep(0.5)  # LISTEN is set up inside run()
    ready()
    await running
    await stopper
    await conn.close()
    return {"starts": starts, "rss_mb": peak_rss_mb()}


async def _pickup_produce(args: dict[str, Any]) -> dict[str, Any]:
    conn, queries = await _connect(args["url"])
    commits: dict[str, tuple[float, float]] = {}
    next_at = time.perf_counter()
    for index in range(args["count"]):
        marker = f"pickup-{index}"
        next_at += args["gap"]
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        # Autocommit: the COMMIT goes with the statement, and returns with it.
        sent = time.time()
        await queries.enqueue(ENTRYPOINT, marker.encode(), 0)
        commits[marker] = (sent, time.time())
    await conn.close()
    return {"commits": commits}


def enqueue(args: dict[str, Any]) -> dict[str, Any]:
    return uvloop.run(_enqueue(args))


def drain(args: dict[str, Any]) -> dict[str, Any]:
    return uvloop.run(_drain(args))


def pickup_worker(args: dict[str, Any]) -> dict[str, Any]:
    return uvloop.run(_pickup_worker(args))


def pickup_produce(args: dict[str, Any]) -> dict[str, Any]:
    return uvloop.run(_pickup_produce(args))
