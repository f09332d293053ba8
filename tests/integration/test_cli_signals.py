"""Clean shutdown, with the commands as subprocesses: SIGINT, SIGTERM and SIGHUP
stop `run-worker`, `demo` and Django's `run_worker` gracefully (the job in
flight goes back to pending, attempt refunded), a second signal exits at once,
and nothing prints a traceback or aborts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from manga_page_analysis.queue import request_analysis
from testbed.vision_server import Reply, ScriptedVisionServer, analysis_content, ok_answer
from tests.helpers import make_page, wait_until
from tests.integration.test_cli import _env, listening, start_worker, stop_worker, wait_for
from tests.integration.web_django.test_django_commands import _env as django_env
from tests.integration.web_django.test_django_commands import start_run_worker
from tests.worker_support import png_bytes

ROOT = Path(__file__).resolve().parents[2]


def _one_page(engine: Engine, storage: Path) -> tuple[object, object]:
    """A stored page and its pending analysis job: `(page_id, job_id)`."""
    storage.mkdir()
    (storage / "a.png").write_bytes(png_bytes())
    with engine.begin() as conn:
        page = make_page(conn, storage_key="a.png")
        job_id = request_analysis(conn, page)
    return page, job_id


def _assert_released(engine: Engine, job_id: object) -> None:
    with engine.connect() as conn:
        job = conn.execute(
            text("SELECT state, attempts FROM crawler_jobs WHERE id = :id"), {"id": job_id}
        ).one()
        assert conn.execute(text("SELECT count(*) FROM page_analysis")).scalar_one() == 0
    assert (job.state, job.attempts) == ("pending", 0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_run_worker_stops_gracefully_mid_dispatch(
    sig: signal.Signals,
    database_url: str,
    engine: Engine,
    vision_server: ScriptedVisionServer,
    tmp_path: Path,
) -> None:
    storage = tmp_path / "storage"
    page, job_id = _one_page(engine, storage)
    hold = threading.Event()
    vision_server.script(Reply(body=ok_answer(analysis_content()).body, block=hold))
    with listening(database_url) as received:
        process = start_worker(_env(database_url, vision_server.url, storage), tmp_path)
        try:
            vision_server.wait_for_requests(1, timeout=30)
            started = time.monotonic()
            output = stop_worker(process, sig, timeout=20)[1]
            elapsed = time.monotonic() - started
            (cancelled,) = wait_for(received, "cancelled", 1, timeout=10)
        finally:
            hold.set()
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 0, output
    assert f"{sig.name} received: stopping" in output and "run-worker stopped" in output
    assert "Traceback" not in output
    assert elapsed < 10, f"shutdown waited for the model: {elapsed:.1f} s"
    assert cancelled["page_id"] == str(page)
    _assert_released(engine, job_id)


GRACEFUL_BUT_STUCK = textwrap.dedent(
    """
    import logging, sys, time
    from manga_page_analysis.cli.shutdown import GracefulStop
    logging.basicConfig(level=logging.INFO, stream=sys.stdout)
    graceful = GracefulStop("stopping")
    graceful.on_stop(lambda: print("stop called", flush=True))
    with graceful.installed():
        print("ready", flush=True)
        time.sleep(60)  # a shutdown that does not end by itself
    """
)


def test_a_second_signal_exits_at_once_with_130(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", GRACEFUL_BUT_STUCK],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(signal.SIGTERM)
        lines = [process.stdout.readline().strip() for _ in range(2)]
        assert "SIGTERM received: stopping" in lines[0] and lines[1] == "stop called"
        assert process.poll() is None  # the first signal does not exit by itself
        started = time.monotonic()
        process.send_signal(signal.SIGHUP)
        rest, _ = process.communicate(timeout=10)
        elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130
    assert "second SIGHUP: exiting now" in rest
    assert elapsed < 10


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_interrupted_mid_ocr_gives_its_pages_back_without_a_traceback_or_abort(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "VISION_URL", "VISION_BACKEND")
    }
    env.update(DATABASE_URL=database_url, STORAGE_ROOT=str(tmp_path / "s"), PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, "-m", "manga_page_analysis", "demo"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:  # until an OCR call is under way
            seen.append(line)
            if " started" in line:
                break
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    output = "".join(seen) + rest
    assert process.returncode == 130, output
    assert "Interrupted after" in output
    assert "Traceback" not in output and "terminate called" not in output
    with engine.connect() as conn:
        running = conn.execute(
            text("SELECT count(*) FROM crawler_jobs WHERE state = 'running'")
        ).scalar_one()
    assert running == 0


@pytest.mark.slow
def test_django_run_worker_stops_gracefully_on_sighup(
    database_url: str, engine: Engine, vision_server: ScriptedVisionServer, tmp_path: Path
) -> None:
    storage = tmp_path / "storage"
    _, job_id = _one_page(engine, storage)
    hold = threading.Event()
    vision_server.script(Reply(body=ok_answer(analysis_content()).body, block=hold))
    env = django_env(
        database_url,
        VISION_URL=vision_server.url,
        STORAGE_ROOT=str(storage),
        IDLE_POLL_SECONDS="0.05",
        READINESS_POLL_SECONDS="0.1",
        SHUTDOWN_GRACE_SECONDS="0",
    )
    process = start_run_worker(env, tmp_path)
    try:
        vision_server.wait_for_requests(1, timeout=60)
        output = stop_worker(process, signal.SIGHUP, timeout=20)[1]
    finally:
        hold.set()
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    assert "SIGHUP received: stopping" in output and "Traceback" not in output
    wait_until(lambda: _released(engine, job_id), timeout=10)


def _released(engine: Engine, job_id: object) -> bool:
    try:
        _assert_released(engine, job_id)
    except AssertionError:
        return False
    return True
