"""procrastinate (psycopg 3 connector), measured like bench.ours (roles of bench.child).

Configured as its docs recommend for throughput: one worker process with
async sub-workers (`concurrency=10`), LISTEN/NOTIFY on (the default). Its API
gives no way to group single `defer_async` calls in one transaction of the
caller's (outside Django), so "single" is one transaction per job;
"many" is `batch_defer_async` of `per_txn` jobs (one statement).
Needs the `bench` extra (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import psycopg
from procrastinate import App, PsycopgConnector

from bench.child import peak_rss_mb, ready, stop_requested

CONCURRENCY = 10
TASK = "noop"


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _app(url: str, on_run: Callable[[str], None]) -> tuple[App, Any]:
    app = App(connector=PsycopgConnector(conninfo=_dsn(url)))

    @app.task(name=TASK)
    async def noop(marker: str = "") -> None:
        on_run(marker)

    return app, noop


async def _prepare(url: str, app: App) -> None:
    """Apply the schema once, then empty the jobs table."""
    async with await psycopg.AsyncConnection.connect(_dsn(url), autocommit=True) as conn:
        exists = await (await conn.execute("SELECT to_regclass('procrastinate_jobs')")).fetchone()
        if exists is None or exists[0] is None:
            await app.schema_manager.apply_schema_async()
        await conn.execute("TRUNCATE procrastinate_jobs CASCADE")


async def _enqueue(args: dict[str, Any]) -> dict[str, Any]:
    app, task = _app(args["url"], lambda marker: None)
    markers = [f"e{index}" for index in range(args["jobs"])]
    per_txn, budget = args["per_txn"], args["budget"]
    result: dict[str, Any] = {}
    async with app.open_async():
        for label in ("single", "many"):
            await _prepare(args["url"], app)
            done = 0
            started = time.perf_counter()
            while done < len(markers) and time.perf_counter() - started < budget:
                batch = markers[done : done + per_txn]
                if label == "single":
                    for marker in batch:
                        await task.defer_async(marker=marker)
                else:
                    await task.batch_defer_async(*({"marker": marker} for marker in batch))
                done += len(batch)
            seconds = time.perf_counter() - started
            result[label] = {
                "jobs": done,
                "seconds": seconds,
                "jobs_per_s": done / seconds,
                "capped": done < len(markers),
            }
        await _prepare(args["url"], app)
    return result


async def _drain(args: dict[str, Any]) -> dict[str, Any]:
    jobs = args["jobs"]
    executed = 0

    def count(marker: str) -> None:
        nonlocal executed
        executed += 1

    app, task = _app(args["url"], count)
    async with app.open_async():
        await _prepare(args["url"], app)
        for start in range(0, jobs, 1_000):
            await task.batch_defer_async(
                *({"marker": "d"} for _ in range(min(1_000, jobs - start)))
            )
        begun = time.perf_counter()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                app.run_worker_async(
                    concurrency=CONCURRENCY, wait=False, install_signal_handlers=False
                ),
                args["budget"],
            )
        seconds = time.perf_counter() - begun
        await _prepare(args["url"], app)
    return {
        "jobs": executed,
        "seconds": seconds,
        "jobs_per_s": executed / seconds,
        "capped": executed < jobs,
        "rss_mb": peak_rss_mb(),
    }


async def _pickup_worker(args: dict[str, Any]) -> dict[str, Any]:
    starts: dict[str, float] = {}

    def record(marker: str) -> None:
        starts[marker] = time.time()

    app, _ = _app(args["url"], record)
    async with app.open_async():
        await _prepare(args["url"], app)
        worker = asyncio.create_task(
            app.run_worker_async(concurrency=CONCURRENCY, install_signal_handlers=False)
        )
        await asyncio.sleep(0.5)  # LISTEN is set up inside the worker
        ready()
        await asyncio.get_running_loop().run_in_executor(None, stop_requested.wait)
        deadline = time.monotonic() + args["settle"]
        while len(starts) < args["count"] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    return {"starts": starts, "rss_mb": peak_rss_mb()}


async def _pickup_produce(args: dict[str, Any]) -> dict[str, Any]:
    app, task = _app(args["url"], lambda marker: None)
    commits: dict[str, tuple[float, float]] = {}
    async with app.open_async():
        next_at = time.perf_counter()
        for index in range(args["count"]):
            marker = f"pickup-{index}"
            next_at += args["gap"]
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            # Its own transaction, committed by the call: noted before the call.
            sent = time.time()
            await task.defer_async(marker=marker)
            commits[marker] = (sent, time.time())
    return {"commits": commits}


def enqueue(args: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(_enqueue(args))


def drain(args: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(_drain(args))


def pickup_worker(args: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(_pickup_worker(args))


def pickup_produce(args: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(_pickup_produce(args))
