"""The soft stop, with `run-worker` as a subprocess: on the first signal it leases
nothing more and lets running jobs finish for `SHUTDOWN_GRACE_SECONDS`; what
still runs then is released (attempt refunded, `cancelled`); a second signal
releases at once."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from manga_page_analysis.cli.worker_command import run_worker
from manga_page_analysis.config import Settings
from manga_page_analysis.queue import request_analysis
from testbed.vision_server import Reply, ScriptedVisionServer, analysis_content, ok_answer
from tests.helpers import make_page
from tests.integration.test_cli import _env, listening, start_worker, stop_worker, wait_for
from tests.worker_support import png_bytes


def _pages(engine: Engine, storage: Path, count: int) -> dict[uuid.UUID, uuid.UUID]:
    """Stored pages and their pending analysis jobs: `{page_id: job_id}`."""
    storage.mkdir()
    jobs = {}
    with engine.begin() as conn:
        for number in range(count):
            (storage / f"{number}.png").write_bytes(png_bytes())
            page = make_page(conn, storage_key=f"{number}.png", page_number=number + 1)
            job_id = request_analysis(conn, page)
            assert job_id is not None
            jobs[page] = job_id
    return jobs


@contextmanager
def _worker(
    env: dict[str, str], cwd: Path, hold: threading.Event
) -> Iterator[subprocess.Popen[str]]:
    """`run-worker`; on the way out the held model answer is let go and a worker
    still running is killed."""
    process = start_worker(env, cwd)
    try:
        yield process
    finally:
        hold.set()
        if process.poll() is None:
            process.kill()
            process.communicate()


def _job(engine: Engine, job_id: uuid.UUID) -> tuple[str, int]:
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT state, attempts FROM crawler_jobs WHERE id = :id"), {"id": job_id}
        ).one()
    return row.state, row.attempts


def _analysed(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT page_id FROM page_analysis WHERE status = 'done'"))
        return {str(page_id) for (page_id,) in rows}


def test_a_soft_stop_lets_a_nearly_done_job_finish_and_releases_a_long_one_at_the_deadline(
    database_url: str, engine: Engine, vision_server: ScriptedVisionServer, tmp_path: Path
) -> None:
    jobs = _pages(engine, tmp_path / "storage", 2)
    hold = threading.Event()  # the long job: its answer never comes within the grace
    vision_server.script(
        Reply(body=ok_answer(analysis_content()).body, delay=2.0),
        Reply(body=ok_answer(analysis_content()).body, block=hold),
    )
    env = _env(database_url, vision_server.url, tmp_path / "storage", SHUTDOWN_GRACE_SECONDS="8")
    with listening(database_url) as received, _worker(env, tmp_path, hold) as process:
        vision_server.wait_for_requests(2, timeout=30)
        code, output = stop_worker(process, signal.SIGTERM, timeout=60)
        (completed,) = wait_for(received, "completed", 1, timeout=10)
        (cancelled,) = wait_for(received, "cancelled", 1, timeout=10)
    assert code == 0, output
    assert "SIGTERM received: stopping; running jobs may finish for 8 s" in output
    assert "grace period of 8 s over: releasing 1 running job(s)" in output
    assert "Traceback" not in output
    finished, released = completed["page_id"], cancelled["page_id"]
    assert {finished, released} == {str(page) for page in jobs}
    assert _analysed(engine) == {finished}
    assert _job(engine, jobs[uuid.UUID(finished)]) == ("done", 1)
    assert _job(engine, jobs[uuid.UUID(released)]) == ("pending", 0)  # attempt refunded


def test_a_second_signal_ends_the_grace_period_at_once(
    database_url: str, engine: Engine, vision_server: ScriptedVisionServer, tmp_path: Path
) -> None:
    jobs = _pages(engine, tmp_path / "storage", 1)
    hold = threading.Event()
    vision_server.script(Reply(body=ok_answer(analysis_content()).body, block=hold))
    # A grace far longer than the test may take: only the second signal ends it.
    env = _env(database_url, vision_server.url, tmp_path / "storage", SHUTDOWN_GRACE_SECONDS="3600")
    with listening(database_url) as received, _worker(env, tmp_path, hold) as process:
        vision_server.wait_for_requests(1, timeout=30)
        process.send_signal(signal.SIGTERM)
        assert process.stdout is not None
        for line in process.stdout:  # the soft stop has begun
            if "may finish for up to" in line:
                break
        assert process.poll() is None
        code, output = stop_worker(process, signal.SIGTERM, timeout=60)
        (cancelled,) = wait_for(received, "cancelled", 1, timeout=10)
    assert code == 0, output
    assert "second SIGTERM: stopping now" in output and "run-worker stopped" in output
    (page,) = jobs
    assert cancelled["page_id"] == str(page)
    assert _job(engine, jobs[page]) == ("pending", 0)
    assert _analysed(engine) == set()


class _LogLine(logging.Handler):
    """Sets `seen` once a record whose message contains `text` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


def test_a_second_signal_that_does_not_wake_the_main_thread_still_ends_the_grace_period(
    database_url: str,
    engine: Engine,
    vision_server: ScriptedVisionServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A signal's Python handler runs on the main thread, once that thread is back in the
    interpreter. A signal that arrives while the main thread is on its way into a wait
    (preempted there, under load) trips the handler without waking the wait, as one
    delivered to another thread does. Here both signals go to another thread
    (`pthread_kill`), so they never wake the main thread: `run-worker` (in-process) must
    come back for them by itself, and not only once its wait ends."""
    jobs = _pages(engine, tmp_path / "storage", 1)
    hold = threading.Event()
    vision_server.script(Reply(body=ok_answer(analysis_content()).body, block=hold))
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        database_url=database_url,
        vision_url=vision_server.url,
        vision_model="test-model",
        storage_root=tmp_path / "storage",
        analysis_workers=2,
        idle_poll_seconds=0.05,
        readiness_poll_seconds=0.1,
        shutdown_grace_seconds=3600,
    )
    caplog.set_level(logging.INFO, logger="manga_page_analysis")
    soft_stop = _LogLine("may finish for up to")
    logging.getLogger("manga_page_analysis").addHandler(soft_stop)
    bystander_done, returned = threading.Event(), threading.Event()
    bystander = threading.Thread(target=bystander_done.wait, name="bystander")
    woken: list[str] = []

    def drive() -> None:
        assert bystander.ident is not None
        vision_server.wait_for_requests(1, timeout=30)
        signal.pthread_kill(bystander.ident, signal.SIGTERM)
        if soft_stop.seen.wait(30):
            signal.pthread_kill(bystander.ident, signal.SIGTERM)
        if not returned.wait(30):
            # Any signal the main thread itself receives wakes it, and it then runs
            # the handler of the SIGTERM that is still pending.
            woken.append("the main thread had to be woken for the second SIGTERM")
            os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, lambda _signum, _frame: None)
    driver = threading.Thread(target=drive, name="driver")
    try:
        with listening(database_url) as received:
            bystander.start()
            driver.start()
            try:
                code = run_worker(settings)
            finally:
                returned.set()
                hold.set()
                bystander_done.set()
                driver.join()
                bystander.join()
            (cancelled,) = wait_for(received, "cancelled", 1, timeout=10)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        logging.getLogger("manga_page_analysis").removeHandler(soft_stop)
    assert woken == []
    assert code == 0
    assert "second SIGTERM: stopping now" in caplog.text
    (page,) = jobs
    assert cancelled["page_id"] == str(page)
    assert _job(engine, jobs[page]) == ("pending", 0)
    assert _analysed(engine) == set()
