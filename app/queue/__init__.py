"""The durable job queue on Postgres: payloads, the jobs repository, backoff."""

from app.queue.backoff import apply_jitter, backoff_base, backoff_for
from app.queue.jobs import (
    Lease,
    ack_done,
    ack_failed,
    enqueue,
    lease,
    lease_kinds,
    reap_done,
    reclaim_orphaned,
    release,
    release_unowned,
    renew,
)
from app.queue.payloads import (
    KIND_ANALYZE_PAGE,
    KIND_SYNC_CHAPTER_CONTENT,
    KIND_SYNC_CHAPTER_LIST,
    KIND_SYNC_MANGA,
    AnalyzePage,
    JobPayload,
    SyncChapterContent,
    SyncChapterList,
    SyncManga,
    decode_payload,
)
from app.queue.requests import request_analysis

__all__ = [
    "KIND_ANALYZE_PAGE",
    "KIND_SYNC_CHAPTER_CONTENT",
    "KIND_SYNC_CHAPTER_LIST",
    "KIND_SYNC_MANGA",
    "AnalyzePage",
    "JobPayload",
    "Lease",
    "SyncChapterContent",
    "SyncChapterList",
    "SyncManga",
    "ack_done",
    "ack_failed",
    "apply_jitter",
    "backoff_base",
    "backoff_for",
    "decode_payload",
    "enqueue",
    "lease",
    "lease_kinds",
    "reap_done",
    "reclaim_orphaned",
    "release",
    "release_unowned",
    "renew",
    "request_analysis",
]
