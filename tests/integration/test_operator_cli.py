"""Acceptance: the operator commands (`jobs ...`, `analyze`, `request-analysis`) as
subprocesses against a real Postgres; output checked against the database."""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text

from manga_page_analysis import admin
from manga_page_analysis.queue import request_analysis
from tests.helpers import count, expire_lease, insert_raw_job, make_page
from tests.integration.test_cli import run_cli
from tests.worker_support import png_bytes

LONG_ERROR = "vision server answered 503: " + "model is loading, please wait " * 10


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    values = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    values.update(DATABASE_URL=database_url, STORAGE_ROOT=str(tmp_path / "storage"))
    return values


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env, cwd=cwd)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def analyse(conn: Connection, page_id: uuid.UUID, status: str = "done") -> None:
    conn.execute(
        text(
            "INSERT INTO page_analysis (page_id, status, ocr_text, model, error) "
            "VALUES (:p, :s, 'text', 'm', CASE WHEN :s = 'failed' THEN 'boom' END)"
        ),
        {"p": page_id, "s": status},
    )


def chapter_of(conn: Connection, page_id: uuid.UUID) -> Any:
    return conn.execute(
        text(
            "SELECT c.id AS chapter_id, c.manga_id FROM pages p "
            "JOIN chapters c ON c.id = p.chapter_id WHERE p.id = :p"
        ),
        {"p": page_id},
    ).one()


def add_pages(conn: Connection, chapter_id: uuid.UUID, numbers: range) -> list[uuid.UUID]:
    return list(
        conn.execute(
            text(
                "INSERT INTO pages (chapter_id, number, storage_key) "
                "SELECT :c, n, 'p' || n || '.png' "
                "FROM generate_series(CAST(:a AS int), CAST(:b AS int)) AS n "
                "ORDER BY n RETURNING id"
            ),
            {"c": chapter_id, "a": numbers.start, "b": numbers.stop - 1},
        ).scalars()
    )


def jobs_for(engine: Engine, page_id: uuid.UUID) -> list[Any]:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT id, state, payload FROM crawler_jobs "
                "WHERE payload->>'page_id' = :p ORDER BY created_at"
            ),
            {"p": str(page_id)},
        ).all()


def analyze_job(conn: Connection, page_id: uuid.UUID, **values: Any) -> uuid.UUID:
    payload = {"kind": "analyze_page", "page_id": str(page_id), "force": False}
    return insert_raw_job(conn, payload, **values)


# --- jobs stats ---------------------------------------------------------------


@pytest.mark.pgbouncer  # also through PgBouncer in transaction mode
def test_jobs_stats_prints_counts_by_kind_and_state(env, engine, tmp_path):
    with engine.begin() as conn:
        pages = [make_page(conn, page_number=n) for n in range(1, 5)]
        analyze_job(conn, pages[0])
        analyze_job(conn, pages[1])
        analyze_job(conn, pages[2], state="dead", attempts=5, last_error="boom")
        analyze_job(conn, pages[3], state="done")
        insert_raw_job(
            conn,
            {"kind": "sync_manga", "source_id": "s", "source_manga_key": "k"},
            state="done",
        )

    body = json.loads(ok(cli(env, tmp_path, "jobs", "stats", "--json")))
    with engine.connect() as conn:
        expected = admin.queue_stats(conn)
    assert body["jobs"] == expected["jobs"]
    assert body["jobs"]["analyze_page"] == {
        "pending": 2, "running": 0, "done": 1, "failed": 0, "dead": 1
    }  # fmt: skip
    assert isinstance(body["oldest_pending_age_seconds"], float)

    lines = ok(cli(env, tmp_path, "jobs", "stats")).splitlines()
    assert lines[0].split() == ["KIND", "PENDING", "RUNNING", "DONE", "FAILED", "DEAD"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if line and line[0] != "o"}
    assert rows["analyze_page"] == ["2", "0", "1", "0", "1"]
    assert rows["sync_manga"] == ["0", "0", "1", "0", "0"]
    assert rows["total"] == ["2", "0", "2", "0", "1"]
    assert lines[-1].startswith("oldest due pending job: waiting ")
    # Columns line up: every row is as long as the header's last column end.
    assert len({len(line) for line in lines[: len(rows) + 1]}) == 1


# --- jobs list ------------------------------------------------------------------


def test_jobs_list_shows_labels_and_short_errors_and_json_matches_the_api(env, engine, tmp_path):
    with engine.begin() as conn:
        page = make_page(conn, manga_title="Blame!", chapter_number="12", page_number=3)
        other = make_page(conn, page_number=1)
        dead = analyze_job(conn, page, state="dead", attempts=5, last_error=LONG_ERROR)
        pending = analyze_job(conn, other)
        conn.execute(
            text("UPDATE crawler_jobs SET updated_at = now() - interval '1 minute' WHERE id = :i"),
            {"i": pending},
        )

    body = json.loads(ok(cli(env, tmp_path, "jobs", "list", "--json")))
    with engine.connect() as conn:
        assert body == admin.list_jobs(conn)
    assert [job["id"] for job in body["jobs"]] == [str(dead), str(pending)]
    assert body["jobs"][0]["last_error"] == LONG_ERROR

    out = ok(cli(env, tmp_path, "jobs", "list", "--state", "dead"))
    header, row = out.splitlines()
    assert header.split()[:5] == ["ID", "KIND", "STATE", "TRIES", "UPDATED"]
    assert row.startswith(str(dead)) and "Blame! ch. 12 p. 3" in row and " 5/5 " in row
    assert LONG_ERROR not in row and LONG_ERROR[:40] in row and row.endswith("…")
    assert header.index("LABEL") == row.index("Blame!")

    first = ok(cli(env, tmp_path, "jobs", "list", "--limit", "1"))
    assert str(dead) in first and str(pending) not in first
    cursor = re.search(r"--cursor (\S+)", first)
    assert cursor is not None
    rest = ok(cli(env, tmp_path, "jobs", "list", "--limit", "1", "--cursor", cursor.group(1)))
    assert str(pending) in rest and "--cursor" not in rest

    assert ok(cli(env, tmp_path, "jobs", "list", "--kind", "sync_manga")) == "no jobs match\n"
    garbled = cli(env, tmp_path, "jobs", "list", "--cursor", "garbage")
    assert garbled.returncode == 2 and "cursor is not one this API issued" in garbled.stderr


# --- jobs retry -------------------------------------------------------------------


@pytest.mark.pgbouncer  # also through PgBouncer in transaction mode
def test_jobs_retry_moves_dead_jobs_back_and_reports_failures(env, engine, tmp_path):
    with engine.begin() as conn:
        pages = [make_page(conn, page_number=n) for n in range(1, 4)]
        dead = analyze_job(conn, pages[0], state="dead", attempts=5, last_error="x")
        pending = analyze_job(conn, pages[1])
        unknown = uuid.uuid4()

    result = cli(env, tmp_path, "jobs", "retry", str(dead), str(unknown), str(pending))
    assert result.returncode == 1
    assert f"job {dead}: back to pending" in result.stdout
    assert f"error: no such job {unknown}" in result.stderr
    assert f"job {pending} is pending, not dead" in result.stderr
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT state, attempts FROM crawler_jobs WHERE id = :i"), {"i": dead}
        ).one()
    assert (row.state, row.attempts) == ("pending", 0)


def test_jobs_retry_all_dead_by_kind_skips_pages_already_in_flight(env, engine, tmp_path):
    with engine.begin() as conn:
        pages = [make_page(conn, page_number=n) for n in range(1, 4)]
        retried = [
            analyze_job(conn, page, state="dead", attempts=5, last_error="x") for page in pages[:2]
        ]
        left = analyze_job(conn, pages[2], state="dead", attempts=5)
        analyze_job(conn, pages[2])  # the page's slot is taken: its dead job stays dead
        crawl = insert_raw_job(
            conn, {"kind": "sync_manga", "source_id": "s", "source_manga_key": "k"}, state="dead"
        )

    out = ok(cli(env, tmp_path, "jobs", "retry", "--all-dead", "--kind", "analyze_page"))
    assert "retried 2 dead analyze_page job(s)" in out
    assert out.splitlines()[1:] == [
        f"job {left} left dead: another job for the same page or chapter "
        "is already pending or running"
    ]
    with engine.connect() as conn:
        states = dict(conn.execute(text("SELECT id, state FROM crawler_jobs")).all())
    assert [states[job] for job in retried] == ["pending", "pending"]
    assert states[crawl] == "dead"
    assert count(engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'dead'") == 2


# --- jobs reap / reclaim ------------------------------------------------------------


def test_jobs_reap_deletes_old_done_jobs_only(env, engine, tmp_path):
    with engine.begin() as conn:
        pages = [make_page(conn, page_number=n) for n in range(1, 4)]
        old = analyze_job(conn, pages[0], state="done")
        recent = analyze_job(conn, pages[1], state="done")
        old_dead = analyze_job(conn, pages[2], state="dead")
        conn.execute(
            text(
                "UPDATE crawler_jobs SET updated_at = now() - interval '10 days' "
                "WHERE id = ANY(:ids)"
            ),
            {"ids": [old, old_dead]},
        )

    out = ok(cli(env, tmp_path, "jobs", "reap", "--days", "7"))
    assert out == "deleted 1 done job(s) last updated more than 7 day(s) ago\n"
    with engine.connect() as conn:
        left = set(conn.execute(text("SELECT id FROM crawler_jobs")).scalars())
    assert left == {recent, old_dead}

    assert ok(cli(env, tmp_path, "jobs", "reap")).startswith("deleted 0 done job(s)")


@pytest.mark.pgbouncer  # also through PgBouncer in transaction mode
def test_jobs_reclaim_gives_back_expired_leases_with_the_attempt_refunded(env, engine, tmp_path):
    with engine.begin() as conn:
        page, other = make_page(conn, page_number=1), make_page(conn, page_number=2)
        orphan = analyze_job(
            conn, page, state="running", attempts=2, leased_until=text("now() + interval '1 h'")
        )
        alive = analyze_job(
            conn, other, state="running", attempts=1, leased_until=text("now() + interval '1 h'")
        )
        expire_lease(conn, orphan)

    out = ok(cli(env, tmp_path, "jobs", "reclaim"))
    assert out.startswith("reclaimed 1 running job(s) whose lease had expired")
    with engine.connect() as conn:
        rows = {
            row.id: (row.state, row.attempts)
            for row in conn.execute(text("SELECT id, state, attempts FROM crawler_jobs"))
        }
    assert rows[orphan] == ("pending", 1)
    assert rows[alive] == ("running", 1)


def test_jobs_reclaim_dead_letters_a_crash_loop_and_says_so(env, engine, tmp_path):
    with engine.begin() as conn:
        looping = analyze_job(
            conn,
            make_page(conn),
            state="running",
            attempts=1,
            leased_until=text("now() + interval '1 h'"),
        )
        conn.execute(
            text("UPDATE crawler_jobs SET reclaim_count = 2 WHERE id = :id"), {"id": looping}
        )
        expire_lease(conn, looping)

    out = ok(cli(env, tmp_path, "jobs", "reclaim"))
    assert out.startswith("reclaimed 0 running job(s)")
    assert (
        f"dead-lettered 1 job(s) reclaimed from a dead worker too often (crash loop): {looping}"
        in out
    )
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT state, last_error FROM crawler_jobs WHERE id = :id"), {"id": looping}
        ).one()
    assert row.state == "dead" and "reclaimed from a dead worker 3 times" in row.last_error


# --- analyze --------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["page", "chapter", "manga"])
def test_analyze_an_unknown_target_is_an_error_and_enqueues_nothing(env, engine, tmp_path, target):
    missing = uuid.uuid4()
    result = cli(env, tmp_path, "analyze", f"--{target}", str(missing))
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: no such {target} {missing}"
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_analyze_a_manga_respects_dedup_and_done_pages_and_force(env, engine, tmp_path):
    with engine.begin() as conn:
        first = make_page(conn, page_number=1)
        ids = chapter_of(conn, first)
        done, in_flight, fresh = add_pages(conn, ids.chapter_id, range(2, 5))
        analyse(conn, done)
        in_flight_job = request_analysis(conn, in_flight)

    out = ok(cli(env, tmp_path, "analyze", "--manga", str(ids.manga_id)))
    assert out == (
        "enqueued 2 analysis job(s); skipped 2 (1 already pending or running; "
        "1 already analysed: add --force to redo)\n"
    )
    assert [job.state for job in jobs_for(engine, first)] == ["pending"]
    assert jobs_for(engine, fresh)[0].payload == {
        "kind": "analyze_page", "page_id": str(fresh), "force": False
    }  # fmt: skip
    assert jobs_for(engine, done) == []

    again = ok(cli(env, tmp_path, "analyze", "--chapter", str(ids.chapter_id)))
    assert again.startswith("enqueued 0 analysis job(s); skipped 4")

    forced = ok(cli(env, tmp_path, "analyze", "--chapter", str(ids.chapter_id), "--force"))
    assert forced == (
        "enqueued 1 analysis job(s); skipped 3 (3 already pending or running, now forced)\n"
    )
    assert jobs_for(engine, done)[0].payload["force"] is True
    assert [(job.id, job.payload["force"]) for job in jobs_for(engine, in_flight)] == [
        (in_flight_job, True)
    ]

    single = ok(cli(env, tmp_path, "analyze", "--page", str(done)))
    assert single.startswith("enqueued 0 analysis job(s); skipped 1")


def test_analyze_force_restarts_a_running_job_as_forced(env, engine, tmp_path):
    with engine.begin() as conn:
        page = make_page(conn)
        analyse(conn, page)
        running = analyze_job(
            conn, page, state="running", attempts=2, leased_until=text("now() + interval '1 h'")
        )

    out = ok(cli(env, tmp_path, "analyze", "--page", str(page), "--force"))
    assert out == (
        "enqueued 0 analysis job(s); skipped 1 (1 already pending or running, now forced)\n"
    )
    (job,) = jobs_for(engine, page)
    assert job.id == running and job.state == "pending" and job.payload["force"] is True
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT attempts, lease_generation FROM crawler_jobs WHERE id = :i"),
            {"i": running},
        ).one()
    assert row.attempts == 1 and row.lease_generation == 1


@pytest.mark.pgbouncer  # also through PgBouncer in transaction mode
def test_analyze_missing_enqueues_every_page_without_a_done_analysis_in_batches(
    env, engine, tmp_path
):
    with engine.begin() as conn:
        first = make_page(conn, page_number=1)
        pages = [first, *add_pages(conn, chapter_of(conn, first).chapter_id, range(2, 2501))]
        analyse(conn, pages[0])
        analyse(conn, pages[1], status="failed")
        request_analysis(conn, pages[2])

    result = cli(env, tmp_path, "analyze", "--missing")
    out = ok(result)
    # 2,500 pages: 1 done, 1 already queued; the failed one is taken again.
    assert out == ("enqueued 2498 analysis job(s); skipped 1 (1 already pending or running)\n")
    assert "[" not in result.stderr, "no progress bar when stderr is not a terminal"
    assert count(engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'pending'") == 2499
    assert (
        count(
            engine,
            "SELECT count(DISTINCT payload->>'page_id') FROM crawler_jobs",
        )
        == 2499
    )
    assert jobs_for(engine, pages[0]) == []

    again = ok(cli(env, tmp_path, "analyze", "--missing"))
    assert again == "enqueued 0 analysis job(s); skipped 2499 (2499 already pending or running)\n"


def test_analyze_missing_draws_a_progress_bar_on_a_terminal(env, engine, tmp_path):
    with engine.begin() as conn:
        first = make_page(conn, page_number=1)
        add_pages(conn, chapter_of(conn, first).chapter_id, range(2, 1201))
    controller, terminal = pty.openpty()
    try:
        process = subprocess.run(
            [sys.executable, "-m", "manga_page_analysis", "analyze", "--missing"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            timeout=60,
        )
        os.close(terminal)
        terminal = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the other side is closed and drained
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(controller)
    assert process.returncode == 0, process.stdout
    screen = drawn.decode()
    assert "\r[" in screen and "] 1000/1200 pages" in screen and "] 1200/1200 pages" in screen
    assert "#" * 30 in screen
    assert process.stdout == "enqueued 1200 analysis job(s); skipped 0\n"


def test_request_analysis_prints_the_job_id_and_refuses_an_unknown_page(env, engine, tmp_path):
    with engine.begin() as conn:
        page = make_page(conn)
    job_id = ok(cli(env, tmp_path, "request-analysis", str(page))).strip()
    assert [str(job.id) for job in jobs_for(engine, page)] == [job_id]
    # Asking again returns the job already in flight.
    assert ok(cli(env, tmp_path, "request-analysis", str(page))).strip() == job_id

    missing = uuid.uuid4()
    result = cli(env, tmp_path, "request-analysis", str(missing))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == f"error: no such page {missing}"


# --- bad usage, unreachable database ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["jobs"], "required"),
        (["jobs", "list", "--limit", "0"], "limit must be an integer from 1 to 500"),
        (["jobs", "list", "--limit", "x"], "limit must be an integer from 1 to 500"),
        (["jobs", "list", "--state", "zombie"], "invalid choice"),
        (["jobs", "retry"], "give job ids or --all-dead"),
        (["jobs", "retry", "--all-dead", str(uuid.uuid4())], "give job ids or --all-dead"),
        (["jobs", "retry", str(uuid.uuid4()), "--kind", "x"], "--kind only goes with --all-dead"),
        (["jobs", "retry", "42"], "'42' is not a job id: give a UUID"),
        (["jobs", "reap", "--days", "0"], "--days must be a whole number of days from 1 to 36500"),
        (["analyze"], "one of the arguments --page --chapter --manga --missing is required"),
        (["analyze", "--page", "p1"], "'p1' is not a page id"),
        (["analyze", "--missing", "--manga", str(uuid.uuid4())], "not allowed with argument"),
        (["request-analysis", "nope"], "'nope' is not a page id"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_usage_exits_2_and_says_what_to_do(tmp_path, args, hint):
    # No database is needed (or reached) to refuse bad usage.
    env = {**os.environ, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    result = run_cli(*args, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert hint in result.stderr
    assert "--help` for what it accepts" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["jobs"],
        ["jobs", "stats"],
        ["jobs", "list"],
        ["jobs", "retry"],
        ["jobs", "reap"],
        ["jobs", "reclaim"],
        ["analyze"],
        ["request-analysis"],
    ],
)
def test_every_operator_command_has_help(tmp_path, command):
    env = {**os.environ, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    result = run_cli(*command, "--help", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m manga_page_analysis {' '.join(command)}")
    assert len(result.stdout.splitlines()) > 3


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "stats"],
        ["jobs", "list", "--json"],
        ["jobs", "retry", "--all-dead"],
        ["jobs", "retry", str(uuid.uuid4())],
        ["jobs", "reap"],
        ["jobs", "reclaim"],
        ["analyze", "--missing"],
        ["analyze", "--page", str(uuid.uuid4())],
        ["request-analysis", str(uuid.uuid4())],
        ["run-worker"],
        ["migrate"],
        ["import-pages", "chapter", "--title", "T"],
    ],
)
def test_an_unreachable_database_is_one_clear_line_and_exit_1(tmp_path, args):
    (tmp_path / "chapter").mkdir()
    (tmp_path / "chapter" / "1.png").write_bytes(png_bytes())
    url = f"postgresql://op:s3cret@127.0.0.1:{_closed_port()}/queue"
    env = {**os.environ, "DATABASE_URL": url, "VISION_URL": "http://127.0.0.1:9"}
    result = run_cli(*args, env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    # migrate and import-pages log as they go (INFO); the failure is one line.
    lines = [line for line in result.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert len(lines) == 1, result.stderr
    assert "cannot reach the database" in lines[0] and "Connection refused" in lines[0]
    assert "s3cret" not in result.stderr and "Traceback" not in result.stderr


def test_a_database_without_the_schema_says_to_migrate(empty_database_url, tmp_path):
    env = {**os.environ, "DATABASE_URL": empty_database_url}
    result = run_cli("jobs", "stats", env=env, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: schema public has no tables of this package (it was never migrated): run "
        "`make migrate`, or set DATABASE_SCHEMA to the schema `migrate` put them in"
    )
