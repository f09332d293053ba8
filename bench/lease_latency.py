"""Timing single lease calls and showing their plans (used by section 3).

Two timing modes, each on one connection:

- rolled back: every call sees the same backlog. psycopg forgets its
  prepared statements on every `ROLLBACK`, so each call is planned afresh.
- acked: lease, commit, then `ack_done` in its own transaction, as a worker
  does. psycopg prepares the statement after five executions, and the head of
  the lease index collects dead entries from the acked rows until vacuum.

Only the lease call itself is timed: statement building, the round trip,
decoding. `BEGIN` is sent with the statement; `COMMIT`/`ROLLBACK` are not timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection, Engine

from app.queue import KIND_ANALYZE_PAGE, KIND_SYNC_MANGA, Lease, ack_done, lease, lease_kinds
from bench.explain import (
    CapturedStatement,
    capture_one,
    explain,
    explain_generic,
    plan_shape,
    plan_summary,
    prepared_plan_counts,
)
from bench.report import emit, ms, percentile

LEASE_DURATION = timedelta(seconds=60)
LEASE_INDEXES = ("ix_crawler_jobs_lease_kind", "ix_crawler_jobs_lease")
MARKER = "candidates"
"""A word only the lease statement contains: the name of its CTE."""

LeaseCall = Callable[[Connection], Sequence[object]]


@dataclass(frozen=True)
class LeaseCase:
    label: str
    call: LeaseCall


CASES = (
    LeaseCase(
        "lease(kind='analyze_page', 1)",
        lambda conn: lease(conn, KIND_ANALYZE_PAGE, 1, LEASE_DURATION),
    ),
    LeaseCase("lease(None, 1)", lambda conn: lease(conn, None, 1, LEASE_DURATION)),
    LeaseCase(
        "lease_kinds([analyze_page, sync_manga], 1)",
        lambda conn: lease_kinds(conn, [KIND_ANALYZE_PAGE, KIND_SYNC_MANGA], 1, LEASE_DURATION),
    ),
)

HEADERS = ("calls", "got a job", "p50 ms", "p95 ms", "p99 ms", "max ms", "server-side plans")


def raw_case(statement: CapturedStatement, label: str) -> LeaseCase:
    """The captured lease SQL sent as is: the same server work, no statement building."""

    def call(conn: Connection) -> Sequence[object]:
        return conn.exec_driver_sql(statement.sql, dict(statement.parameters)).all()

    return LeaseCase(label, call)


def time_calls(
    engine: Engine, case: LeaseCase, calls: int, time_budget: float, *, acked: bool
) -> list[str]:
    """Lease up to `calls` times within `time_budget` seconds; the figures of `HEADERS`."""
    latencies: list[float] = []
    leased = 0
    with engine.connect() as conn:
        deadline = time.perf_counter() + time_budget
        while len(latencies) < calls and time.perf_counter() < deadline:
            with conn.begin() as transaction:
                begun = time.perf_counter()
                got = case.call(conn)
                latencies.append(time.perf_counter() - begun)
                if not acked:
                    transaction.rollback()
            leased += len(got)
            for held in got if acked else ():
                if isinstance(held, Lease):
                    with conn.begin():
                        ack_done(conn, held)
        counts = prepared_plan_counts(conn, MARKER)
    plans = "not prepared" if counts is None else f"{counts[0]} generic / {counts[1]} custom"
    return [
        f"{len(latencies):,}",
        f"{leased:,}",
        ms(percentile(latencies, 0.5)),
        ms(percentile(latencies, 0.95)),
        ms(percentile(latencies, 0.99)),
        ms(max(latencies, default=float("nan"))),
        plans,
    ]


def capture_lease(engine: Engine, case: LeaseCase) -> CapturedStatement:
    """The SQL and parameters `case` sends, from one rolled-back call."""

    def run_once() -> None:
        with engine.connect() as conn, conn.begin() as transaction:
            case.call(conn)
            transaction.rollback()

    return capture_one(engine, MARKER, run_once)


def show_plans(engine: Engine, case: LeaseCase) -> None:
    """Print the custom plan of the case's lease statement, and the generic plan:
    in full when its shape differs, else as a one-line summary."""
    statement = capture_lease(engine, case)
    with engine.connect() as conn:
        custom = explain(conn, statement)
        generic = explain_generic(conn, statement)
    emit()
    emit(f"  {case.label} -- custom plan: {plan_summary(custom, LEASE_INDEXES)}")
    for line in custom:
        emit(f"    {line}")
    same = plan_shape(generic) == plan_shape(custom)
    emit(
        f"  {case.label} -- generic plan ({'same shape' if same else 'DIFFERENT shape'}): "
        f"{plan_summary(generic, LEASE_INDEXES)}"
    )
    if not same:
        for line in generic:
            emit(f"    {line}")
