"""Prometheus metrics of the worker process, served at `/metrics` when `METRICS_PORT` is set.

Queue depth (`queue_jobs{kind,state}`) is sampled on a timer: a scrape only
reads memory and never touches the database. With several worker processes,
each one reports the same queue: aggregate it with `max`, not `sum`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from manga_page_analysis.config import Settings
from manga_page_analysis.errors import ServiceError
from manga_page_analysis.queue.stats import queue_stats
from manga_page_analysis.worker.dbsession import short_error
from manga_page_analysis.worker.reports.observer import OUTCOMES

logger = logging.getLogger(__name__)

JOB_DURATION_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
"""Milliseconds (crawl and no-op jobs) up to the 600 s job timeout (vision jobs)."""
VISION_DURATION_BUCKETS: Final = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
"""One model request: well under a second for an error, seconds to minutes for an answer."""


class WorkerMetrics:
    """The worker's metrics on `registry` (nothing global: two runners in one process do
    not clash); a `RunnerObserver` and a `VisionObserver`. Every method is quick and
    thread-safe.

    `kinds` (the runner's job kinds) pre-create the per-kind series at 0, so
    `rate()` works from the first scrape instead of from the first event.
    """

    def __init__(self, registry: CollectorRegistry, *, kinds: Sequence[str] = ()) -> None:
        self.registry = registry
        counter = partial(Counter, registry=registry)
        gauge = partial(Gauge, registry=registry)
        histogram = partial(Histogram, registry=registry)
        self.jobs_completed = counter(
            "queue_jobs_completed",
            "Leased jobs that ended, by kind and outcome (done, failed, dead, released).",
            ["kind", "outcome"],
        )
        self.jobs = gauge(
            "queue_jobs",
            "Jobs in the queue by kind and state, sampled on a timer (not per scrape).",
            ["kind", "state"],
        )
        self.oldest_pending_age = gauge(
            "queue_oldest_pending_age_seconds",
            "Age of the oldest pending job that is due (0 when none), sampled with queue_jobs.",
        )
        self.sampled_at = gauge(
            "queue_jobs_sampled_timestamp_seconds",
            "Unix time of the last successful queue sample; alert when it goes stale.",
        )
        self.job_duration = histogram(
            "job_duration_seconds",
            "Time from lease to the end of a job that ran to an outcome (released ones excluded).",
            ["kind"],
            buckets=JOB_DURATION_BUCKETS,
        )
        self.heartbeats_lost = counter(
            "queue_heartbeats_lost",
            "Leases a heartbeat found gone mid-job (the job's result was discarded).",
            ["kind"],
        )
        self.leader = gauge(
            "queue_leader",
            "1 while this process leads the queue's maintenance (reclaiming, reaping), else 0.",
        )
        self.breaker_open = gauge(
            "worker_breaker_open",
            "1 while this worker's breaker for a kind is open (its last jobs of that kind all "
            "failed the same way: it leases none for a while), else 0.",
            ["kind"],
        )
        self.vision_ready = gauge(
            "vision_ready",
            "1 while the vision server's readiness probe answers 2xx, else 0.",
        )
        self.vision_request_duration = histogram(
            "vision_request_duration_seconds",
            "One HTTP request to the vision server (each retry counts), whatever its outcome.",
            buckets=VISION_DURATION_BUCKETS,
        )
        self.vision_request_errors = counter(
            "vision_request_errors",
            "Vision requests that failed, by HTTP status or by timeout, connection_error, "
            "bad_body, error.",
            ["status"],
        )
        self._known_queue_series: set[tuple[str, str]] = set()
        for kind in kinds:
            for outcome in OUTCOMES:
                self.jobs_completed.labels(kind, outcome)
            self.job_duration.labels(kind)
            self.heartbeats_lost.labels(kind)
            self.breaker_open.labels(kind).set(0)

    # --- RunnerObserver ------------------------------------------------------

    def job_finished(self, kind: str, outcome: str, duration_seconds: float) -> None:
        self.jobs_completed.labels(kind, outcome).inc()
        if outcome != "released":
            # A released job was cut short by shutdown: its time says nothing.
            self.job_duration.labels(kind).observe(duration_seconds)

    def lease_lost(self, kind: str) -> None:
        self.heartbeats_lost.labels(kind).inc()

    def leader_changed(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    def breaker_changed(self, kind: str, is_open: bool) -> None:
        self.breaker_open.labels(kind).set(1 if is_open else 0)

    # --- VisionObserver ------------------------------------------------------

    def vision_request(self, duration_seconds: float, status: str) -> None:
        self.vision_request_duration.observe(duration_seconds)
        if not status.startswith("2"):
            self.vision_request_errors.labels(status).inc()

    def vision_probed(self, ready: bool) -> None:
        self.vision_ready.set(1 if ready else 0)

    # --- sampling ------------------------------------------------------------

    def set_queue(self, stats: dict[str, Any]) -> None:
        """Update `queue_jobs` from `manga_page_analysis.queue.queue_stats` output; series of
        kinds that are gone are removed."""
        seen: set[tuple[str, str]] = set()
        for kind, states in stats["jobs"].items():
            for state, number in states.items():
                self.jobs.labels(kind, state).set(number)
                seen.add((kind, state))
        for gone in self._known_queue_series - seen:
            self.jobs.remove(*gone)
        self._known_queue_series = seen
        age = stats["oldest_pending_age_seconds"]
        self.oldest_pending_age.set(age or 0.0)
        self.sampled_at.set(time.time())


class QueueSampler:
    """A thread that refreshes the queue gauges every `interval` seconds until `stop()`.

    A failed sample (database down) leaves the last values in place, is
    logged once per outage, and is tried again at the next tick.
    """

    def __init__(self, engine: Engine, metrics: WorkerMetrics, *, interval: float) -> None:
        self._engine = engine
        self._metrics = metrics
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._failing = False

    def start(self) -> QueueSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def sample(self) -> bool:
        """One sample now; `True` if it reached the database."""
        try:
            with self._engine.connect() as conn:
                stats = queue_stats(conn)
        except SQLAlchemyError as exc:
            if not self._failing:
                logger.warning(
                    "could not sample queue depth for metrics (%s); keeping the last "
                    "values, retrying every %.0f s",
                    short_error(exc),
                    self.interval,
                )
            self._failing = True
            return False
        if self._failing:
            logger.info("queue depth sampling for metrics works again")
        self._failing = False
        self._metrics.set_queue(stats)
        return True

    def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                logger.exception("queue depth sampling failed; trying again next tick")
            if self._stop.wait(self.interval):
                return


class MetricsServerError(ServiceError):
    """`/metrics` cannot be served (the port is taken, say); the worker does not start."""

    retryable = False


@contextmanager
def serve_metrics(
    engine: Engine, metrics: WorkerMetrics, *, host: str, port: int, sample_seconds: float
) -> Iterator[int]:
    """Serve `metrics.registry` at `http://host:port/metrics` and sample the queue,
    until the block ends; yields the bound port (`port=0` picks a free one) and logs
    the URL. `MetricsServerError` (port taken, say) is raised before anything is started.
    """
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        raise MetricsServerError(f"cannot serve metrics on {host}:{port}: {exc}") from None
    sampler = QueueSampler(engine, metrics, interval=sample_seconds).start()
    try:
        bound = int(server.server_port)
        logger.info("serving Prometheus metrics at http://%s:%d/metrics", host, bound)
        yield bound
    finally:
        sampler.stop()
        server.shutdown()
        server.server_close()
        thread.join(5.0)


@contextmanager
def serving_metrics(
    settings: Settings, engine: Engine, *, kinds: Sequence[str]
) -> Iterator[WorkerMetrics | None]:
    """A worker's metrics, its per-kind series created for `kinds` (the job kinds its
    runner handles), served as `METRICS_*` say for the block; `None` when `METRICS_PORT`
    is unset (then nothing is counted at all). `MetricsServerError` when the port cannot
    be bound."""
    if settings.metrics_port is None:
        yield None
        return
    metrics = WorkerMetrics(CollectorRegistry(), kinds=kinds)
    with serve_metrics(
        engine,
        metrics,
        host=settings.metrics_host,
        port=settings.metrics_port,
        sample_seconds=settings.metrics_sample_seconds,
    ):
        yield metrics
