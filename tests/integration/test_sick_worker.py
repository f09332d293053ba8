"""A sick worker cannot kill the shared queue: a failure is charged to a job only when
the job is its cause. SeaweedFS checks credentials (its S3 identities, testbed/seaweedfs.py);
the model server is the scripted one."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import text

from manga_page_analysis.observability.metrics import WorkerMetrics
from manga_page_analysis.queue import KIND_ANALYZE_PAGE
from manga_page_analysis.storage.s3 import S3Storage
from testbed.seaweedfs import S3Server
from testbed.vision_server import error_reply
from tests.helpers import count, wait_until
from tests.integration.test_cli import _env, run_cli, start_worker, stop_worker
from tests.tcp_proxy import TcpProxy
from tests.worker_support import Harness, png_bytes

WRONG_SECRET_RUN_SECONDS = 25.0
"""How long the worker with a wrong secret runs: long enough for many lease rounds and
a queue's worth of failed attempts, had they been charged."""

_ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)
INTERNAL_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\n"
    + f"Content-Length: {len(_ERROR_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + _ERROR_BODY
)


def _pages(harness: Harness, storage: S3Storage, count: int) -> dict[uuid.UUID, uuid.UUID]:
    """`count` pages in the bucket, each with an analysis requested: page id -> job id."""
    jobs = {}
    for number in range(count):
        key = f"p/{uuid.uuid4().hex}.png"
        storage.write_bytes(key, png_bytes(), content_type="image/png")
        page_id = harness.add_page(key=key, page_number=number + 1)
        jobs[page_id] = harness.request(page_id)
    return jobs


def _charged(harness: Harness, job_ids: list[uuid.UUID]) -> list[tuple[str, int]]:
    """The jobs among `job_ids` that were charged an attempt (those running now are not
    counted: their attempt has not ended)."""
    with harness.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT state, attempts FROM crawler_jobs WHERE id = ANY(:ids)"),
            {"ids": job_ids},
        ).all()
    return [
        (row.state, row.attempts)
        for row in rows
        if row.state != "running" and (row.attempts > 0 or row.state != "pending")
    ]


def test_a_worker_with_a_wrong_secret_charges_no_job_and_says_the_store_refused_it(
    harness: Harness,
    vision_server,
    s3_env: S3Server,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = _pages(harness, S3Storage(f"s3://{bucket}"), 4)
    wrong = "not-" + s3_env.secret_key
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    caplog.set_level(logging.INFO, logger="manga_page_analysis")
    with harness.running(storage=S3Storage(f"s3://{bucket}"), analysis_workers=2) as runner:
        gate = runner._readiness
        ends = time.monotonic() + WRONG_SECRET_RUN_SECONDS
        while time.monotonic() < ends:  # runs for a while; no job may be charged meanwhile
            assert _charged(harness, list(jobs.values())) == []
            time.sleep(0.5)
        assert gate.ready is False and "refused our credentials" in gate.reason
    assert _charged(harness, list(jobs.values())) == []
    assert vision_server.requests == []
    lines = [r.getMessage() for r in caplog.records if "refused our credentials" in r.getMessage()]
    assert lines and f"page store s3://{bucket} at " in lines[0]
    assert "(403 SignatureDoesNotMatch)" in lines[0]
    assert not [line for line in caplog.messages if wrong in line or s3_env.secret_key in line]

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_env.secret_key)  # the right key
    with harness.running(storage=S3Storage(f"s3://{bucket}"), analysis_workers=2):
        for page_id in jobs:
            harness.events.wait_for("completed", page_id, timeout=30)
    for job_id in jobs.values():
        assert (harness.job(job_id).state, harness.job(job_id).attempts) == ("done", 1)


def test_credentials_refused_on_a_read_give_the_job_back(
    harness: Harness, vision_server, s3_env: S3Server, bucket: str, monkeypatch, caplog
) -> None:
    """The gate's probe may pass (it used the right key); a read refused the worker's
    credentials all the same: the job is released uncharged and the gate closes."""
    jobs = _pages(harness, S3Storage(f"s3://{bucket}"), 1)
    ((page_id, job_id),) = jobs.items()
    probe_client = S3Storage(f"s3://{bucket}")._probe_client
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-" + s3_env.secret_key)
    reader = S3Storage(f"s3://{bucket}", max_attempts=1)
    storage = S3Storage(f"s3://{bucket}", client=reader._client, probe_client=probe_client)
    caplog.set_level(logging.INFO, logger="manga_page_analysis")
    with harness.running(storage=storage):
        harness.events.wait_for("cancelled", page_id)
    assert harness.events.of("failed") == []
    job = harness.job(job_id)
    assert (job.state, job.attempts) == ("pending", 0)
    assert "no fault of its own" in caplog.text and "SignatureDoesNotMatch" in caplog.text


def test_a_store_half_back_charges_no_held_job_when_it_comes_back(
    harness: Harness, vision_server, s3_env: S3Server, bucket: str, monkeypatch
) -> None:
    """After a graceful restart SeaweedFS answers HEAD (metadata) before data reads work:
    here a proxy in front of it answers every GET with 500 for a while. The jobs that
    meet it are released uncharged, the gate stays closed while reads fail (its probe
    reads a page), and every page completes once the store is whole again."""
    with TcpProxy(s3_env.port) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        storage = S3Storage(f"s3://{bucket}", max_attempts=2)
        first = _pages(harness, storage, 1)
        with harness.running(storage=storage, analysis_workers=2) as runner:
            for page_id in first:
                harness.events.wait_for("completed", page_id)
            proxy.intercept(lambda head: INTERNAL_ERROR if head.startswith(b"GET ") else None)
            held = _pages(harness, storage, 4)
            wait_until(lambda: harness.events.of("cancelled"), timeout=30)
            gate = runner._readiness
            wait_until(lambda: gate.ready is False, timeout=30)
            assert "answered 500 InternalError to a read" in gate.reason
            assert storage.describe("p/not-there.png") is None  # HEAD still answers
            wait_until(lambda: runner.in_flight == 0, timeout=30)  # the reads under way ended
            assert _charged(harness, list(held.values())) == []
            proxy.intercept(None)
            for page_id in held:
                harness.events.wait_for("completed", page_id, timeout=30)
    assert harness.events.of("failed") == []
    for job_id in held.values():
        assert (harness.job(job_id).state, harness.job(job_id).attempts) == ("done", 1)


def test_a_model_that_is_not_there_charges_no_job_and_opens_the_breaker(
    harness: Harness, vision_server, caplog: pytest.LogCaptureFixture
) -> None:
    """`/health` answers 200 while every chat request answers 404 "model not found"."""
    jobs = {}
    for number in range(4):
        page_id = harness.add_page(png_bytes(), page_number=number + 1)
        jobs[page_id] = harness.request(page_id)
    vision_server.default = error_reply(404, "model 'test-model' not found")
    metrics = WorkerMetrics(CollectorRegistry(), kinds=[KIND_ANALYZE_PAGE])
    caplog.set_level(logging.INFO, logger="manga_page_analysis")

    def breaker_open() -> float:
        value = metrics.registry.get_sample_value(
            "worker_breaker_open", {"kind": KIND_ANALYZE_PAGE}
        )
        return value or 0.0

    with harness.running(observer=metrics, breaker_failures=3, analysis_workers=2) as runner:
        wait_until(lambda: breaker_open() == 1.0, timeout=30)
        assert runner.breaker.allows(KIND_ANALYZE_PAGE) is False
        wait_until(lambda: runner.in_flight == 0)  # what it held was released
    assert harness.events.of("failed") == []
    assert _charged(harness, list(jobs.values())) == []
    (opened,) = [r.getMessage() for r in caplog.records if "breaker for" in r.getMessage()]
    assert "breaker for analyze_page opened: the last 3 analyze_page jobs failed with " in opened
    assert "VisionModelMissing" in opened
    assert f"model server at {vision_server.url} has no model 'test-model'" in opened


def test_run_worker_checks_the_store_credentials_and_the_model_at_start(
    engine, vision_server, s3_env: S3Server, bucket: str, tmp_path: Path
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    vision_server.models = []
    vision_server.default = error_reply(404, "model 'test-model' not found")
    env = _env(
        url,
        vision_server.url,
        tmp_path,
        **{**s3_env.env(), "AWS_SECRET_ACCESS_KEY": "not-" + s3_env.secret_key},
        STORAGE_URL=f"s3://{bucket}",
    )
    result = run_cli("run-worker", env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "run-worker cannot start" in line]
    assert len(lines) == 2, result.stderr
    assert f"page store s3://{bucket} at {s3_env.endpoint} refused our credentials " in lines[0]
    assert "(403 SignatureDoesNotMatch)" in lines[0]
    assert f"model server at {vision_server.url} has no model 'test-model'" in lines[1]
    assert s3_env.secret_key not in result.stderr

    vision_server.models = ["test-model"]
    env["AWS_SECRET_ACCESS_KEY"] = s3_env.secret_key
    process = start_worker(env, tmp_path)  # right key and model: the checks pass
    try:
        wait_until(lambda: count(engine, "SELECT count(*) FROM queue_leader") > 0, timeout=30)
    finally:
        code, output = stop_worker(process)
    assert code == 0 and "cannot start" not in output, output
