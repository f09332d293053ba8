"""Fixtures for runner tests: pages on disk, a runner wired to the scripted
vision server, and an event recorder that tests synchronise on."""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import Engine, text

from manga_page_analysis.analysis.model_server.client import VisionClient
from manga_page_analysis.analysis.model_server.retry_policy import RetryPolicy
from manga_page_analysis.analysis.page_events import analysis_event_bus
from manga_page_analysis.analysis.wiring import analysis_runner
from manga_page_analysis.config import Settings
from manga_page_analysis.queue import request_analysis
from manga_page_analysis.worker.reports.events import JobEvent
from manga_page_analysis.worker.runner import Runner
from tests.helpers import make_page


def png_bytes(size: tuple[int, int] = (64, 96), color: str = "white", fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format=fmt)
    return buffer.getvalue()


class EventRecorder:
    """Collects events; `wait_for` blocks on a condition until one matches."""

    def __init__(self) -> None:
        self.events: list[JobEvent] = []
        self._condition = threading.Condition()

    def __call__(self, event: JobEvent) -> None:
        with self._condition:
            self.events.append(event)
            self._condition.notify_all()

    def of(self, event_type: str, page_id: uuid.UUID | None = None) -> list[JobEvent]:
        with self._condition:
            return [
                event
                for event in self.events
                if event.type == event_type
                and (page_id is None or event.breadcrumb.get("page_id") == page_id)
            ]

    def wait_for(
        self, event_type: str, page_id: uuid.UUID | None = None, n: int = 1, timeout: float = 15.0
    ) -> list[JobEvent]:
        with self._condition:
            if not self._condition.wait_for(
                lambda: len(self.of(event_type, page_id)) >= n, timeout=timeout
            ):
                raise AssertionError(
                    f"no {n}× {event_type} event for {page_id} within {timeout} s; "
                    f"saw {[(e.type, e.details) for e in self.events]}"
                )
            return self.of(event_type, page_id)


@dataclass
class Harness:
    engine: Engine
    storage_root: Path
    events: EventRecorder
    vision_url: str
    build: Callable[..., Any]

    def add_page(self, data: bytes | None = None, key: str | None = None, **page: Any) -> uuid.UUID:
        key = key or f"{uuid.uuid4().hex}.png"
        if data is not None:
            path = self.storage_root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        with self.engine.begin() as conn:
            return make_page(conn, storage_key=key, **page)

    def request(self, page_id: uuid.UUID, force: bool = False) -> uuid.UUID:
        with self.engine.begin() as conn:
            job_id = request_analysis(conn, page_id, force=force)
        assert job_id is not None
        return job_id

    def job(self, job_id: uuid.UUID) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(
                text("SELECT * FROM crawler_jobs WHERE id = :id"), {"id": job_id}
            ).one()

    def analysis(self, page_id: uuid.UUID) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(
                text("SELECT * FROM page_analysis WHERE page_id = :id"), {"id": page_id}
            ).first()

    def set_max_attempts(self, job_id: uuid.UUID, max_attempts: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text("UPDATE crawler_jobs SET max_attempts = :m WHERE id = :id"),
                {"m": max_attempts, "id": job_id},
            )

    @contextmanager
    def running(self, **overrides: Any) -> Iterator[Runner]:
        with self.build(**overrides) as runner:
            runner.start()
            try:
                yield runner
            finally:
                runner.stop()
                assert runner.join(10), "runner did not stop within 10 s"


@pytest.fixture
def harness(engine: Engine, vision_server: Any, tmp_path: Path) -> Iterator[Harness]:
    storage_root = tmp_path / "storage"
    storage_root.mkdir()
    recorder = EventRecorder()
    bus = analysis_event_bus(engine)
    bus.subscribe(recorder)
    clients: list[VisionClient] = []

    @contextmanager
    def build(
        vision_url: str | None = None,
        client_options: dict[str, Any] | None = None,
        observer: Any = None,
        vision_observer: Any = None,
        storage: Any = None,
        **settings_overrides: Any,
    ) -> Iterator[Runner]:
        values: dict[str, Any] = {
            "database_url": str(engine.url.render_as_string(hide_password=False)),
            "vision_url": vision_url or vision_server.url,
            "vision_model": "test-model",
            "storage_root": storage_root,
            "analysis_workers": 1,
            "lease_seconds": 30.0,
            "job_timeout_seconds": 20.0,
            "idle_poll_seconds": 0.05,
            "readiness_poll_seconds": 0.05,
            "reap_retention_days": 0,
            # Most tests stop the runner mid-job and expect the job back at
            # once; the grace period has tests of its own.
            "shutdown_grace_seconds": 0.0,
        }
        values.update(settings_overrides)
        settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
        options = {
            "base_url": settings.vision_url,
            "model": settings.vision_model,
            "read_timeout": 10.0,
            "retry": RetryPolicy(initial_seconds=0.01, max_seconds=0.05),
        }
        options.update(client_options or {})
        client = VisionClient(**options)
        clients.append(client)
        with analysis_runner(
            settings,
            engine=engine,
            vision=client,
            events=bus,
            observer=observer,
            vision_observer=vision_observer,
            storage=storage,
        ) as runner:
            yield runner

    yield Harness(engine, storage_root, recorder, vision_server.url, build)
    for client in clients:
        client.close()
