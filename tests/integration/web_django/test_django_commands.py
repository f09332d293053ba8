"""The management commands as subprocesses of the example project:
`page_analysis_migrate` brings an empty database to head, `run_worker`
processes pages on Django's database and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from manga_page_analysis.db import make_engine
from manga_page_analysis.migrations import revisions
from manga_page_analysis.queue import request_analysis
from testbed.vision_server import ScriptedVisionServer, analysis_content, ok_answer
from tests.helpers import make_page, wait_until
from tests.worker_support import png_bytes

MANAGE = Path(__file__).resolve().parents[3] / "examples" / "django_project" / "manage.py"


def _env(database_url: str, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env.update(DATABASE_URL=database_url, PYTHONUNBUFFERED="1", **extra)
    return env


def start_run_worker(env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """`manage.py run_worker` as a subprocess, its output (stderr included) on stdout."""
    return subprocess.Popen(
        [sys.executable, str(MANAGE), "run_worker"],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _manage(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("command", "said", "django_tables"),
    [
        # Django's own migrate alone is enough: its tables and ours.
        ("migrate", "page analysis schema (public) is at head", {"auth_user"}),
        # The older command stays as an alias.
        ("page_analysis_migrate", "schema is at head", set()),
    ],
)
def test_migrate_brings_an_empty_database_to_head(
    command: str, said: str, django_tables: set[str], empty_database_url: str, tmp_path: Path
) -> None:
    result = _manage(command, env=_env(empty_database_url), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert said in result.stdout
    engine = make_engine(empty_database_url)
    try:
        current, head = revisions(engine)
        with engine.connect() as conn:
            tables = set(
                conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                ).scalars()
            )
    finally:
        engine.dispose()
    assert current == head is not None
    assert {"crawler_jobs", "page_analysis", "pages", *django_tables} <= tables
    again = _manage(command, env=_env(empty_database_url), cwd=tmp_path)
    assert again.returncode == 0, again.stderr  # idempotent


def test_run_worker_refuses_an_unmigrated_database(empty_database_url: str, tmp_path: Path) -> None:
    result = _manage("run_worker", env=_env(empty_database_url), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "python manage.py migrate" in result.stderr


def test_check_reports_a_database_that_is_not_postgres(tmp_path: Path) -> None:
    script = (
        "import django, sys; from django.conf import settings; "
        "from manga_page_analysis.web.django import database_from_url; "
        "settings.configure(INSTALLED_APPS=['manga_page_analysis.web.django'], "
        "DATABASES={'default': database_from_url(sys.argv[1])}); django.setup(); "
        "from django.core.management import call_command; call_command('check')"
    )
    for url in (f"sqlite:///{tmp_path}/db.sqlite3", "mysql://app@127.0.0.1/manga"):
        result = subprocess.run(
            [sys.executable, "-c", script, url],
            env=_env(""),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode != 0, result.stdout
        assert "page_analysis.E001" in result.stderr, result.stderr
        assert "django.db.backends.postgresql" in result.stderr


@pytest.mark.slow
def test_run_worker_processes_pages_and_stops_on_sigterm(
    database_url: str, engine: Engine, vision_server: ScriptedVisionServer, tmp_path: Path
) -> None:
    storage = tmp_path / "storage"
    storage.mkdir()
    (storage / "a.png").write_bytes(png_bytes())
    with engine.begin() as conn:
        page = make_page(conn, storage_key="a.png")
        request_analysis(conn, page)
    vision_server.default = ok_answer(analysis_content(ocr_text="よつばと！"))
    env = _env(
        database_url,
        VISION_URL=vision_server.url,
        STORAGE_ROOT=str(storage),
        IDLE_POLL_SECONDS="0.05",
        READINESS_POLL_SECONDS="0.1",
    )
    process = start_run_worker(env, tmp_path)
    try:

        def analysed() -> bool:
            with engine.connect() as conn:
                return bool(
                    conn.execute(
                        text("SELECT count(*) FROM page_analysis WHERE status = 'done'")
                    ).scalar_one()
                )

        wait_until(analysed, timeout=60, interval=0.1)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    assert "run-worker: database" in output and "run-worker stopped" in output
    with engine.connect() as conn:
        row = conn.execute(text("SELECT status, ocr_text FROM page_analysis")).one()
        states = conn.execute(text("SELECT DISTINCT state FROM crawler_jobs")).scalars().all()
    assert (row.status, row.ocr_text) == ("done", "よつばと！")
    assert states == ["done"]
