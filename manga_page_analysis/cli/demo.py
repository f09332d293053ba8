"""`manga-analysis demo` (`make demo` in a checkout): the whole service at work on the sample manga.

Re-running reuses the sample manga (found by its title, when it still has
one page per sample image): its pages are analysed again (`force`), so
every run shows the worker at work and the database keeps one copy.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence, Set
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Engine, Row, func, select

from manga_page_analysis.analysis.page_events import analysis_event_bus
from manga_page_analysis.analysis.reader.ocr_analyzer import OcrAnalyzer
from manga_page_analysis.analysis.wiring import analysis_runner
from manga_page_analysis.cli.importer import IMAGE_SUFFIXES, import_folder
from manga_page_analysis.cli.invocation import command_line, command_text
from manga_page_analysis.cli.shutdown import EXIT_INTERRUPTED, GracefulStop
from manga_page_analysis.config import DEFAULT_VISION_URL, Settings
from manga_page_analysis.models import Chapter, Job, Manga, Page, PageAnalysis
from manga_page_analysis.observability.terminal import visible
from manga_page_analysis.queue import KIND_ANALYZE_PAGE, request_analysis
from manga_page_analysis.storage import Storage, open_storage
from manga_page_analysis.worker.reports.events import JobEvent
from manga_page_analysis.worker.runner import SHUTDOWN_JOIN_SECONDS


def _sample_folder() -> Path:
    packaged = Path(__file__).resolve().parents[1] / "_sample_manga"  # the wheel's copy (setup.py)
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "examples" / "sample_manga"  # a checkout


SAMPLE_FOLDER: Final = _sample_folder()
"""The sample pages: `examples/sample_manga/`, shipped in the wheel as `manga_page_analysis/_sample_manga/`."""
SAMPLE_TITLE: Final = "Sample manga (demo)"
"""Title of the demo's manga; a second run finds the manga by it."""
FORMER_SAMPLE_TITLES: Final = ("Sample manga (make demo)",)
"""Titles earlier versions gave it: their sample manga is reused, not copied again."""
SAMPLE_CHAPTER: Final = Decimal(1)
TEXT_COLUMN_CHARS: Final = 90
"""OCR text shown per page in the table."""


def run_demo(
    settings: Settings, engine: Engine, database_label: str, timeout: float, graceful: GracefulStop
) -> int:
    """Import (or reuse) the sample manga, analyse it, print the results; 0 when all pages
    are done, 130 when `graceful` was asked to stop (the jobs in flight are released).

    The database must be migrated. Worker threads are stopped and joined before returning.
    """
    say = partial(print, flush=True)
    pages, reused = _prepare_pages(engine, open_storage(settings))
    say(
        f"{'Reusing' if reused else 'Imported'} {SAMPLE_TITLE!r}: {len(pages)} page(s) from "
        f"{SAMPLE_FOLDER}; analysis requested{' again (force)' if reused else ''}."
    )
    ocr = OcrAnalyzer() if settings.backend == "ocr" else None
    progress = _Progress(pages, ocr)
    events = analysis_event_bus(engine)
    events.subscribe(progress.on_event)
    if ocr is not None:
        say(f"Analyzer: in-process OCR, {ocr.model}; loading the model...")
    else:
        say(f"Analyzer: vision model server {settings.vision_url} (model {settings.vision_model})")
    started = time.monotonic()
    try:
        with analysis_runner(settings, engine=engine, vision=ocr, events=events) as runner:
            graceful.on_stop(runner.stop, now=runner.stop_now)
            runner.start()
            deadline = time.monotonic() + timeout
            try:
                while not (drained := progress.finished(engine)):
                    if time.monotonic() > deadline or runner.wait_stopping(0.25):
                        break
            finally:
                runner.stop()
                runner.join(settings.shutdown_grace_seconds + SHUTDOWN_JOIN_SECONDS)
    finally:
        if ocr is not None:
            ocr.close()
    elapsed = time.monotonic() - started
    if graceful.requested.is_set():
        say(
            f"Interrupted after {elapsed:.1f} s: pages being analysed were released to the "
            f"queue; {command_text('demo', make_target='demo')} (or "
            f"{command_text('run-worker', make_target='run-worker')}) picks them up again."
        )
        return EXIT_INTERRUPTED
    say(f"{'Finished' if drained else 'Gave up'} after {elapsed:.1f} s.")
    say()
    rows = _results(engine, pages)
    earlier = {row.number for row in rows if row.status != "not analysed"} - {
        number for page_id, number in pages.items() if progress.ended(page_id)
    }
    say("\n".join(_table(rows, earlier)))
    if earlier:
        say("  * an earlier run's analysis: this run did not finish that page")
    say()
    say("\n".join(_where(settings, database_label)))
    all_done = drained and all(row.status == "done" for row in rows)
    return 0 if all_done else 1


class _Progress:
    """Prints the demo pages' events as they come (on the runner's threads)."""

    def __init__(self, pages: dict[uuid.UUID, int], ocr: OcrAnalyzer | None) -> None:
        self._numbers = pages
        self._ocr = ocr
        self._lock = threading.Lock()
        self._ended: set[uuid.UUID] = set()
        self._announced = ocr is None

    def announce_model(self) -> None:
        with self._lock:
            if self._announced or self._ocr is None or self._ocr.load_seconds is None:
                return
            self._announced = True
        print(f"OCR model loaded and warmed up in {self._ocr.load_seconds:.1f} s.", flush=True)

    def on_event(self, event: JobEvent) -> None:
        page_id = uuid.UUID(str(event.breadcrumb.get("page_id")))
        if page_id not in self._numbers:
            return
        self.announce_model()
        with self._lock:
            if event.type in ("completed", "failed"):
                self._ended.add(page_id)
            ended = len(self._ended)
        detail = ""
        if "duration_ms" in event.details:
            detail = f" in {int(event.details['duration_ms']) / 1000:.2f} s"
        if event.type == "failed":
            detail = f": {visible(str(event.details.get('error', '')))}"
        page = self._numbers[page_id]
        print(f"  [{ended}/{len(self._numbers)}] page {page} {event.type}{detail}", flush=True)

    def ended(self, page_id: uuid.UUID) -> bool:
        """The page's job completed or failed an attempt during this run."""
        with self._lock:
            return page_id in self._ended

    def finished(self, engine: Engine) -> bool:
        """Every page completed or failed an attempt, or has no job left to run."""
        self.announce_model()
        with self._lock:
            waiting = set(self._numbers) - self._ended
        if not waiting:
            return True
        with engine.connect() as conn:
            active = conn.execute(
                select(Job.payload["page_id"].astext).where(
                    Job.state.in_(("pending", "running")),
                    Job.payload["kind"].astext == KIND_ANALYZE_PAGE,
                    Job.payload["page_id"].astext.in_([str(page_id) for page_id in waiting]),
                )
            ).all()
        return not active


def _prepare_pages(engine: Engine, storage: Storage) -> tuple[dict[uuid.UUID, int], bool]:
    """The demo's pages (id -> number, in page order), and whether they were reused."""
    images = sorted(p for p in SAMPLE_FOLDER.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    with engine.begin() as conn:
        chapter_id = conn.execute(
            select(Chapter.id)
            .join(Manga, Manga.id == Chapter.manga_id)
            .where(
                Manga.title.in_((SAMPLE_TITLE, *FORMER_SAMPLE_TITLES)),
                Chapter.number == SAMPLE_CHAPTER,
            )
            .order_by(Manga.created_at.desc())
            .limit(1)
        ).scalar_one_or_none()
        existing = conn.execute(
            select(Page.id, Page.number, Page.storage_key)
            .where(Page.chapter_id == chapter_id)
            .order_by(Page.number)
        ).all()
        if chapter_id is not None and len(existing) == len(images):
            for (page_id, _number, key), image in zip(existing, images, strict=True):
                # The store (STORAGE_ROOT, STORAGE_URL) may have changed since the first
                # run: put the image back.
                storage.write_bytes(
                    key, image.read_bytes(), content_type=IMAGE_SUFFIXES[image.suffix.lower()]
                )
                request_analysis(conn, page_id, force=True)
            return {page_id: number for page_id, number, _key in existing}, True
    # A sample manga with another number of pages (the samples changed): a fresh copy.
    result = import_folder(
        engine,
        storage,
        SAMPLE_FOLDER,
        title=SAMPLE_TITLE,
        chapter=SAMPLE_CHAPTER,
        new_manga=chapter_id is not None,
    )
    return {page.page_id: page.number for page in result.pages}, False


def _results(engine: Engine, pages: dict[uuid.UUID, int]) -> list[Row[Any]]:
    """One row per page, in page order: number, status ("not analysed" when there is no
    analysis), duration_ms, ocr_text, error."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(
                    Page.number,
                    func.coalesce(PageAnalysis.status, "not analysed").label("status"),
                    PageAnalysis.duration_ms,
                    PageAnalysis.ocr_text,
                    PageAnalysis.error,
                )
                .outerjoin(PageAnalysis, PageAnalysis.page_id == Page.id)
                .where(Page.id.in_(list(pages)))
                .order_by(Page.number)
            )
        )


def _table(rows: Sequence[Row[Any]], earlier: Set[int]) -> list[str]:
    """The results table; pages in `earlier` (by number) show an earlier run's analysis."""
    lines = [f"{'page':>4}  {'status':<12}  {'duration':>8}  OCR text (one bubble per ' / ')"]
    for row in rows:
        status = f"{row.status}*" if row.number in earlier else row.status
        duration = f"{row.duration_ms / 1000:.2f} s" if row.duration_ms is not None else "-"
        text = " / ".join(row.ocr_text.splitlines()) if row.ocr_text else "(no text)"
        if row.error and row.status != "done":
            text = f"error: {row.error}"
        text = visible(text)
        if len(text) > TEXT_COLUMN_CHARS:
            text = text[: TEXT_COLUMN_CHARS - 1] + "…"
        lines.append(f"{row.number:>4}  {status:<12}  {duration:>8}  {text}")
    return lines


def _where(settings: Settings, database_label: str) -> list[str]:
    lines = [f"Database:    {database_label} (tables page_analysis, crawler_jobs)"]
    if not settings.database_url:
        lines.append(
            f"             embedded Postgres, data in {(settings.dev_dir / 'pgdata').resolve()}"
        )
    run_worker = command_line("run-worker", make_target="run-worker")
    lines += [
        f"Page images: {settings.storage_url or settings.storage_root.resolve()}",
        f"Run again:   {command_line('demo', make_target='demo')} (analyses the same pages "
        "again); a long-running worker:",
        f"             {run_worker}",
        "A real model server (tags, description, NSFW verdict): start an OpenAI-compatible",
        "  vision server (llama.cpp's llama-server, vLLM, Ollama), then",
        f"  VISION_URL={DEFAULT_VISION_URL} VISION_MODEL=<its model name> {run_worker}",
        "  (VISION_BACKEND=ocr keeps the in-process OCR even with VISION_URL set.)",
    ]
    return lines
