"""The composition root: builds the page-analysis runner from `Settings`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import Protocol

from sqlalchemy import Engine

from manga_page_analysis.analysis.analyzer.protocol import Analyzer, Readiness
from manga_page_analysis.analysis.model_server.client import VisionClient, VisionObserver
from manga_page_analysis.analysis.page_events import analysis_event_bus
from manga_page_analysis.analysis.page_handler import PageAnalysisHandler
from manga_page_analysis.config import Settings
from manga_page_analysis.db import listen_database_url, make_engine
from manga_page_analysis.errors import ServiceError
from manga_page_analysis.storage import ProbedStorage, Storage, open_storage
from manga_page_analysis.worker.gates.readiness import ReadinessGate
from manga_page_analysis.worker.reports.events import EventBus
from manga_page_analysis.worker.reports.observer import RunnerObserver
from manga_page_analysis.worker.runner import Runner

logger = logging.getLogger(__name__)


@contextmanager
def analysis_runner(
    settings: Settings,
    *,
    engine: Engine | None = None,
    vision: Analyzer | None = None,
    events: EventBus | None = None,
    observer: RunnerObserver | None = None,
    vision_observer: AnalysisObserver | None = None,
    storage: Storage | None = None,
) -> Iterator[Runner]:
    """A ready-to-start runner for `analyze_page` jobs; disposes what it built on exit.

    Without `vision`, `settings.backend` picks the analyzer; without `storage`,
    `open_storage(settings)` the store. A store that can be down (S3) joins the
    readiness gate: while it does not answer, nothing is leased. `vision_observer` hears every
    readiness probe of the gate and every request of a vision client built here. The
    analyzer is started here, whoever built it: a missing OCR model raises `OcrModelMissing`
    here, and an analyzer that fails to start stops the runner; its error is raised when the
    block exits.
    """
    with ExitStack() as owned:
        if engine is None:
            engine = make_engine(settings)
            owned.callback(engine.dispose)
        if vision is None:
            if settings.backend == "ocr":
                # Imported only for the `ocr` backend: it brings numpy and the
                # OCR stack, which an `http` worker never needs.
                from manga_page_analysis.analysis.reader.ocr_analyzer import OcrAnalyzer

                vision = OcrAnalyzer()
            elif not settings.vision_url:
                raise ValueError("VISION_URL is not set: the http backend needs a model server")
            else:
                vision = VisionClient(
                    base_url=settings.vision_url,
                    model=settings.vision_model,
                    api_key=settings.vision_api_key,
                    health_url=settings.health_url,
                    max_tokens=settings.vision_max_tokens,
                    connect_timeout=settings.vision_connect_timeout_seconds,
                    read_timeout=settings.vision_read_timeout_seconds,
                    observer=vision_observer,
                )
            owned.callback(vision.close)
        if storage is None:
            storage = open_storage(settings)
        handler = PageAnalysisHandler(
            storage=storage,
            vision=vision,
            max_image_bytes=settings.max_image_bytes,
            max_side_px=settings.vision_max_side_px,
            max_image_pixels=settings.max_image_pixels,
        )
        gate = ReadinessGate(
            # `vision_ready` reports the analyzer alone; the store only closes the gate.
            _with_storage(_reporting(vision.readiness, vision_observer), storage),
            name=vision.name,
            poll_seconds=settings.readiness_poll_seconds,
        )
        if events is None:
            # NOTIFYs from a background thread: a pool thread must not wait for
            # a commit to report `started` or `completed` (about 5 ms a page).
            events = analysis_event_bus(engine, background=True)
            owned.callback(events.close)
        runner = Runner(
            engine,
            [handler],
            workers=settings.analysis_workers,
            lease_duration=timedelta(seconds=settings.lease_seconds),
            job_timeout=settings.job_timeout_seconds,
            idle_poll=settings.idle_poll_seconds,
            listen=settings.queue_listen,
            listen_url=listen_database_url(settings),
            # Each worker's next page leased and loaded while it waits for the
            # model: pages started together finish together, and a worker that
            # waited for the next lease round (2-3 ms, more on a busy machine)
            # lost that much of its slot (docs/performance.md).
            prefetch=settings.analysis_workers,
            readiness=gate,
            events=events,
            reap_retention_days=settings.reap_retention_days,
            name="analysis",
            observer=observer,
            shutdown_grace=settings.shutdown_grace_seconds,
            leader_lease=timedelta(seconds=settings.leader_lease_seconds),
            reclaim_interval=settings.reclaim_interval_seconds,
            reap_interval=settings.reap_interval_seconds,
            breaker_failures=settings.breaker_failures,
            breaker_pause=settings.breaker_pause_seconds,
        )
        failures: list[ServiceError] = []

        def failed(error: ServiceError) -> None:
            failures.append(error)
            runner.stop()

        vision.start(on_failure=failed)
        yield runner
        if failures:
            raise failures[0]


class AnalysisObserver(VisionObserver, Protocol):
    """A `VisionObserver` that also hears the readiness gate's probes (for `vision_ready`)."""

    def vision_probed(self, ready: bool) -> None:
        """The gate probed the analyzer (`ready`: it may lease). Quick, thread-safe;
        whatever it raises is logged and ignored."""
        ...


def _with_storage(probe: Callable[[], Readiness], storage: Storage) -> Callable[[], Readiness]:
    """`probe`, and then the store's own readiness when it has one."""
    if not isinstance(storage, ProbedStorage):
        return probe

    def both() -> Readiness:
        answer = probe()
        if not answer.ready:
            return answer
        store = storage.readiness()
        if store.ready:
            return answer
        return Readiness(
            ready=False, reason=store.reason, part=f"page store {_store_name(storage)}"
        )

    return both


def _store_name(storage: Storage) -> str:
    return str(getattr(storage, "name", "") or storage)


def _reporting(
    probe: Callable[[], Readiness], observer: AnalysisObserver | None
) -> Callable[[], Readiness]:
    if observer is None:
        return probe

    def reported() -> Readiness:
        answer = probe()
        try:
            observer.vision_probed(answer.ready)
        except Exception:
            logger.exception("vision observer failed in vision_probed")
        return answer

    return reported
