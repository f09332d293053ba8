"""The composition root: builds the page-analysis runner from `Settings`.

Hosts and tests can hand in their own engine or vision client; only what is
built here is closed here. `settings.backend` picks the analyzer: a
`VisionClient` for `http`, an `OcrAnalyzer` for `ocr`, whose models start
loading on a background thread at once (the readiness gate stays closed
until they are loaded and warmed up).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from sqlalchemy import Engine

from app.analysis.events import analysis_event_bus
from app.analysis.handler import PageAnalysisHandler
from app.analysis.http import VisionClient, VisionObserver
from app.analysis.ocr import OcrAnalyzer
from app.config import Settings
from app.db import listen_database_url, make_engine
from app.storage import LocalStorage
from app.worker.events import EventBus
from app.worker.observer import RunnerObserver
from app.worker.readiness import Probe, ProbeAnswer, ReadinessGate
from app.worker.runner import Runner

logger = logging.getLogger(__name__)


@contextmanager
def analysis_runner(
    settings: Settings,
    *,
    engine: Engine | None = None,
    vision: VisionClient | OcrAnalyzer | None = None,
    events: EventBus | None = None,
    observer: RunnerObserver | None = None,
    vision_observer: AnalysisObserver | None = None,
) -> Iterator[Runner]:
    """A ready-to-start runner for `analyze_page` jobs; disposes what it built on exit.

    `vision_observer` hears every readiness probe of the gate (whatever the
    backend), and every request of a vision client built here.

    With the `ocr` backend, a missing model raises `OcrModelMissing` here, and
    a model that fails to load stops the runner and raises `OcrModelError`
    when the block exits.
    """
    with ExitStack() as owned:
        if engine is None:
            engine = make_engine(settings)
            owned.callback(engine.dispose)
        if vision is None:
            if settings.backend == "ocr":
                vision = OcrAnalyzer()
            else:
                vision = VisionClient.from_settings(settings, observer=vision_observer)
            owned.callback(vision.close)
        handler = PageAnalysisHandler(
            storage=LocalStorage(settings.storage_root),
            vision=vision,
            max_image_bytes=settings.max_image_bytes,
            max_side_px=settings.vision_max_side_px,
        )
        gate = ReadinessGate(
            _reporting(_probe(vision), vision_observer),
            name=_gate_name(vision),
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
            prefetch=0,  # one page at a time per worker: the model server is the bottleneck
            readiness=gate,
            events=events,
            reap_retention_days=settings.reap_retention_days,
            name="analysis",
            observer=observer,
        )
        if isinstance(vision, OcrAnalyzer):
            vision.start_loading(on_failure=lambda _error: runner.stop())
        yield runner
        if isinstance(vision, OcrAnalyzer) and vision.load_error is not None:
            raise vision.load_error


class AnalysisObserver(VisionObserver, Protocol):
    """A `VisionObserver` that also hears the readiness gate's probes (for `vision_ready`)."""

    def vision_probed(self, ready: bool) -> None:
        """The gate probed the analyzer (`ready`: it may lease). Quick, thread-safe;
        whatever it raises is logged and ignored."""
        ...


@dataclass(frozen=True)
class _Loading:
    """The `ocr` backend's answer while its models load: expected, so logged at INFO."""

    ready: bool
    reason: str = "the OCR models are loading"
    starting: bool = True


def _probe(vision: VisionClient | OcrAnalyzer) -> Probe:
    if isinstance(vision, OcrAnalyzer):
        return lambda: _Loading(vision.is_ready())
    return vision.is_ready


def _gate_name(vision: VisionClient | OcrAnalyzer) -> str:
    if isinstance(vision, OcrAnalyzer):
        return vision.health_url
    return f"vision server at {vision.health_url}"


def _reporting(probe: Probe, observer: AnalysisObserver | None) -> Probe:
    if observer is None:
        return probe

    def reported() -> bool | ProbeAnswer:
        answer = probe()
        try:
            observer.vision_probed(answer if isinstance(answer, bool) else answer.ready)
        except Exception:
            logger.exception("vision observer failed in vision_probed")
        return answer

    return reported
