"""page_analysis repository. Like every repository here it never commits."""

from __future__ import annotations

import uuid
from typing import Any, cast

from sqlalchemy import Table, case, func, select
from sqlalchemy.dialects.postgresql import insert

from app.analysis.answer import Analysis
from app.db import Conn
from app.models import PageAnalysis

ERROR_MAX_CHARS = 2000
"""`error` keeps the start of long messages."""

table = cast(Table, PageAnalysis.__table__)


def get_status(conn: Conn, page_id: uuid.UUID) -> str | None:
    """`done`, `failed`, or `None` when the page was never analysed."""
    status: str | None = conn.execute(
        select(table.c.status).where(table.c.page_id == page_id)
    ).scalar_one_or_none()
    return status


def save_done(
    conn: Conn, page_id: uuid.UUID, analysis: Analysis, *, model: str, duration_ms: int
) -> None:
    """Write (or overwrite) the page's successful analysis, stamping its duration."""
    values: dict[str, Any] = {
        "status": "done",
        "ocr_text": analysis.ocr_text,
        "ocr_blocks": analysis.ocr_blocks,
        "tags": list(analysis.tags),
        "description": analysis.description,
        "nsfw_rating": analysis.nsfw_rating,
        "nsfw_score": analysis.nsfw_score,
        "model": model,
        "error": None,
        "duration_ms": duration_ms,
    }
    statement = insert(table).values(page_id=page_id, **values)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[table.c.page_id],
            set_={**values, "updated_at": func.now()},
        )
    )


def save_failed(
    conn: Conn, page_id: uuid.UUID, error: str, *, model: str, duration_ms: int
) -> None:
    """Record that analysing the page failed for good.

    A page with no analysis (or a failed one) gets a `failed` row carrying
    this attempt's error and duration. A page that already has a `done`
    analysis keeps it, results and duration included (a failed forced
    re-analysis must not destroy a good one); only `error` records the failure.
    """
    error = error if len(error) <= ERROR_MAX_CHARS else error[: ERROR_MAX_CHARS - 1] + "…"
    was_done = table.c.status == "done"
    statement = insert(table).values(
        page_id=page_id, status="failed", error=error, model=model, duration_ms=duration_ms
    )
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[table.c.page_id],
            set_={
                "status": case((was_done, table.c.status), else_=statement.excluded.status),
                "error": statement.excluded.error,
                "model": case((was_done, table.c.model), else_=statement.excluded.model),
                "duration_ms": case(
                    (was_done, table.c.duration_ms), else_=statement.excluded.duration_ms
                ),
                "updated_at": func.now(),
            },
        )
    )
