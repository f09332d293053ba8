"""Section 3: lease latency against a large backlog, and the lease plans.

The backlog, oldest first in schedule order:

- running jobs with live leases (their workers are busy): every lease walks
  past them, since the lease indexes cover `pending` and `running` rows;
- running jobs with expired leases (their workers died): due, leased first;
- the pending jobs, half `sync_manga`, half `analyze_page`, interleaved;
- jobs scheduled an hour ahead (not due).

The table is `VACUUM ANALYZE`d, then the plans are shown, then single lease
calls are timed (see bench/lease_latency.py for the two timing modes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine, text

from app.queue import KIND_ANALYZE_PAGE, KIND_SYNC_MANGA
from bench.db import reset, seed_jobs, vacuum_analyze
from bench.lease_latency import CASES, HEADERS, capture_lease, raw_case, show_plans, time_calls
from bench.report import emit, heading, note, progress, table


@dataclass(frozen=True)
class Backlog:
    pending: int
    live_leases: int
    expired_leases: int
    future: int


def build_backlog(engine: Engine, backlog: Backlog) -> None:
    """Insert the backlog described in the module docstring, then VACUUM ANALYZE."""
    reset(engine)
    half = backlog.pending // 2
    kinds = (KIND_SYNC_MANGA, KIND_ANALYZE_PAGE)
    with engine.begin() as conn:
        for phase, kind in enumerate(kinds):
            # Per kind: live leases, expired leases, pending, future; interleaved by phase.
            seed_jobs(
                conn, backlog.live_leases // 2, kind=kind, start="now() - interval '3 hours'",
                step_ms=2, phase_ms=phase, state="running",
                leased_until="now() + interval '1 hour'",
            )  # fmt: skip
            seed_jobs(
                conn, backlog.expired_leases // 2, kind=kind,
                start="now() - interval '2 hours'", step_ms=2, phase_ms=phase,
                state="running", leased_until="now() - interval '1 minute'",
            )  # fmt: skip
            seed_jobs(conn, half, kind=kind, step_ms=2, phase_ms=phase)
            seed_jobs(
                conn, backlog.future // 2, kind=kind, start="now() + interval '1 hour'",
                step_ms=2, phase_ms=phase,
            )  # fmt: skip
    vacuum_analyze(engine)


def describe_backlog(engine: Engine) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                """
                SELECT payload ->> 'kind' AS kind, state,
                       count(*) FILTER (WHERE scheduled_at > now()) AS future,
                       count(*) FILTER (WHERE leased_until > now()) AS live_lease,
                       count(*) FILTER (WHERE leased_until <= now()) AS expired_lease,
                       count(*) AS total
                FROM crawler_jobs GROUP BY 1, 2 ORDER BY 1, 2
                """
            )
        ).all()
    table(
        ["kind", "state", "future", "live lease", "expired lease", "total"],
        [[row.kind, row.state, *(f"{value:,}" for value in row[2:])] for row in rows],
    )


def run(engine: Engine, backlog: Backlog, calls: int, time_budget: float) -> None:
    """Measure and print section 3."""
    heading(f"3. Lease latency against a backlog of {backlog.pending:,} pending jobs")
    progress(f"backlog: inserting {backlog.pending:,} pending jobs, VACUUM ANALYZE")
    started = time.perf_counter()
    build_backlog(engine, backlog)
    emit(f"  backlog built and vacuumed in {time.perf_counter() - started:.1f} s:")
    describe_backlog(engine)

    emit()
    emit("  Plans of the lease statement (EXPLAIN (ANALYZE, BUFFERS), rolled back):")
    for case in CASES:
        progress(f"backlog: EXPLAIN {case.label}")
        show_plans(engine, case)

    raw = raw_case(capture_lease(engine, CASES[0]), "  same SQL via exec_driver_sql")
    rows = []
    for mode, cases in (("rolled back", (*CASES[:1], raw, *CASES[1:])), ("acked", CASES)):
        for case in cases:
            progress(f"backlog: timing {case.label} ({mode})")
            figures = time_calls(engine, case, calls, time_budget, acked=mode == "acked")
            rows.append([case.label, mode, *figures])
    emit()
    emit(f"  Latency of one lease call, up to {calls} calls per row:")
    table(["case", "mode", *HEADERS], rows)
    note(
        "Timed: the lease call only (building the statement, the round trip, decoding).\n"
        "rolled back: the backlog never changes; psycopg drops prepared statements on ROLLBACK.\n"
        "acked: lease, commit, ack_done, as a worker does; the backlog shrinks by the calls.\n"
        "'same SQL via exec_driver_sql': the captured lease SQL sent without building it in\n"
        "SQLAlchemy Core, so the gap to the row above is client-side statement overhead.\n"
        "server-side plans: how Postgres planned psycopg's prepared lease statement on that\n"
        "connection (psycopg prepares a query after 5 executions)."
    )
    reset(engine)
