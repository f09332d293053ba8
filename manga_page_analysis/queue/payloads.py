"""The seed's job payloads: the JSON stored in `crawler_jobs.payload`, tagged by
`kind`, registered like any host's kind (`kinds.register_kind`). Rows of the
service this one succeeds must keep decoding: unknown keys are ignored, and
`url`, `title` and `force` have defaults."""

from __future__ import annotations

from typing import Annotated, Final, Literal
from uuid import UUID

from pydantic import Field, StrictBool

from manga_page_analysis.models import DEDUP_SLOTS
from manga_page_analysis.queue.kinds import Payload, decode_payload, register_kind

KIND_SYNC_MANGA: Final = "sync_manga"
KIND_SYNC_CHAPTER_LIST: Final = "sync_chapter_list"
KIND_SYNC_CHAPTER_CONTENT: Final = "sync_chapter_content"
KIND_ANALYZE_PAGE: Final = "analyze_page"

ALL_KINDS: Final = (
    KIND_SYNC_MANGA,
    KIND_SYNC_CHAPTER_LIST,
    KIND_SYNC_CHAPTER_CONTENT,
    KIND_ANALYZE_PAGE,
)
"""The seed's kinds (hosts register more: `registered_kinds()`)."""


class SyncManga(Payload):
    kind: Literal["sync_manga"] = KIND_SYNC_MANGA
    source_id: str
    source_manga_key: str
    url: str = ""
    title: str = ""


class SyncChapterList(Payload):
    kind: Literal["sync_chapter_list"] = KIND_SYNC_CHAPTER_LIST
    source_id: str
    manga_id: UUID
    source_manga_key: str


class SyncChapterContent(Payload):
    kind: Literal["sync_chapter_content"] = KIND_SYNC_CHAPTER_CONTENT
    source_id: str
    chapter_id: UUID
    source_chapter_key: str


class AnalyzePage(Payload):
    kind: Literal["analyze_page"] = KIND_ANALYZE_PAGE
    page_id: UUID
    # Strict: `"force": "yes"` (or 1) from a foreign writer is refused, not read as true.
    force: StrictBool = False


JobPayload = Annotated[
    SyncManga | SyncChapterList | SyncChapterContent | AnalyzePage, Field(discriminator="kind")
]
"""The seed's four payloads (a host's kinds are `Payload` subclasses of their own)."""


def _register_seed_kinds() -> None:
    dedup = {kind: (field, index) for index, (kind, field) in DEDUP_SLOTS.items()}
    for model in (SyncManga, SyncChapterList, SyncChapterContent, AnalyzePage):
        field, index = dedup.get(model.model_fields["kind"].default, (None, None))
        register_kind(model, dedup_field=field, dedup_index=index)


_register_seed_kinds()

__all__ = [
    "ALL_KINDS",
    "KIND_ANALYZE_PAGE",
    "KIND_SYNC_CHAPTER_CONTENT",
    "KIND_SYNC_CHAPTER_LIST",
    "KIND_SYNC_MANGA",
    "AnalyzePage",
    "JobPayload",
    "Payload",
    "SyncChapterContent",
    "SyncChapterList",
    "SyncManga",
    "decode_payload",
]
