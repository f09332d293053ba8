"""How big each section is: the issue's sizes, each overridable by an env var.

Every timed loop is also bounded by `budget_seconds`, so a slow runner gives a
smaller sample (marked "capped") rather than a run of many minutes. The smoke
test (tests/test_bench_smoke.py) sets tiny sizes through these variables.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _ints(name: str, default: str) -> tuple[int, ...]:
    return tuple(int(part) for part in os.environ.get(name, default).split(","))


KNOWN_PEERS: tuple[str, ...] = ("pgqueuer", "procrastinate")


def _peers(value: str) -> tuple[str, ...]:
    if value in ("", "0"):
        return ()
    if value == "1":
        return KNOWN_PEERS
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in KNOWN_PEERS]
    if unknown:
        raise ValueError(f"BENCH_PEERS: unknown peer(s) {unknown}; known: {KNOWN_PEERS}")
    return names


@dataclass(frozen=True)
class BenchConfig:
    enqueue_jobs: int = field(default_factory=lambda: _int("BENCH_ENQUEUE_JOBS", 20_000))
    jobs_per_txn: int = field(default_factory=lambda: _int("BENCH_JOBS_PER_TXN", 1_000))
    drain_jobs: int = field(default_factory=lambda: _int("BENCH_DRAIN_JOBS", 20_000))
    pool_threads: tuple[int, ...] = field(default_factory=lambda: _ints("BENCH_THREADS", "1,4,16"))
    drain_processes: tuple[int, ...] = field(
        default_factory=lambda: _ints("BENCH_PROCESSES", "2,4")
    )
    """Worker processes draining one queue together, each with `process_threads` threads."""
    process_threads: int = field(default_factory=lambda: _int("BENCH_PROCESS_THREADS", 4))
    prefetch: int = field(default_factory=lambda: _int("BENCH_PREFETCH", 0))
    """Passed to `Runner(prefetch=...)` in section 2 when above 0 (a lever to explore)."""
    pickup_jobs: int = field(default_factory=lambda: _int("BENCH_PICKUP_JOBS", 200))
    pickup_gap_ms: int = field(default_factory=lambda: _int("BENCH_PICKUP_GAP_MS", 20))
    pickup_threads: int = field(default_factory=lambda: _int("BENCH_PICKUP_THREADS", 4))
    pages: int = field(default_factory=lambda: _int("BENCH_PAGES", 400))
    page_workers: int = field(default_factory=lambda: _int("BENCH_PAGE_WORKERS", 8))
    model_delay_ms: int = field(default_factory=lambda: _int("BENCH_MODEL_DELAY_MS", 100))
    backlog: int = field(default_factory=lambda: _int("BENCH_BACKLOG", 100_000))
    backlog_running: int = field(default_factory=lambda: _int("BENCH_BACKLOG_RUNNING", 64))
    lease_calls: int = field(default_factory=lambda: _int("BENCH_LEASE_CALLS", 500))
    rounds: int = field(default_factory=lambda: _int("BENCH_ROUNDS", 2))
    budget_seconds: float = field(default_factory=lambda: float(_int("BENCH_BUDGET_SECONDS", 30)))
    peers: tuple[str, ...] = field(
        default_factory=lambda: _peers(os.environ.get("BENCH_PEERS", ""))
    )
    """`make bench PEERS=1`: every peer; `PEERS=pgqueuer`: the peers named (comma-separated)."""
    pgbouncer: bool = field(
        default_factory=lambda: os.environ.get("BENCH_PGBOUNCER", "") not in ("", "0")
    )
    """`make bench PGBOUNCER=1`: also workers through PgBouncer vs direct (bench/scale.py)."""
    results_path: Path = field(
        default_factory=lambda: Path(os.environ.get("BENCH_RESULTS", "bench/results.json"))
    )

    def as_json(self) -> dict[str, Any]:
        return {key: str(value) if isinstance(value, Path) else value
                for key, value in asdict(self).items()}  # fmt: skip
