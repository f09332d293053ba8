"""This project's queue and runner, measured the way the peers are (roles of bench.child).

- `enqueue`: `enqueue` one call per job, and `enqueue_many` one call per
  transaction, in transactions of `per_txn` jobs on one connection;
- `drain`: a `Runner` with `threads` pool threads over the no-op handler,
  timed from `start()` until the database counts every seeded job `done`;
- `drain_together`: one of several worker processes draining the same
  seeded jobs; each says it is ready, starts its runner once the parent
  creates the `go` file, and notes when it sees every job `done`;
- `pickup_worker` / `pickup_produce`: an idle runner, and a producer that
  commits one job every `gap` seconds and notes `time.time()` just before its
  COMMIT is sent and as it returns (`bench.pickup`).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, insert, text

from bench.child import peak_rss_mb, ready, stop_requested
from bench.db import vacuum_analyze
from bench.noop import Observed, marker_of, noop_handler, payload_for
from manga_page_analysis.db import make_engine
from manga_page_analysis.models import Job
from manga_page_analysis.queue import enqueue as enqueue_one
from manga_page_analysis.worker import Runner

POLL_SECONDS = 0.002
"""How often the drain looks at the done count once every job has started."""
STOP_SECONDS = 10.0
DONE_SQL = text("SELECT count(*) FROM crawler_jobs WHERE state = 'done'")


def _enqueue_many() -> Any:
    """`manga_page_analysis.queue.enqueue_many`, or `None` while the installed app lacks it."""
    import manga_page_analysis.queue

    return getattr(manga_page_analysis.queue, "enqueue_many", None)


def _truncate(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE crawler_jobs"))


def _timed_batches(
    engine: Engine, payloads: list[Any], per_txn: int, budget: float, write: Any
) -> dict[str, Any]:
    done = 0
    with engine.connect() as conn:
        started = time.perf_counter()
        while done < len(payloads) and time.perf_counter() - started < budget:
            batch = payloads[done : done + per_txn]
            with conn.begin():
                write(conn, batch)
            done += len(batch)
        seconds = time.perf_counter() - started
    _truncate(engine)
    return {
        "jobs": done,
        "seconds": seconds,
        "jobs_per_s": done / seconds,
        "capped": done < len(payloads),
    }


def enqueue(args: dict[str, Any]) -> dict[str, Any]:
    engine = make_engine(args["url"], pool_size=1)
    kind = noop_handler()[0].kind
    payloads = [payload_for(kind, f"e{index}") for index in range(args["jobs"])]
    per_txn, budget = args["per_txn"], args["budget"]

    def one_by_one(conn: Connection, batch: list[Any]) -> None:
        for payload in batch:
            enqueue_one(conn, payload)

    try:
        _truncate(engine)
        result: dict[str, Any] = {
            "single": _timed_batches(engine, payloads, per_txn, budget, one_by_one)
        }
        many = _enqueue_many()
        result["many"] = (
            None
            if many is None
            else _timed_batches(
                engine, payloads, per_txn, budget, lambda conn, batch: many(conn, batch)
            )
        )
        return result
    finally:
        engine.dispose()


def seed(engine: Engine, jobs: int) -> None:
    """Parent side: `jobs` pending no-op jobs, inserted without the clock running."""
    kind = noop_handler()[0].kind
    rows = [{"payload": payload_for(kind, f"d{index}").to_json()} for index in range(jobs)]
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE crawler_jobs"))
        for start in range(0, jobs, 5_000):
            conn.execute(insert(Job), rows[start : start + 5_000])
    vacuum_analyze(engine)  # fresh statistics, as a long-running queue table would have


def _runner(url: str, threads: int, handler: Any, prefetch: int = 0) -> tuple[Engine, Runner]:
    # Room for every pool thread plus the runner's own connections (heartbeat,
    # listener, acks), so the pool is never what limits the figure.
    engine = make_engine(url, pool_size=2 * threads + 4, max_overflow=8)
    extra = {"prefetch": prefetch} if prefetch else {}  # only runners that have it
    return engine, Runner(engine, [handler], workers=threads, **extra)


def _done_count(conn: Connection) -> int:
    with conn.begin():
        return int(conn.execute(DONE_SQL).scalar_one())


def drain(args: dict[str, Any]) -> dict[str, Any]:
    jobs, budget = args["jobs"], args["budget"]
    inner, source = noop_handler()
    started_jobs = itertools.count(1)  # next() is atomic under the GIL
    last = [0]

    def on_execute(lease: Any) -> None:
        last[0] = next(started_jobs)

    engine, runner = _runner(
        args["url"], args["threads"], Observed(inner, on_execute), args.get("prefetch", 0)
    )
    try:
        with engine.connect() as probe:
            begun, cpu_begun = time.perf_counter(), time.process_time()
            runner.start()
            done = 0
            while time.perf_counter() - begun < budget:
                # Counting rows costs the server work: only once every job has started.
                if last[0] >= jobs:
                    done = _done_count(probe)
                    if done >= jobs:
                        break
                time.sleep(POLL_SECONDS if last[0] >= jobs else 0.01)
            seconds = time.perf_counter() - begun
            cpu_seconds = time.process_time() - cpu_begun
            if done < jobs:
                done = _done_count(probe)
        runner.stop()
        runner.join(STOP_SECONDS)
    finally:
        engine.dispose()
    return {
        "jobs": done,
        "seconds": seconds,
        "jobs_per_s": done / seconds,
        "capped": done < jobs,
        # The worker process's CPU (every thread, the done-count polls included).
        "cpu_us_per_job": cpu_seconds * 1e6 / done if done else None,
        "rss_mb": peak_rss_mb(),
        "handler": source,
        "lease_rounds": runner.lease_rounds,
        **_ack_figures(runner),
    }


def _ack_figures(runner: Runner) -> dict[str, Any]:
    """How many jobs each acker transaction wrote, on average."""
    batches, acked = runner.acker.batches, runner.acker.acked
    return {"ack_batches": batches, "acks_per_batch": acked / batches if batches else None}


def drain_together(args: dict[str, Any]) -> dict[str, Any]:
    jobs, budget = args["jobs"], args["budget"]
    engine, runner = _runner(args["url"], args["threads"], noop_handler()[0])
    try:
        with engine.connect() as probe:
            _done_count(probe)  # connect before the clock runs
            ready()
            go = Path(args["go"])
            while not go.exists():
                time.sleep(0.001)
            started = time.time()
            runner.start()
            done = 0
            while done < jobs and time.time() - started < budget:
                time.sleep(POLL_SECONDS)
                done = _done_count(probe)
            ended = time.time()
        runner.stop()
        runner.join(STOP_SECONDS)
    finally:
        engine.dispose()
    return {
        "started": started,
        "ended": ended,
        "done": done,
        "rss_mb": peak_rss_mb(),
        **_ack_figures(runner),
    }


def pickup_worker(args: dict[str, Any]) -> dict[str, Any]:
    starts: dict[str, float] = {}

    def on_execute(lease: Any) -> None:
        starts[marker_of(lease.payload)] = time.time()

    engine, runner = _runner(args["url"], args["threads"], Observed(noop_handler()[0], on_execute))
    try:
        _truncate(engine)  # a capped drain may have left jobs: the runner must start idle
        runner.start()
        ready()
        stop_requested.wait()
        deadline = time.monotonic() + args["settle"]
        while len(starts) < args["count"] and time.monotonic() < deadline:
            time.sleep(0.01)
        runner.stop()
        runner.join(STOP_SECONDS)
    finally:
        engine.dispose()
    return {"starts": starts, "rss_mb": peak_rss_mb()}


def pickup_produce(args: dict[str, Any]) -> dict[str, Any]:
    engine = make_engine(args["url"], pool_size=1)
    kind = noop_handler()[0].kind
    payloads = [payload_for(kind, f"pickup-{index}") for index in range(args["count"])]
    commits: dict[str, tuple[float, float]] = {}
    try:
        with engine.connect() as conn:
            next_at = time.perf_counter()
            for payload in payloads:
                next_at += args["gap"]
                time.sleep(max(0.0, next_at - time.perf_counter()))
                transaction = conn.begin()
                enqueue_one(conn, payload)
                sent = time.time()
                transaction.commit()
                commits[marker_of(payload)] = (sent, time.time())
    finally:
        engine.dispose()
    return {"commits": commits}
