"""page_analysis repository. Like every repository here it never commits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, cast

from sqlalchemy import Table, case, func
from sqlalchemy.dialects.postgresql import insert

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import truncated
from manga_page_analysis.models import PageAnalysis

ERROR_MAX_CHARS: Final = 2000
"""`error` keeps the start of long messages."""

table = cast(Table, PageAnalysis.__table__)


@dataclass(frozen=True, slots=True)
class AnalysisRecord:
    """A successful analysis as `save_done` stores it. `nsfw_rating` and `nsfw_score`
    are both `None` when nothing was judged; `ocr_blocks` is `None` when the analyzer
    gives no positions (the JSON of the `ocr_blocks` column otherwise); `model` names
    who produced it."""

    model: str
    ocr_text: str
    tags: Sequence[str]
    description: str
    nsfw_rating: str | None
    nsfw_score: float | None
    ocr_blocks: list[dict[str, Any]] | None


def save_done(conn: Conn, page_id: uuid.UUID, record: AnalysisRecord, *, duration_ms: int) -> None:
    """Write (or overwrite) the page's successful analysis, stamping its duration."""
    values: dict[str, Any] = {
        **asdict(record),
        "tags": list(record.tags),
        "status": "done",
        "error": None,
        "duration_ms": duration_ms,
    }
    statement = insert(table).values(page_id=page_id, **values)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[table.c.page_id], set_={**values, "updated_at": func.now()}
        )
    )


def save_failed(
    conn: Conn, page_id: uuid.UUID, error: str, *, model: str, duration_ms: int
) -> None:
    """Record that analysing the page failed for good: a `failed` row with this
    attempt's error and duration, unless the page has a `done` analysis, which it
    keeps (a failed forced re-analysis must not destroy a good one): then only
    `error` records the failure."""
    error = truncated(error, ERROR_MAX_CHARS)
    was_done = table.c.status == "done"
    statement = insert(table).values(
        page_id=page_id, status="failed", error=error, model=model, duration_ms=duration_ms
    )
    kept_if_done = {
        name: case((was_done, table.c[name]), else_=statement.excluded[name])
        for name in ("status", "model", "duration_ms")
    }
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[table.c.page_id],
            set_={**kept_if_done, "error": statement.excluded.error, "updated_at": func.now()},
        )
    )
