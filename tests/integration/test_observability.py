"""Prometheus metrics and JSON log lines: in process with the runner, and from
`run-worker` as a subprocess (METRICS_PORT, LOG_FORMAT=json)."""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import subprocess
import threading
import time
from typing import Any

import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from manga_page_analysis.analysis.analyzer.prepared_image import prepare_image
from manga_page_analysis.analysis.model_server.client import VisionClient
from manga_page_analysis.analysis.model_server.retry_policy import RetryPolicy
from manga_page_analysis.observability.logs import JsonFormatter
from manga_page_analysis.observability.metrics import QueueSampler, WorkerMetrics, serve_metrics
from manga_page_analysis.queue import request_analysis
from manga_page_analysis.worker.reports.logcontext import JobFieldsFilter, job_log_context
from testbed.vision_server import Reply, analysis_content, error_reply, ok_answer
from tests.helpers import make_page, wait_until
from tests.integration.test_cli import _env, listening, run_cli, start_worker, wait_for
from tests.worker_support import png_bytes


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """`/metrics` parsed: {(sample name, sorted labels): value}."""
    response = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    response.raise_for_status()
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics_count_job_outcomes_vision_requests_and_queue_depth(harness, vision_server):
    metrics = WorkerMetrics(CollectorRegistry(), kinds=["analyze_page"])
    ok_page = harness.add_page(png_bytes())
    bad_page = harness.add_page(png_bytes())
    ok_job = harness.request(ok_page)
    bad_job = harness.request(bad_page)
    harness.set_max_attempts(bad_job, 1)
    # Replies go in lease order; a 400 is not retried by the client, and with one
    # attempt allowed the job is dead at once.
    vision_server.script(
        Reply(status=503, body="loading"), ok_answer(analysis_content()), error_reply(400, "no")
    )

    with serve_metrics(harness.engine, metrics, host="127.0.0.1", port=0, sample_seconds=0.05) as (
        port
    ):
        before = scrape(port)
        assert value(before, "queue_jobs_completed_total", kind="analyze_page", outcome="done") == 0
        with harness.running(
            observer=metrics, vision_observer=metrics, client_options={"observer": metrics}
        ):
            harness.events.wait_for("completed", ok_page)
            harness.events.wait_for("failed", bad_page)
        assert harness.job(ok_job).state == "done" and harness.job(bad_job).state == "dead"
        samples = wait_until(
            lambda: (
                (s := scrape(port))
                and value(s, "queue_jobs", kind="analyze_page", state="done") == 1
                and value(s, "queue_jobs", kind="analyze_page", state="dead") == 1
                and s
            ),
            timeout=10,
        )

    def at(name: str, **labels: str) -> float | None:
        return value(samples, name, **labels)

    assert at("queue_jobs_completed_total", kind="analyze_page", outcome="done") == 1
    assert at("queue_jobs_completed_total", kind="analyze_page", outcome="dead") == 1
    assert at("queue_jobs_completed_total", kind="analyze_page", outcome="failed") == 0
    assert at("queue_jobs_completed_total", kind="analyze_page", outcome="released") == 0
    assert at("job_duration_seconds_count", kind="analyze_page") == 2
    assert at("queue_jobs", kind="analyze_page", state="dead") == 1
    assert at("queue_jobs", kind="analyze_page", state="pending") == 0
    assert at("queue_jobs", kind="sync_manga", state="pending") == 0
    assert at("queue_oldest_pending_age_seconds") == 0
    # Three HTTP requests: 503 (retried), 200, 400.
    assert at("vision_request_duration_seconds_count") == 3
    assert at("vision_request_errors_total", status="503") == 1
    assert at("vision_request_errors_total", status="400") == 1
    assert at("vision_request_errors_total", status="200") is None
    assert at("vision_ready") == 1
    assert at("queue_heartbeats_lost_total", kind="analyze_page") == 0
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_a_scrape_never_queries_the_database(engine):
    metrics = WorkerMetrics(CollectorRegistry())
    with engine.begin() as conn:
        request_analysis(conn, make_page(conn))
    sampler = QueueSampler(engine, metrics, interval=3600)
    assert sampler.sample()
    with engine.begin() as conn:
        request_analysis(conn, make_page(conn, page_number=2))
    with serve_metrics(engine, metrics, host="127.0.0.1", port=0, sample_seconds=3600) as port:
        # serve_metrics samples once at start; after that only the timer does.
        first = wait_until(
            lambda: (
                value(s := scrape(port), "queue_jobs", kind="analyze_page", state="pending") == 2
                and s
            )
        )
        with engine.begin() as conn:
            request_analysis(conn, make_page(conn, page_number=3))
        for _ in range(3):
            assert scrape(port) == first


def test_vision_client_reports_each_request(vision_server):
    seen: list[tuple[str, Any]] = []

    class Recorder:
        def vision_request(self, duration_seconds: float, status: str) -> None:
            assert duration_seconds >= 0
            seen.append(("request", status))

    vision_server.script(Reply(status=502, body="bad gateway"), Reply(body="not json"))
    client = VisionClient(
        base_url=vision_server.url,
        model="m",
        retry=RetryPolicy(initial_seconds=0.01, max_seconds=0.01),
        observer=Recorder(),
    )
    with client:
        image = prepare_image(png_bytes(), max_side_px=64)
        with pytest.raises(Exception, match="not JSON"):
            client.analyze(image, deadline=time.monotonic() + 10)
    assert seen == [("request", "502"), ("request", "bad_body")]


def test_vision_ready_follows_the_readiness_gate(harness, vision_server):
    metrics = WorkerMetrics(CollectorRegistry())

    def ready() -> float | None:
        return metrics.registry.get_sample_value("vision_ready")

    vision_server.health_status = 503
    with harness.running(vision_observer=metrics):
        hits = vision_server.health_hits
        wait_until(lambda: vision_server.health_hits > hits)
        assert ready() == 0
        vision_server.health_status = 200
        wait_until(lambda: ready() == 1)
        vision_server.health_status = 503
        # The gate reuses a ready answer for a second, then probes again.
        wait_until(lambda: ready() == 0, timeout=10)


def test_json_log_lines_carry_the_job_fields():
    stream_lines: list[str] = []

    class ListHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stream_lines.append(self.format(record))

    handler = ListHandler()
    handler.addFilter(JobFieldsFilter())
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("test.jsonlog")
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)
    try:
        with job_log_context(job_id="j1", kind="analyze_page", attempt=2, page_id="p1"):
            log.warning("done in %d ms", 12, extra={"duration_ms": 12})
            try:
                raise ValueError('bad "input"\nsecond line')
            except ValueError:
                log.exception("failed")
        log.info("outside")
    finally:
        log.removeHandler(handler)
    first, failed, outside = (json.loads(line) for line in stream_lines)
    assert first["message"] == "done in 12 ms" and first["level"] == "WARNING"
    assert (first["job_id"], first["kind"], first["attempt"], first["page_id"]) == (
        "j1", "analyze_page", 2, "p1"
    )  # fmt: skip
    assert first["duration_ms"] == 12 and first["logger"] == "test.jsonlog"
    assert first["thread"] == threading.current_thread().name
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert 'ValueError: bad "input"\nsecond line' in failed["exception"]
    assert "job_id" not in outside and "exception" not in outside
    assert all("\n" not in line for line in stream_lines)


@pytest.mark.slow
def test_run_worker_serves_metrics_and_writes_json_logs(
    database_url, engine, vision_server, tmp_path
):
    storage = tmp_path / "storage"
    storage.mkdir()
    (storage / "a.png").write_bytes(png_bytes())
    with engine.begin() as conn:
        page = make_page(conn, storage_key="a.png")
        job_id = request_analysis(conn, page)
    vision_server.default = ok_answer(analysis_content())
    env = _env(
        database_url,
        vision_server.url,
        storage,
        METRICS_PORT="0",
        METRICS_SAMPLE_SECONDS="0.1",
        LOG_FORMAT="json",
    )

    lines: list[dict[str, Any]] = []
    with listening(database_url) as received:
        process = start_worker(env, tmp_path)
        reader = _JsonLines(process, lines)
        try:
            serving = wait_until(
                lambda: next((x for x in lines if "serving Prometheus" in x["message"]), None),
                timeout=30,
            )
            port = int(re.search(r":(\d+)/metrics", serving["message"]).group(1))
            wait_for(received, "completed", 1)
            samples = wait_until(
                lambda: (
                    (s := scrape(port))
                    and value(s, "queue_jobs", kind="analyze_page", state="done") == 1
                    and s
                ),
                timeout=10,
            )
        finally:
            process.send_signal(signal.SIGINT)
            try:
                code = process.wait(15)
            finally:
                if process.poll() is None:
                    process.kill()
            reader.finish()

    assert code == 0
    assert reader.stray == [], "every output line is one JSON object"
    assert value(samples, "queue_jobs_completed_total", kind="analyze_page", outcome="done") == 1
    assert value(samples, "job_duration_seconds_count", kind="analyze_page") == 1
    assert value(samples, "vision_ready") == 1
    assert value(samples, "vision_request_duration_seconds_count") == 1
    completed = [line for line in lines if "completed in" in line["message"]]
    assert len(completed) == 1
    (done,) = completed
    assert done["job_id"] == str(job_id) and done["page_id"] == str(page)
    assert done["attempt"] == 1 and done["kind"] == "analyze_page"
    assert isinstance(done["duration_ms"], int) and done["duration_ms"] >= 0
    assert {"time", "level", "logger", "message", "thread"} <= done.keys()
    # The metrics server stopped with the worker.
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT state FROM crawler_jobs")).scalar_one() == "done"


class _JsonLines:
    """Reads the worker's output on a thread; every line must be one JSON object."""

    def __init__(self, process: subprocess.Popen[str], into: list[dict[str, Any]]) -> None:
        self._process, self._into = process, into
        self.stray: list[str] = []
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._take(line)

    def _take(self, line: str) -> None:
        if not line.strip():
            return
        try:
            entry = json.loads(line)
        except ValueError:
            self.stray.append(line)
            return
        if isinstance(entry, dict) and "message" in entry:
            self._into.append(entry)
        else:
            self.stray.append(line)

    def finish(self) -> None:
        self._thread.join(10)


def test_run_worker_with_a_taken_metrics_port_says_so_and_exits_1(
    database_url, vision_server, tmp_path
):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _env(database_url, vision_server.url, tmp_path, METRICS_PORT=str(port))
        result = run_cli("run-worker", env=env, cwd=tmp_path)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in errors[0]
    assert "Traceback" not in result.stderr


def test_a_lost_heartbeat_is_counted(harness, vision_server):
    metrics = WorkerMetrics(CollectorRegistry(), kinds=["analyze_page"])
    page = harness.add_page(png_bytes())
    job_id = harness.request(page)
    hold = threading.Event()
    vision_server.script(Reply(body=ok_answer(analysis_content()).body, block=hold))

    def lost() -> float | None:
        return metrics.registry.get_sample_value(
            "queue_heartbeats_lost_total", {"kind": "analyze_page"}
        )

    try:
        with harness.running(observer=metrics, lease_seconds=0.6):
            vision_server.wait_for_requests(1, timeout=10)
            # Another worker took the job over: the next heartbeat finds its lease gone.
            with harness.engine.begin() as conn:
                conn.execute(
                    text(
                        "UPDATE crawler_jobs SET lease_generation = lease_generation + 1 "
                        "WHERE id = :id"
                    ),
                    {"id": job_id},
                )
            wait_until(lambda: lost() == 1, timeout=10)
    finally:
        hold.set()
    assert lost() == 1
    assert (
        metrics.registry.get_sample_value(
            "queue_jobs_completed_total", {"kind": "analyze_page", "outcome": "done"}
        )
        == 0
    )
