"""The durable job queue on Postgres: payloads, enqueueing, leasing, every state
change of a job, backoff, analysis requests and queue stats."""

from manga_page_analysis.errors import NoSuchPage
from manga_page_analysis.queue.backoff import apply_jitter, backoff_base
from manga_page_analysis.queue.enqueueing import enqueue, enqueue_many
from manga_page_analysis.queue.leasing import lease, lease_kinds
from manga_page_analysis.queue.payloads import (
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
from manga_page_analysis.queue.requests import Requested, request_analysis, request_analysis_many
from manga_page_analysis.queue.states import (
    Reclaim,
    ack_dead,
    ack_dead_many,
    ack_done,
    ack_done_many,
    ack_failed,
    ack_failed_many,
    reap_done,
    reclaim_expired,
    reclaim_orphaned,
    release,
    release_many,
    release_unowned,
    release_unowned_many,
    renew,
    renew_many,
)
from manga_page_analysis.queue.stats import queue_stats
from manga_page_analysis.queue.table import (
    CRASH_LOOP_ERROR,
    RECLAIM_LIMIT,
    WAKEUP_CHANNEL,
    WAKEUP_KIND_CHARS,
    Lease,
)

__all__ = [
    "CRASH_LOOP_ERROR",
    "KIND_ANALYZE_PAGE",
    "KIND_SYNC_CHAPTER_CONTENT",
    "KIND_SYNC_CHAPTER_LIST",
    "KIND_SYNC_MANGA",
    "RECLAIM_LIMIT",
    "WAKEUP_CHANNEL",
    "WAKEUP_KIND_CHARS",
    "AnalyzePage",
    "JobPayload",
    "Lease",
    "NoSuchPage",
    "Reclaim",
    "Requested",
    "SyncChapterContent",
    "SyncChapterList",
    "SyncManga",
    "ack_dead",
    "ack_dead_many",
    "ack_done",
    "ack_done_many",
    "ack_failed",
    "ack_failed_many",
    "apply_jitter",
    "backoff_base",
    "decode_payload",
    "enqueue",
    "enqueue_many",
    "lease",
    "lease_kinds",
    "queue_stats",
    "reap_done",
    "reclaim_expired",
    "reclaim_orphaned",
    "release",
    "release_many",
    "release_unowned",
    "release_unowned_many",
    "renew",
    "renew_many",
    "request_analysis",
    "request_analysis_many",
]
