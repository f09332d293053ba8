"""How long workers' writes wait while `migrate` indexes a big `crawler_jobs`
(docs/schema.md, "Online migrations").

    python -m bench.online_migration [DONE_ROWS]   (default 500000)

On a throwaway server (bench/pg.py, durable commits) migrated to 0009, it
fills `crawler_jobs` with DONE_ROWS done jobs and enough pending ones to
drain throughout, starts WRITERS threads that drain it the way a worker's
lease loop and acker write (a `SKIP LOCKED` lease of 10 jobs, then their fenced ack,
each its own transaction, each timed; written out here in the shape of the
queue's own statements, which at 0009 would name a column 0011 adds), and then:

1. runs `migrate` to head: 0010 builds two indexes on `crawler_jobs`
   `CONCURRENTLY` (manga_page_analysis.online_ddl), 0011 adds a column;
2. for comparison, builds the same index the old way: a plain
   `CREATE INDEX` in a transaction, as 0010 did before.

For each, and for 5 s of the drain alone before them, it prints how long the step took and the longest and 99th
percentile wait of a write that overlapped it. Progress goes to stderr.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, Engine, text

from alembic import command
from bench.pg import throwaway_server
from bench.report import progress
from manga_page_analysis.db import make_engine
from manga_page_analysis.migrations import alembic_config

T = TypeVar("T")

WRITERS = 4
"""Draining threads: a worker's lease loop and acker, times two."""
PENDING_ROWS = 150_000
"""Jobs to drain: more than the writers finish while both steps run."""

_SEED = """
INSERT INTO crawler_jobs (payload, state, attempts, created_at, updated_at, scheduled_at)
SELECT jsonb_build_object('kind', 'sync_manga', 'source_id', 's',
                          'source_manga_key', g::text, 'url', '', 'title', ''),
       :state, :attempts, now() - g * interval '1 second', now() - g * interval '1 second',
       now() - g * interval '1 second'
FROM generate_series(1, :rows) AS g
"""


_LEASE = text("""
WITH due AS MATERIALIZED (
    SELECT id FROM crawler_jobs WHERE state = 'pending' AND scheduled_at <= now()
    ORDER BY scheduled_at, created_at LIMIT 10 FOR UPDATE SKIP LOCKED
)
UPDATE crawler_jobs AS j
SET state = 'running', attempts = j.attempts + 1, lease_generation = j.lease_generation + 1,
    leased_until = now() + interval '10 minutes', updated_at = now()
FROM due WHERE j.id = due.id
RETURNING j.id, j.lease_generation AS gen
""")
_ACK = text("""
UPDATE crawler_jobs AS j SET state = 'done', leased_until = NULL, updated_at = now()
FROM unnest(CAST(:ids AS uuid[]), CAST(:gens AS bigint[])) AS held(id, gen)
WHERE j.id = held.id AND j.lease_generation = held.gen AND j.state = 'running'
""")


class Drain:
    """Writer threads timing each of their transactions: (start, seconds)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._stop = threading.Event()
        self.timings: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(WRITERS)]

    def __enter__(self) -> Drain:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _write(self, conn: Connection, work: Callable[[Connection], T]) -> T:
        began = time.monotonic()
        with conn.begin():
            result = work(conn)
        with self._lock:
            self.timings.append((began, time.monotonic() - began))
        return result

    def _run(self) -> None:
        with self._engine.connect() as conn:
            while not self._stop.is_set():
                leased = self._write(conn, lambda c: c.execute(_LEASE).all())
                held = {"ids": [row.id for row in leased], "gens": [row.gen for row in leased]}
                self._write(conn, lambda c, held=held: c.execute(_ACK, held))

    def waits_between(self, began: float, ended: float) -> list[float]:
        """The durations of the writes that overlapped [began, ended]."""
        with self._lock:
            return [s for start, s in self.timings if start <= ended and start + s >= began]


def _step(name: str, drain: Drain, step: Callable[[], None]) -> dict[str, float]:
    progress(f"{name} ...")
    began = time.monotonic()
    step()
    ended = time.monotonic()
    time.sleep(0.5)  # the writes under way at the end finish and are counted
    waits = sorted(drain.waits_between(began, ended))
    p99 = waits[int(0.99 * (len(waits) - 1))] if waits else float("nan")
    return {
        "step_s": round(ended - began, 2),
        "writes": len(waits),
        "longest_write_wait_s": round(max(waits, default=float("nan")), 3),
        "p99_write_wait_s": round(p99, 3),
        "median_write_wait_s": round(statistics.median(waits), 4) if waits else float("nan"),
    }


def main(argv: list[str]) -> int:
    done_rows = int(argv[0]) if argv else 500_000
    with throwaway_server() as url:
        command.upgrade(alembic_config(url), "0009")
        engine = make_engine(url, pool_size=WRITERS + 2)
        try:
            progress(f"seeding {done_rows} done and {PENDING_ROWS} pending jobs")
            with engine.begin() as conn:
                conn.execute(text(_SEED), {"state": "done", "attempts": 1, "rows": done_rows})
                conn.execute(text(_SEED), {"state": "pending", "attempts": 0, "rows": PENDING_ROWS})
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE crawler_jobs"))
            with Drain(engine) as drain:
                quiet = _step("the drain alone (baseline)", drain, lambda: time.sleep(5.0))
                online = _step(
                    "migrate (CONCURRENTLY)",
                    drain,
                    lambda: command.upgrade(alembic_config(url), "head"),
                )

                def plain() -> None:
                    with engine.begin() as conn:
                        conn.execute(
                            text(
                                "CREATE INDEX bench_plain ON crawler_jobs (state, updated_at, id) "
                                "WHERE state <> 'running'"
                            )
                        )

                locked = _step("plain CREATE INDEX (the old 0010)", drain, plain)
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT count(*) FROM crawler_jobs")).scalar_one()
        finally:
            engine.dispose()
    print(f"crawler_jobs rows: {rows}, writer threads: {WRITERS}")
    print(f"no migration (5 s of the drain alone): {quiet}")
    print(f"migrate, indexes built CONCURRENTLY: {online}")
    print(f"plain CREATE INDEX in a transaction: {locked}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
