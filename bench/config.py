"""How big each section is, and how long it may run.

Every loop in the benchmark is bounded twice, by a count and by a time
budget, so a slow machine gives smaller samples rather than a hung run.
`BENCH_QUICK=1` shrinks everything for a smoke run of the benchmark itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from bench.backlog import Backlog
from bench.worker import WorkerCase

FULL_BACKLOG = Backlog(pending=100_000, live_leases=200, expired_leases=200, future=1_000)
"""100k pending jobs, a few hundred running ones, some scheduled ahead."""


@dataclass(frozen=True)
class BenchConfig:
    enqueue_jobs: int = 20_000
    enqueue_budget_seconds: float = 6.0
    lease_jobs: int = 10_000
    lease_budget_seconds: float = 4.0
    backlog: Backlog = FULL_BACKLOG
    backlog_calls: int = 300
    backlog_budget_seconds: float = 15.0
    worker_pages: int = 300
    worker_cases: tuple[WorkerCase, ...] = tuple(
        WorkerCase(workers, delay) for delay in (0.0, 0.05) for workers in (1, 2, 4)
    )
    worker_budget_seconds: float = 30.0

    @classmethod
    def from_env(cls) -> BenchConfig:
        config = cls()
        if os.environ.get("BENCH_QUICK") == "1":
            config = replace(
                config,
                enqueue_jobs=1_000,
                enqueue_budget_seconds=2.0,
                lease_jobs=500,
                lease_budget_seconds=2.0,
                backlog=Backlog(pending=5_000, live_leases=20, expired_leases=20, future=100),
                backlog_calls=50,
                worker_pages=30,
                worker_budget_seconds=15.0,
            )
        return config

    def describe(self) -> str:
        return (
            f"enqueue {self.enqueue_jobs:,} jobs/case; lease+ack {self.lease_jobs:,} jobs/case; "
            f"backlog {self.backlog.pending:,} pending; worker {self.worker_pages} pages/case"
        )
