"""Framework-neutral admin queries and actions: stats, job listings, retry, labels.

Every function takes `conn` first (a SQLAlchemy `Connection` or `Session`),
executes on it and never commits or rolls back. The Flask and Django
adapters (`app.web`) and the operator commands (`app.cli`) are built on it.
"""

from app.admin.labels import label, with_labels
from app.admin.queries import (
    DEFAULT_LIMIT,
    MAX_BODY_BYTES,
    MAX_LIMIT,
    decode_cursor,
    encode_cursor,
    get_page_analysis,
    list_jobs,
    parse_force_body,
    parse_limit,
    parse_uuid,
    request_page_analysis,
)
from app.admin.retry import check_kind, retry_dead_jobs, retry_job
from app.errors import AdminError, BadRequest, Conflict, NotFound
from app.queue.stats import queue_stats

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_BODY_BYTES",
    "MAX_LIMIT",
    "AdminError",
    "BadRequest",
    "Conflict",
    "NotFound",
    "check_kind",
    "decode_cursor",
    "encode_cursor",
    "get_page_analysis",
    "label",
    "list_jobs",
    "parse_force_body",
    "parse_limit",
    "parse_uuid",
    "queue_stats",
    "request_page_analysis",
    "retry_dead_jobs",
    "retry_job",
    "with_labels",
]
