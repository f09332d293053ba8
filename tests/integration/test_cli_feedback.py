"""What the commands tell a person: `migrate` names the revision, `import-pages`
prints the ids it created (or JSON), lists what it skipped and why, and refuses a
chapter the manga already has or an empty title,
an interrupted command says so in one line, and `demo` says why nothing is
being analysed when the model server is down."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from manga_page_analysis.migrations import head_revision
from tests.helpers import wait_until
from tests.worker_support import png_bytes

VISION_VARIABLES = ("VISION_URL", "VISION_BACKEND", "VISION_HEALTH_URL", "VISION_MODEL")


def _env(database_url: str, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "LOG_LEVEL", *VISION_VARIABLES)
    }
    return {**env, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", **extra}


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "manga_page_analysis", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _psycopg_url(database_url: str) -> str:
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_migrate_says_which_revision_the_database_is_at(empty_database_url, tmp_path):
    head = head_revision()
    env = _env(empty_database_url)
    first = _cli("migrate", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"database migrated from an empty database to revision {head} (head)" in first.stdout
    again = _cli("migrate", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"database at revision {head} (head): nothing to do" in again.stdout


def _chapter_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "chapter"
    folder.mkdir()
    (folder / "001.png").write_bytes(png_bytes())
    (folder / "002.png").write_bytes(png_bytes(color="black"))
    return folder


def test_import_pages_prints_the_ids_and_refuses_a_chapter_already_there(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    folder = _chapter_folder(tmp_path)
    env = _env(database_url, STORAGE_ROOT=str(tmp_path / "storage"))
    first = _cli("import-pages", str(folder), "--title", "Blame!", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    with engine.connect() as conn:
        pages = conn.execute(text("SELECT id, number FROM pages ORDER BY number")).all()
        (manga_id,) = conn.execute(text("SELECT id FROM mangas")).scalars().all()
    assert "into new manga" in first.stdout and str(manga_id) in first.stdout
    for page in pages:
        assert str(page.id) in first.stdout

    again = _cli("import-pages", str(folder), "--title", "Blame!", env=env, cwd=tmp_path)
    assert again.returncode == 1
    assert "already has chapter 1" in again.stderr and "--new-manga" in again.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM pages")).scalar_one() == 2

    second_chapter = _cli(
        "import-pages", str(folder), "--title", "Blame!", "--chapter", "2", "--json",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert second_chapter.returncode == 0, second_chapter.stderr
    body = json.loads(second_chapter.stdout)
    assert body["manga_id"] == str(manga_id) and body["created_manga"] is False
    assert [page["number"] for page in body["pages"]] == [1, 2]
    assert [page["file"] for page in body["pages"]] == ["001.png", "002.png"]
    with engine.connect() as conn:
        jobs = {
            str(row.page_id): str(row.id)
            for row in conn.execute(
                text("SELECT id, payload->>'page_id' AS page_id FROM crawler_jobs")
            )
        }
    assert {page["page_id"]: page["job_id"] for page in body["pages"]}.items() <= jobs.items()

    copy = _cli(
        "import-pages", str(folder), "--title", "Blame!", "--new-manga", env=env, cwd=tmp_path
    )
    assert copy.returncode == 0, copy.stderr
    assert "into new manga" in copy.stdout
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM mangas")).scalar_one() == 2


def test_import_pages_lists_what_it_skipped_and_never_follows_a_link_out(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    folder = _chapter_folder(tmp_path)
    outside = tmp_path / "secret.txt"
    outside.write_text("root:x:0:0")
    (folder / "003.png").symlink_to(outside)  # a.png -> /etc/passwd
    (folder / "004.png").write_text("not a picture")
    (folder / "005.jpg").write_bytes(png_bytes(size=(600, 600), fmt="JPEG") + b"\0" * 4096)
    (folder / "notes.txt").write_text("credits")
    (folder / "006.png").symlink_to(folder / "001.png")  # inside the folder: a page
    storage = tmp_path / "storage"
    env = _env(database_url, STORAGE_ROOT=str(storage), MAX_IMAGE_BYTES="4096")
    result = _cli("import-pages", str(folder), "--title", "Blame!", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "imported 3 page(s)" in result.stdout
    skipped = result.stdout.split("skipped 4 file(s):\n")[1].splitlines()
    assert [line.split(":")[0].strip() for line in skipped] == [
        "003.png",
        "004.png",
        "005.jpg",
        "notes.txt",
    ]
    assert "symbolic link out of the folder" in skipped[0]
    assert "not an image" in skipped[1]
    assert "cap of 4096 bytes" in skipped[2]
    assert "not a page image name" in skipped[3]
    with engine.connect() as conn:
        keys = conn.execute(text("SELECT storage_key FROM pages ORDER BY number")).scalars().all()
    stored = sorted(path for path in storage.rglob("*") if path.is_file())
    assert len(keys) == 3 and len(stored) == 3
    assert all(b"root:x" not in path.read_bytes() for path in stored)

    as_json = _cli(
        "import-pages", str(folder), "--title", "Blame!", "--chapter", "2", "--json",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert [entry["file"] for entry in body["skipped"]] == [
        "003.png",
        "004.png",
        "005.jpg",
        "notes.txt",
    ]


def test_import_pages_with_nothing_to_import_says_why_each_file_was_skipped(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    folder = tmp_path / "chapter"
    folder.mkdir()
    (folder / "cover.png").write_text("not a picture")
    result = _cli("import-pages", str(folder), "--title", "T", env=_env(database_url), cwd=tmp_path)
    assert result.returncode == 1
    assert (
        "no page images" in result.stderr
        and "cover.png: page data is not an image" in result.stderr
    )
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM mangas")).scalar_one() == 0


@pytest.mark.parametrize("title", ["", "   "])
def test_import_pages_refuses_an_empty_title_as_bad_usage(tmp_path: Path, title: str) -> None:
    folder = _chapter_folder(tmp_path)
    env = _env("postgresql://nobody@127.0.0.1:1/none")
    result = _cli("import-pages", str(folder), "--title", title, env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "non-empty --title" in result.stderr and "Traceback" not in result.stderr


def test_a_short_command_interrupted_by_sigterm_says_so_without_a_traceback(
    database_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(_psycopg_url(database_url)) as locker:
        locker.execute("LOCK TABLE crawler_jobs IN ACCESS EXCLUSIVE MODE")
        process = subprocess.Popen(
            [sys.executable, "-m", "manga_page_analysis", "jobs", "stats"],
            env=_env(database_url),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            with psycopg.connect(_psycopg_url(database_url), autocommit=True) as watcher:
                wait_until(
                    lambda: watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE wait_event_type = 'Lock' AND query LIKE '%crawler_jobs%'"
                    ).fetchone()[0],
                    timeout=60,
                )
            process.send_signal(signal.SIGTERM)
            _out, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130
    assert err.strip() == "jobs: interrupted"


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(180)
def test_demo_says_why_nothing_is_analysed_while_the_model_server_is_down(
    database_url: str, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{_dead_port()}"
    env = _env(database_url, VISION_URL=url, STORAGE_ROOT=str(tmp_path / "storage"))
    result = _cli("demo", "--timeout", "4", env=env, cwd=tmp_path)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert f"vision server at {url}/health is not ready" in output
    assert "leasing nothing" in output
    assert "Gave up after" in output and "not analysed" in output
    assert "Traceback" not in output

    # An analysis from an earlier run is shown as such, not as this run's work.
    with psycopg.connect(_psycopg_url(database_url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO page_analysis (page_id, status, ocr_text, duration_ms) "
            "SELECT id, 'done', 'earlier text', 1234 FROM pages"
        )
    again = _cli("demo", "--timeout", "3", env=env, cwd=tmp_path)
    assert again.returncode == 1
    with psycopg.connect(_psycopg_url(database_url)) as conn:
        (pages,) = conn.execute("SELECT count(*) FROM pages").fetchone()
    rows = [line.split() for line in again.stdout.splitlines() if "earlier text" in line]
    assert pages and len(rows) == pages, again.stdout
    assert all(row[1] == "done*" for row in rows), again.stdout
    assert "an earlier run's analysis: this run did not finish that page" in again.stdout
