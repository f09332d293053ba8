"""The `analyze_page` handler: a page image in, a `page_analysis` row out."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from manga_page_analysis.analysis.analyzer.prepared_image import prepare_image
from manga_page_analysis.analysis.analyzer.protocol import Analyzer, VisionResult
from manga_page_analysis.config import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_SIDE_PX
from manga_page_analysis.queue import Lease
from manga_page_analysis.queue.payloads import KIND_ANALYZE_PAGE, AnalyzePage
from manga_page_analysis.repos.page_analysis import save_done, save_failed
from manga_page_analysis.repos.pages import PageContext, get_page_to_analyse
from manga_page_analysis.storage import Storage
from manga_page_analysis.worker.handler import JobContext

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PageAnalysisHandler:
    """Reads the page from storage, prepares the image, asks the vision model,
    and stores the answer. Skips pages already analysed unless forced."""

    kind = KIND_ANALYZE_PAGE
    timeout_message = "analysis dispatch timed out"
    writes_result = True

    storage: Storage
    vision: Analyzer
    max_image_bytes: int
    max_side_px: int = DEFAULT_MAX_SIDE_PX
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS

    def load(self, conn: Connection, lease: Lease) -> PageContext | None:
        payload = lease.payload
        if not isinstance(payload, AnalyzePage):
            raise TypeError(f"expected an analyze_page payload, got {payload.kind}")
        found = get_page_to_analyse(conn, payload.page_id)
        if found is None:
            logger.info(
                "job %s: page %s no longer exists; nothing to do", lease.id, payload.page_id
            )
            return None
        page, status = found
        if not payload.force and status == "done":
            logger.info(
                "job %s: page %s is already analysed and the job is not forced; skipping",
                lease.id,
                payload.page_id,
            )
            return None
        return page

    def describe(self, page: PageContext) -> str:
        return (
            f"page {page.page_id}: {page.manga_title!r} ch. {page.chapter_number} "
            f"p. {page.page_number}"
        )

    def breadcrumb(self, page: PageContext) -> Mapping[str, Any] | None:
        return {
            "page_id": page.page_id,
            "manga_id": page.manga_id,
            "manga_title": page.manga_title,
            "chapter_id": page.chapter_id,
            "chapter_number": page.chapter_number,
            "page_number": page.page_number,
        }

    def skipped_breadcrumb(self, lease: Lease) -> Mapping[str, Any] | None:
        """A skipped job (the page is already analysed and the job not forced, or
        the page is gone) names its page: the admin page's counts and views
        learn that it ended."""
        payload = lease.payload
        return {"page_id": payload.page_id} if isinstance(payload, AnalyzePage) else None

    def log_fields(self, page: PageContext) -> Mapping[str, Any]:
        return {"page_id": str(page.page_id)}

    def execute(self, page: PageContext, ctx: JobContext) -> VisionResult:
        data = self.storage.read_bytes(page.storage_key, self.max_image_bytes)
        image = prepare_image(data, max_side_px=self.max_side_px, max_pixels=self.max_image_pixels)
        if image.reencoded:
            logger.info(
                "%s: image re-encoded to %s %dx%d for the model",
                ctx.label,
                image.mime,
                image.width,
                image.height,
            )
        return self.vision.analyze(
            image, deadline=ctx.deadline, cancel=ctx.stop, job_label=ctx.label
        )

    def save(
        self, conn: Connection, page: PageContext, result: VisionResult, ctx: JobContext
    ) -> None:
        save_done(conn, page.page_id, result.record(), duration_ms=ctx.elapsed_ms())

    def save_failure(
        self, conn: Connection, page: PageContext, error: str, ctx: JobContext
    ) -> None:
        save_failed(
            conn, page.page_id, error, model=self.vision.model, duration_ms=ctx.elapsed_ms()
        )
