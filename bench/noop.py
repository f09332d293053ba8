"""The no-op job for sections 2 and 3: the project's `NoopHandler` when it exists.

`manga_page_analysis.worker.noop.NoopHandler` (no result to write, so its acks can be batched)
is used when the installed app has it; otherwise `LocalNoopHandler` with the
same protocol. `Observed` wraps either and calls a hook when `execute` starts,
which is how the benchmark counts jobs and times pickup.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection

from manga_page_analysis.queue import (
    KIND_SYNC_CHAPTER_CONTENT,
    KIND_SYNC_CHAPTER_LIST,
    KIND_SYNC_MANGA,
    JobPayload,
    Lease,
    SyncChapterContent,
    SyncChapterList,
    SyncManga,
)
from manga_page_analysis.worker import JobContext


class LocalNoopHandler:
    """Does nothing, writes nothing: the runner's own cost per job."""

    kind = KIND_SYNC_MANGA
    timeout_message = "no-op job timed out"
    writes_result = False

    def load(self, conn: Connection, lease: Lease) -> JobPayload:
        return lease.payload

    def describe(self, item: JobPayload) -> str:
        return "no-op"

    def breadcrumb(self, item: JobPayload) -> Mapping[str, Any] | None:
        return None

    def execute(self, item: JobPayload, ctx: JobContext) -> None:
        return None

    def save(self, conn: Connection, item: JobPayload, result: None, ctx: JobContext) -> None:
        return None

    def save_failure(self, conn: Connection, item: JobPayload, error: str, ctx: JobContext) -> None:
        return None


def noop_handler() -> tuple[Any, str]:
    """A no-op handler and where it came from (`manga_page_analysis.worker.noop` or `bench`)."""
    try:
        from manga_page_analysis.worker.noop import NoopHandler  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return (
            LocalNoopHandler(),
            "bench.noop.LocalNoopHandler (manga_page_analysis.worker.noop is absent)",
        )
    try:
        return NoopHandler(KIND_SYNC_MANGA), "manga_page_analysis.worker.noop.NoopHandler"
    except TypeError:  # a NoopHandler with a kind of its own
        return NoopHandler(), "manga_page_analysis.worker.noop.NoopHandler"


class Observed:
    """Delegates everything to `inner`; `on_execute(lease)` runs as `execute` starts."""

    def __init__(self, inner: Any, on_execute: Callable[[Lease], None]) -> None:
        self._inner = inner
        self._on_execute = on_execute

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def execute(self, item: Any, ctx: JobContext) -> Any:
        self._on_execute(ctx.lease)
        return self._inner.execute(item, ctx)


def payload_for(kind: str, marker: str) -> JobPayload:
    """A payload of a crawl `kind` that carries `marker` (and passes every dedup index)."""
    if kind == KIND_SYNC_MANGA:
        return SyncManga(source_id="bench", source_manga_key=marker)
    if kind == KIND_SYNC_CHAPTER_LIST:
        return SyncChapterList(source_id="bench", manga_id=uuid.uuid4(), source_manga_key=marker)
    if kind == KIND_SYNC_CHAPTER_CONTENT:
        return SyncChapterContent(
            source_id="bench", chapter_id=uuid.uuid4(), source_chapter_key=marker
        )
    raise ValueError(f"the no-op handler's kind {kind!r} is not a crawl kind")


def marker_of(payload: JobPayload) -> str:
    """The marker `payload_for` put in."""
    if isinstance(payload, SyncManga | SyncChapterList):
        return payload.source_manga_key
    if isinstance(payload, SyncChapterContent):
        return payload.source_chapter_key
    raise ValueError(f"not a no-op payload: {payload!r}")
