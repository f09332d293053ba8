"""Queue depth: job counts by kind and state, and how late the oldest due job is."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import func, select

from manga_page_analysis.db import Conn
from manga_page_analysis.models import JOB_STATES
from manga_page_analysis.queue.kinds import registered_kinds
from manga_page_analysis.queue.table import KIND, PENDING, jobs, text_literal

UNKNOWN_KIND: Final = "unknown"
"""The stats key for rows whose payload has no `kind` (written by a foreign writer)."""


def queue_stats(conn: Conn) -> dict[str, Any]:
    """`{"jobs": {kind: {state: count}}, "oldest_pending_age_seconds": float | None}`.

    Every registered kind, and every kind found in rows, is listed with every
    state (zeros included). The age is `now() - scheduled_at` of the oldest
    pending job that is due (jobs waiting out a backoff are not late); `None`
    when nothing is due.
    """
    kind = func.coalesce(KIND, text_literal(UNKNOWN_KIND)).label("kind")
    rows = conn.execute(select(kind, jobs.c.state, func.count()).group_by(kind, jobs.c.state))
    counts: dict[str, dict[str, int]] = {
        k.name: dict.fromkeys(JOB_STATES, 0) for k in registered_kinds()
    }
    for row_kind, state, number in rows:
        counts.setdefault(row_kind, dict.fromkeys(JOB_STATES, 0))[state] = int(number)
    age = conn.execute(
        select(func.extract("epoch", func.now() - func.min(jobs.c.scheduled_at))).where(
            jobs.c.state == PENDING, jobs.c.scheduled_at <= func.now()
        )
    ).scalar_one()
    return {"jobs": counts, "oldest_pending_age_seconds": None if age is None else float(age)}
