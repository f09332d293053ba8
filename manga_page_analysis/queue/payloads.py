"""Job payloads: the JSON stored in `crawler_jobs.payload`, tagged by `kind`. Rows of
the service this one succeeds must keep decoding: unknown keys are ignored, and
`url`, `title` and `force` have defaults."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError

from manga_page_analysis.errors import PayloadError

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


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    def to_json(self) -> dict[str, Any]:
        """The wire/storage form: plain JSON types, `kind` included."""
        return self.model_dump(mode="json")


class SyncManga(_Payload):
    kind: Literal["sync_manga"] = KIND_SYNC_MANGA
    source_id: str
    source_manga_key: str
    url: str = ""
    title: str = ""


class SyncChapterList(_Payload):
    kind: Literal["sync_chapter_list"] = KIND_SYNC_CHAPTER_LIST
    source_id: str
    manga_id: UUID
    source_manga_key: str


class SyncChapterContent(_Payload):
    kind: Literal["sync_chapter_content"] = KIND_SYNC_CHAPTER_CONTENT
    source_id: str
    chapter_id: UUID
    source_chapter_key: str


class AnalyzePage(_Payload):
    kind: Literal["analyze_page"] = KIND_ANALYZE_PAGE
    page_id: UUID
    # Strict: `"force": "yes"` (or 1) from a foreign writer is refused, not read as true.
    force: StrictBool = False


JobPayload = Annotated[
    SyncManga | SyncChapterList | SyncChapterContent | AnalyzePage, Field(discriminator="kind")
]

_ADAPTER: TypeAdapter[JobPayload] = TypeAdapter(JobPayload)


def decode_payload(data: Any) -> JobPayload:
    """Decode stored JSON (a dict, or a JSON string) into a payload; `PayloadError` if it can't."""
    try:
        if isinstance(data, str | bytes):
            return _ADAPTER.validate_json(data)
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors()[:5]:
            location = ".".join(str(part) for part in error["loc"]) or "payload"
            problems.append(f"{location}: {error['msg']}")
        raise PayloadError("invalid job payload: " + "; ".join(problems)) from exc
