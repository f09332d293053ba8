"""Acceptance: `python -m manga_page_analysis run-worker` as a subprocess, against a real
Postgres and the scripted vision server, watched through LISTEN."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from manga_page_analysis.queue import request_analysis
from testbed.vision_server import analysis_content, ok_answer
from tests.helpers import make_page
from tests.worker_support import png_bytes


def _env(database_url: str, vision_url: str, storage_root: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL",)}
    env.update(
        DATABASE_URL=database_url,
        VISION_URL=vision_url,
        VISION_MODEL="test-model",
        STORAGE_ROOT=str(storage_root),
        ANALYSIS_WORKERS="2",
        IDLE_POLL_SECONDS="0.05",
        READINESS_POLL_SECONDS="0.1",
        # A stop releases the job in flight at once (the grace period has its own tests).
        SHUTDOWN_GRACE_SECONDS="0",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@contextmanager
def listening(database_url: str) -> Iterator[list[dict]]:
    """Collect `analysis_events` notifications on a background thread."""
    url = make_url(database_url).set(drivername="postgresql")
    conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
    conn.execute("LISTEN analysis_events")
    received: list[dict] = []
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            for notify in conn.notifies(timeout=0.2):
                received.append(json.loads(notify.payload))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        stop.set()
        thread.join(5)
        conn.close()


def wait_for(received: list[dict], kind: str, n: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        matching = [event for event in received if event["type"] == kind]
        if len(matching) >= n:
            return matching
        time.sleep(0.05)
    raise AssertionError(f"expected {n} {kind} events, got {received}")


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m manga_page_analysis ARGS` to completion, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "manga_page_analysis", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_worker(env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "manga_page_analysis", "run-worker"],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop_worker(
    process: subprocess.Popen[str], sig: int = signal.SIGINT, *, timeout: float = 15
) -> tuple[int, str]:
    process.send_signal(sig)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"no exit within {timeout} s after {sig!r}:\n{output}")
    return process.returncode, output


def test_run_worker_processes_pages_end_to_end_and_stops_cleanly(
    database_url, engine, vision_server, tmp_path
):
    storage = tmp_path / "storage"
    storage.mkdir()
    (storage / "a.png").write_bytes(png_bytes())
    (storage / "b.webp").write_bytes(png_bytes(fmt="WEBP"))
    (storage / "c.jpg").write_bytes(png_bytes(fmt="JPEG"))
    with engine.begin() as conn:
        pages = [
            make_page(conn, storage_key=key, page_number=n)
            for n, key in enumerate(["a.png", "b.webp", "c.jpg"], start=1)
        ]
        for page in pages:
            request_analysis(conn, page)
    vision_server.default = ok_answer(analysis_content(ocr_text="よつばと！"))

    with listening(database_url) as received:
        process = start_worker(_env(database_url, vision_server.url, storage), tmp_path)
        try:
            completed = wait_for(received, "completed", 3)
        finally:
            code, output = stop_worker(process)

    assert code == 0, output
    assert "run-worker: database" in output and vision_server.url in output
    assert "password" not in output.lower()
    assert {event["page_id"] for event in completed} == {str(page) for page in pages}
    assert {event["page_number"] for event in completed} == {1, 2, 3}
    assert all(event["manga_title"] == "Yotsuba&!" for event in completed)
    assert len([event for event in received if event["type"] == "started"]) == 3
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, ocr_text, duration_ms FROM page_analysis")).all()
        states = conn.execute(text("SELECT DISTINCT state FROM crawler_jobs")).scalars().all()
    assert len(rows) == 3
    assert all(r.status == "done" and r.ocr_text == "よつばと！" for r in rows)
    assert all(r.duration_ms is not None and r.duration_ms >= 0 for r in rows)
    assert states == ["done"]


def test_run_worker_refuses_an_unmigrated_database(empty_database_url, vision_server, tmp_path):
    env = _env(empty_database_url, vision_server.url, tmp_path)
    result = run_cli("run-worker", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "make migrate" in result.stderr


def test_migrate_command_brings_an_empty_database_to_head(empty_database_url, tmp_path):
    env = {**os.environ, "DATABASE_URL": empty_database_url}
    result = run_cli("migrate", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with psycopg.connect(
        make_url(empty_database_url)
        .set(drivername="postgresql")
        .render_as_string(hide_password=False)
    ) as conn:
        assert conn.execute("SELECT to_regclass('crawler_jobs')").fetchone()[0] == "crawler_jobs"


def test_import_pages_registers_a_chapter_and_requests_analysis(database_url, engine, tmp_path):
    folder = tmp_path / "chapter-1"
    folder.mkdir()
    (folder / "002.png").write_bytes(png_bytes(color="black"))
    (folder / "001.webp").write_bytes(png_bytes(fmt="WEBP"))
    (folder / "notes.txt").write_text("not a page")
    storage = tmp_path / "storage"
    env = {**os.environ, "DATABASE_URL": database_url, "STORAGE_ROOT": str(storage)}
    result = run_cli(
        "import-pages", str(folder), "--title", "Blame!", "--chapter", "2.5", env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    with engine.connect() as conn:
        pages = conn.execute(
            text(
                "SELECT p.number, p.storage_key, c.number AS chapter FROM pages p "
                "JOIN chapters c ON c.id = p.chapter_id ORDER BY p.number"
            )
        ).all()
        jobs = conn.execute(text("SELECT state FROM crawler_jobs")).scalars().all()
    assert [page.number for page in pages] == [1, 2]
    assert pages[0].storage_key.startswith("pages/") and pages[0].storage_key.endswith(".webp")
    assert str(pages[0].chapter) == "2.5"
    assert (storage / pages[1].storage_key).read_bytes() == png_bytes(color="black")
    assert jobs == ["pending", "pending"]

    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("import-pages", str(empty), "--title", "x", env=env, cwd=tmp_path)
    assert result.returncode == 1 and "no page images" in result.stderr
