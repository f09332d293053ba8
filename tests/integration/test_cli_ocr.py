"""Acceptance: the `ocr` backend through the commands a person runs, `run-worker` and `make demo`,
as subprocesses against the test session's Postgres (no model server anywhere)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from manga_page_analysis.cli import commands as cli
from manga_page_analysis.cli.importer import import_folder
from tests.helpers import wait_until
from tests.integration.test_cli import listening, start_worker, stop_worker, wait_for
from tests.integration.test_ocr import EXPECTED, SAMPLES, assert_reads

ROOT = Path(__file__).resolve().parents[2]
VISION_VARIABLES = ("VISION_URL", "VISION_BACKEND", "VISION_HEALTH_URL", "VISION_MODEL")


def ocr_env(database_url: str, storage_root: Path) -> dict[str, str]:
    """The environment of a worker with no model server configured."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", *VISION_VARIABLES)
    }
    env.update(
        DATABASE_URL=database_url,
        STORAGE_ROOT=str(storage_root),
        ANALYSIS_WORKERS="2",
        IDLE_POLL_SECONDS="0.05",
        READINESS_POLL_SECONDS="0.1",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_worker_without_vision_url_analyses_a_chapter_with_ocr(database_url, engine, tmp_path):
    storage = tmp_path / "storage"
    imported = import_folder(engine, storage, SAMPLES, title="Sample", chapter=1)

    with listening(database_url) as received:
        process = start_worker(ocr_env(database_url, storage), tmp_path)
        try:
            completed = wait_for(received, "completed", len(imported.page_ids), timeout=240)
        finally:
            code, output = stop_worker(process)

    assert code == 0, output
    assert "analyzer ocr (in-process rapidocr" in output
    assert "OCR models loaded and warmed up" in output
    assert {event["page_id"] for event in completed} == {str(p) for p in imported.page_ids}
    started = [event for event in received if event["type"] == "started"]
    assert {event["page_id"] for event in started} == {str(p) for p in imported.page_ids}
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT p.number, a.status, a.ocr_text, a.tags, a.description, a.nsfw_rating, "
                "a.nsfw_score, a.model FROM page_analysis a JOIN pages p ON p.id = a.page_id "
                "ORDER BY p.number"
            )
        ).all()
    assert [row.status for row in rows] == ["done"] * len(EXPECTED)
    for row, name in zip(rows, sorted(EXPECTED), strict=True):
        assert_reads(row.ocr_text, EXPECTED[name])
        assert (row.nsfw_rating, row.nsfw_score, row.tags, row.description) == (None, None, [], "")
        assert row.model.startswith("rapidocr ")


@pytest.mark.slow
def test_sigterm_while_the_model_loads_exits_zero_within_seconds(database_url, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "manga_page_analysis", "run-worker"],
        env=ocr_env(database_url, tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or []), daemon=True)
    reader.start()
    try:
        loading = "is not ready: the OCR models are loading"
        (gate_line,) = wait_until(lambda: [line for line in lines if loading in line], timeout=60)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=20)
        elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
    reader.join(5)
    assert code == 0, "".join(lines)
    assert elapsed < 12, f"shutdown waited {elapsed:.1f} s for the model load"
    assert " INFO " in gate_line, gate_line  # loading is expected, not a warning
    assert "Traceback" not in "".join(lines) and "terminate called" not in "".join(lines)


def test_run_worker_refuses_to_start_without_the_ocr_model(
    database_url, tmp_path, monkeypatch, caplog
):
    for name in VISION_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("STORAGE_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no .env
    monkeypatch.setattr(
        "manga_page_analysis.analysis.reader.ocr_analyzer.wheel_model_dir", lambda: tmp_path
    )
    with caplog.at_level(logging.ERROR, logger="manga_page_analysis.cli"):
        code = cli.main(["run-worker"])
    assert code == 1
    assert "run-worker cannot start: OCR model file(s) missing" in caplog.text


def test_vision_backend_http_without_url_is_refused_before_anything_starts(
    tmp_path, monkeypatch, caplog, capsys
):
    monkeypatch.delenv("VISION_URL", raising=False)
    monkeypatch.setenv("VISION_BACKEND", "http")
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.ERROR, logger="manga_page_analysis.cli"):
        assert cli.main(["run-worker"]) == 2
    assert "VISION_BACKEND=http needs VISION_URL" in caplog.text + capsys.readouterr().err


def make_demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_make_demo_runs_twice_on_the_test_database(database_url, engine, tmp_path):
    # `make demo` must find the virtual environment built (as `make test` leaves it).
    up_to_date = subprocess.run(["make", "-q", "install"], cwd=ROOT, capture_output=True)
    assert up_to_date.returncode == 0, "the .venv stamp is out of date: run `make install`"
    env = ocr_env(database_url, tmp_path / "storage")
    pages = len(EXPECTED)

    first = make_demo(env)
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout
    assert f"Imported 'Sample manga (demo)': {pages} page(s)" in out
    assert "OCR model loaded and warmed up" in out
    assert f"[{pages}/{pages}]" in out and "Finished after" in out
    table = out[out.index("OCR text (one bubble per ' / ')") :].splitlines()[1 : 1 + pages]
    for number, (line, name) in enumerate(zip(table, sorted(EXPECTED), strict=True), start=1):
        assert line.split()[:2] == [str(number), "done"], line
        assert_reads(line, EXPECTED[name] or ["(no text)"])
    assert "Page images: " + str((tmp_path / "storage").resolve()) in out
    assert "VISION_URL=http://" in out
    assert "Traceback" not in first.stderr

    second = make_demo(env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"Reusing 'Sample manga (demo)': {pages} page(s)" in second.stdout
    assert "again (force)" in second.stdout and f"[{pages}/{pages}]" in second.stdout
    with engine.connect() as conn:
        mangas = conn.execute(text("SELECT count(*) FROM mangas")).scalar_one()
        states = conn.execute(text("SELECT state, count(*) FROM crawler_jobs GROUP BY state")).all()
        statuses = conn.execute(text("SELECT DISTINCT status FROM page_analysis")).scalars().all()
    assert mangas == 1
    assert dict(states) == {"done": 2 * pages}  # every page, analysed twice
    assert statuses == ["done"]
