"""Framework-neutral admin queries and actions: stats, jobs (listing, view, retry,
discard), labels, and browsing mangas -> chapters -> pages.

Every function takes `conn` first (a SQLAlchemy `Connection` or `Session`),
executes on it and never commits or rolls back. The Flask and Django
adapters (`manga_page_analysis.web`) and the operator commands (`manga_page_analysis.cli`) are built on it.
"""

from manga_page_analysis.admin.browse import (
    PAGE_STATES,
    get_chapter,
    get_manga,
    get_page,
    get_page_image,
    list_mangas,
    page_image_key,
    read_page_image,
)
from manga_page_analysis.admin.jobs import DISCARDED_ERROR, discard_job, get_job
from manga_page_analysis.admin.labels import label, with_labels
from manga_page_analysis.admin.queries import (
    DEFAULT_LIMIT,
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
from manga_page_analysis.admin.request_json import MAX_BODY_BYTES, parse_json
from manga_page_analysis.admin.retry import RetryReport, check_kind, retry_dead_jobs, retry_job
from manga_page_analysis.errors import AdminError, BadRequest, Conflict, NotFound
from manga_page_analysis.queue.stats import queue_stats

__all__ = [
    "DEFAULT_LIMIT",
    "DISCARDED_ERROR",
    "MAX_BODY_BYTES",
    "MAX_LIMIT",
    "PAGE_STATES",
    "AdminError",
    "BadRequest",
    "Conflict",
    "NotFound",
    "RetryReport",
    "check_kind",
    "decode_cursor",
    "discard_job",
    "encode_cursor",
    "get_chapter",
    "get_job",
    "get_manga",
    "get_page",
    "get_page_analysis",
    "get_page_image",
    "label",
    "list_jobs",
    "list_mangas",
    "page_image_key",
    "parse_force_body",
    "parse_json",
    "parse_limit",
    "parse_uuid",
    "queue_stats",
    "read_page_image",
    "request_page_analysis",
    "retry_dead_jobs",
    "retry_job",
    "with_labels",
]
