"""Section 4: the real page-analysis runner, end to end.

The runner is built by `app.analysis.service.analysis_runner` from an explicit
`Settings`, against the scripted vision server from tests/vision_server.py
(in this process, on its own threads). Pages are small PNGs under a temp
storage root; jobs come from `request_analysis`. Completion is counted from
the runner's `completed` events, under an overall deadline per case.

"Model time" is the time spent inside `VisionClient.analyze` (the HTTP round
trip including the server's scripted delay); the runner's overhead per job is
the workers' busy time (`wall × workers`) minus model time, per job: leasing,
loading, reading and checking the image, threads, saving, acking and the
`NOTIFY`s of the `started`/`completed` events.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from app.analysis.events import analysis_event_bus
from app.analysis.images import PreparedImage
from app.analysis.service import analysis_runner
from app.analysis.vision import VisionClient, VisionResult
from app.config import Settings
from app.db import make_engine
from app.queue import request_analysis
from app.worker.events import JobEvent
from bench.report import heading, ms, note, progress, rate, table
from tests.vision_server import ScriptedVisionServer, analysis_content, ok_answer

STOP_TIMEOUT_SECONDS = 10.0


class TimedVisionClient(VisionClient):
    """A `VisionClient` that adds up the time its `analyze` calls take."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._lock = threading.Lock()
        self.model_seconds = 0.0

    def analyze(
        self,
        image: PreparedImage,
        *,
        deadline: float,
        cancel: threading.Event | None = None,
        job_label: str = "",
    ) -> VisionResult:
        begun = time.perf_counter()
        try:
            return super().analyze(image, deadline=deadline, cancel=cancel, job_label=job_label)
        finally:
            with self._lock:
                self.model_seconds += time.perf_counter() - begun


@dataclass
class CompletionCounter:
    """An event subscriber counting outcomes; `wait_for` blocks until enough completed."""

    completed: int = 0
    failed: int = 0
    job_ms: list[int] = field(default_factory=list)
    _condition: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, event: JobEvent) -> None:
        with self._condition:
            if event.type == "completed":
                self.completed += 1
                self.job_ms.append(int(event.details.get("duration_ms", 0)))
            elif event.type == "failed":
                self.failed += 1
            self._condition.notify_all()

    def wait_for(self, completed: int, timeout: float) -> bool:
        with self._condition:
            return self._condition.wait_for(lambda: self.completed >= completed, timeout)


@dataclass(frozen=True)
class WorkerCase:
    workers: int
    model_delay: float


@dataclass(frozen=True)
class WorkerResult:
    case: WorkerCase
    completed: int
    failed: int
    wall: float
    model_seconds: float
    mean_job_ms: float
    finished: bool


def enqueue_pages(engine: Engine, page_ids: list[uuid.UUID]) -> None:
    """Clear previous results and jobs, then request analysis of every page."""
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE page_analysis, crawler_jobs"))
        for page_id in page_ids:
            request_analysis(conn, page_id)


def run_case(
    url: str,
    storage_root: Path,
    server: ScriptedVisionServer,
    page_ids: list[uuid.UUID],
    case: WorkerCase,
    time_budget: float,
) -> WorkerResult:
    """Process every page with a fresh runner; bounded by `time_budget` seconds."""
    reply = ok_answer(analysis_content())
    reply.delay = case.model_delay
    server.default = reply
    settings = Settings(
        _env_file=None,
        database_url=url,
        vision_url=server.url,
        storage_root=storage_root,
        analysis_workers=case.workers,
        idle_poll_seconds=0.02,
        readiness_poll_seconds=0.05,
    )
    engine = make_engine(settings)
    vision = TimedVisionClient.from_settings(settings)
    assert isinstance(vision, TimedVisionClient)  # from_settings builds `cls`
    counter = CompletionCounter()
    events = analysis_event_bus(engine)
    events.subscribe(counter)
    try:
        enqueue_pages(engine, page_ids)
        with analysis_runner(settings, engine=engine, vision=vision, events=events) as runner:
            started = time.perf_counter()
            runner.start()
            try:
                finished = counter.wait_for(len(page_ids), timeout=time_budget)
                wall = time.perf_counter() - started
            finally:
                runner.stop()
                runner.join(STOP_TIMEOUT_SECONDS)
    finally:
        vision.close()
        engine.dispose()
    return WorkerResult(
        case=case,
        completed=counter.completed,
        failed=counter.failed,
        wall=wall,
        model_seconds=vision.model_seconds,
        mean_job_ms=sum(counter.job_ms) / len(counter.job_ms) if counter.job_ms else float("nan"),
        finished=finished,
    )


def _row(result: WorkerResult) -> list[str]:
    case = result.case
    jobs = max(result.completed, 1)
    busy = result.wall * case.workers
    overhead = (busy - result.model_seconds) / jobs
    return [
        f"delay={case.model_delay * 1000:.0f}ms workers={case.workers}",
        f"{result.completed:,}" + ("" if result.finished else " (time)"),
        str(result.failed),
        f"{result.wall:.2f}",
        rate(result.completed, result.wall),
        ms(result.model_seconds / jobs),
        ms(overhead),
        f"{result.mean_job_ms:.1f}",
    ]


def run(
    url: str,
    storage_root: Path,
    page_ids: list[uuid.UUID],
    cases: list[WorkerCase],
    time_budget: float,
) -> None:
    """Measure and print section 4."""
    heading(
        f"4. Worker end to end ({len(page_ids)} pages per case, real Runner, "
        "scripted vision server)"
    )
    rows = []
    with ScriptedVisionServer() as server:
        for case in cases:
            progress(
                f"worker: {case.workers} worker(s), model delay {case.model_delay * 1000:.0f} ms"
            )
            rows.append(_row(run_case(url, storage_root, server, page_ids, case, time_budget)))
    table(
        [
            "case",
            "done",
            "failed",
            "wall s",
            "pages/s",
            "model ms/job",
            "overhead ms/job",
            "job ms (event)",
        ],
        rows,
    )
    note(
        "model ms/job: time inside VisionClient.analyze (HTTP round trip + scripted delay).\n"
        "overhead ms/job = (wall × workers − model time) / jobs: per worker slot, so with more\n"
        "workers than CPUs it includes waiting for a CPU. job ms (event): duration_ms of the\n"
        "'completed' event, from lease receipt to ack. The vision server shares this process."
    )
