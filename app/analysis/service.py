"""The composition root: builds the page-analysis runner from `Settings`.

Hosts and tests can hand in their own engine or vision client; only what is
built here is closed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta

from sqlalchemy import Engine

from app.analysis.dispatcher import PageAnalysisHandler
from app.analysis.events import analysis_event_bus
from app.analysis.vision import VisionClient
from app.config import Settings
from app.db import make_engine
from app.storage import LocalStorage
from app.worker.events import EventBus
from app.worker.observer import RunnerObserver
from app.worker.readiness import ReadinessGate
from app.worker.runner import Runner


@contextmanager
def analysis_runner(
    settings: Settings,
    *,
    engine: Engine | None = None,
    vision: VisionClient | None = None,
    events: EventBus | None = None,
    observer: RunnerObserver | None = None,
) -> Iterator[Runner]:
    """A ready-to-start runner for `analyze_page` jobs; disposes what it built on exit."""
    with ExitStack() as owned:
        if engine is None:
            engine = make_engine(settings)
            owned.callback(engine.dispose)
        if vision is None:
            vision = VisionClient.from_settings(settings)
            owned.callback(vision.close)
        handler = PageAnalysisHandler(
            storage=LocalStorage(settings.storage_root),
            vision=vision,
            max_image_bytes=settings.max_image_bytes,
            max_side_px=settings.vision_max_side_px,
        )
        gate = ReadinessGate(
            vision.is_ready, url=vision.health_url, poll_seconds=settings.readiness_poll_seconds
        )
        yield Runner(
            engine,
            [handler],
            workers=settings.analysis_workers,
            lease_duration=timedelta(seconds=settings.lease_seconds),
            job_timeout=settings.job_timeout_seconds,
            idle_poll=settings.idle_poll_seconds,
            readiness=gate,
            events=events if events is not None else analysis_event_bus(engine),
            reap_retention_days=settings.reap_retention_days,
            name="analysis",
            observer=observer,
        )
