"""Hostile rows and text in the queue: a 9,000-character kind, a row the database
refuses to move, control characters in titles, kinds and errors; and the `unknown`
kind bucket. Reproductions run against the real schema and the real command line."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from sqlalchemy import Engine, text

from manga_page_analysis import admin
from manga_page_analysis.db import connect_kwargs
from manga_page_analysis.queue import WAKEUP_CHANNEL, WAKEUP_KIND_CHARS
from manga_page_analysis.web.flask import admin_blueprint
from tests.helpers import insert_raw_job, make_page
from tests.integration.test_cli import run_cli

LONG_KIND = "k" * 9000
"""Longer than `pg_notify` takes (8000 bytes): it broke inserts and retries."""
EVIL_TITLE = "Evil\x1b]0;PWNED\x07\x1b[2J"
"""Sets a terminal's title and clears its screen when printed raw."""


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    values = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    values.update(DATABASE_URL=database_url, STORAGE_ROOT=str(tmp_path / "storage"))
    return values


@pytest.fixture
def listener(engine: Engine) -> Any:
    with psycopg.connect(**{**connect_kwargs(engine), "autocommit": True}) as conn:
        conn.execute(f'LISTEN "{WAKEUP_CHANNEL}"')
        yield conn


def _payloads(conn: psycopg.Connection[Any]) -> list[str]:
    # Notifications are sent at commit, which has happened: they are already queued.
    return [notify.payload for notify in conn.notifies(timeout=2.0, stop_after=1)]


def _dead(conn: Any, payload: dict[str, Any]) -> uuid.UUID:
    return insert_raw_job(conn, payload, state="dead", attempts=5, last_error="x")


def _state(engine: Engine, job_id: uuid.UUID) -> str:
    with engine.connect() as conn:
        query = text("SELECT state FROM crawler_jobs WHERE id = :i")
        return str(conn.execute(query, {"i": job_id}).scalar_one())


# --- the wake-up trigger ----------------------------------------------------------


def test_a_long_kind_inserts_and_wakes_listeners_with_a_bounded_payload(engine, listener):
    with engine.begin() as conn:
        insert_raw_job(conn, {"kind": LONG_KIND})
    assert _payloads(listener) == ["k" * WAKEUP_KIND_CHARS]

    with engine.begin() as conn:
        # 200 distinct kinds in one statement: joined, they would be too long too.
        conn.execute(
            text(
                "INSERT INTO crawler_jobs (payload) SELECT jsonb_build_object('kind', "
                "repeat('q', 50) || n) FROM generate_series(1, 200) AS n"
            )
        )
    assert _payloads(listener) == [""]  # an empty payload wakes every listener


def test_a_dead_job_of_a_long_kind_is_retried_and_wakes_listeners(engine, listener, env, tmp_path):
    with engine.begin() as conn:
        one, other = _dead(conn, {"kind": LONG_KIND}), _dead(conn, {"kind": LONG_KIND + "x"})

    result = run_cli("jobs", "retry", str(one), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert _state(engine, one) == "pending"
    assert _payloads(listener) == ["k" * WAKEUP_KIND_CHARS]

    result = run_cli("jobs", "retry", "--all-dead", env=env, cwd=tmp_path)
    assert result.returncode == 0 and "retried 1 dead job(s)" in result.stdout
    assert _state(engine, other) == "pending"


# --- jobs retry when the database refuses a row -------------------------------------


@pytest.fixture
def poison_refused(engine: Engine) -> None:
    """A trigger that refuses to move `poison` jobs back to pending, as Postgres
    refused the long kind's notification: a row no retry can move."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN RAISE EXCEPTION 'poison row refused'; END $$"
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER refuse_poison BEFORE UPDATE ON crawler_jobs FOR EACH ROW "
                "WHEN (NEW.payload ->> 'kind' = 'poison' AND NEW.state = 'pending') "
                "EXECUTE FUNCTION refuse_poison()"
            )
        )


@pytest.mark.usefixtures("poison_refused")
def test_retry_all_dead_retries_the_good_jobs_and_names_each_one_left(engine, env, tmp_path):
    with engine.begin() as conn:
        pages = [make_page(conn, page_number=n) for n in range(1, 4)]
        good = [_dead(conn, {"kind": "analyze_page", "page_id": str(p)}) for p in pages[:2]]
        poison = _dead(conn, {"kind": "poison"})
        clash = _dead(conn, {"kind": "analyze_page", "page_id": str(pages[2])})
        insert_raw_job(conn, {"kind": "analyze_page", "page_id": str(pages[2])})

    result = run_cli("jobs", "retry", "--all-dead", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "retried 2 dead job(s): back to pending, attempts reset"
    assert sorted(lines[1:]) == sorted(
        [
            f"job {poison} left dead: the database refused it: poison row refused",
            f"job {clash} left dead: another job for the same page or chapter "
            "is already pending or running",
        ]
    )
    assert [_state(engine, job) for job in good] == ["pending", "pending"]
    assert _state(engine, poison) == _state(engine, clash) == "dead"


@pytest.mark.usefixtures("poison_refused")
def test_retrying_a_refused_job_is_a_clear_error_from_the_cli_and_the_api(engine, env, tmp_path):
    with engine.begin() as conn:
        poison = _dead(conn, {"kind": "poison"})

    result = run_cli("jobs", "retry", str(poison), env=env, cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr == (
        f"error: job {poison} cannot be retried: the database refused it: poison row refused\n"
    )

    app = Flask(__name__)
    app.register_blueprint(admin_blueprint(engine, token="t"), url_prefix="/admin")
    response = app.test_client().post(
        f"/admin/api/jobs/{poison}/retry", headers={"Authorization": "Bearer t"}
    )
    assert response.status_code == 409 and response.mimetype == "application/json"
    assert "the database refused it" in response.get_json()["error"]["message"]
    assert _state(engine, poison) == "dead"


# --- what a terminal shows -----------------------------------------------------------


def test_tables_show_control_characters_escaped_and_json_keeps_them(engine, env, tmp_path):
    with engine.begin() as conn:
        page = make_page(conn, manga_title=EVIL_TITLE)
        insert_raw_job(
            conn,
            {"kind": "analyze_page", "page_id": str(page)},
            state="dead",
            last_error="boom\x1b[31m red\u202e",
        )
        insert_raw_job(conn, {"kind": "evil\x1b[2Jkind"}, state="dead")

    for command in (["jobs", "list"], ["jobs", "stats"]):
        result = run_cli(*command, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert not any(char in out for char in "\x1b\x07\u202e"), out
        assert "evil\\x1b[2Jkind" in out
    listing = run_cli("jobs", "list", env=env, cwd=tmp_path).stdout
    assert "Evil\\x1b]0;PWNED\\x07\\x1b[2J ch. 1 p. 1" in listing
    assert "boom\\x1b[31m red\\u202e" in listing

    body = json.loads(run_cli("jobs", "list", "--json", env=env, cwd=tmp_path).stdout)
    assert {job["label"] for job in body["jobs"]} >= {f"{EVIL_TITLE} ch. 1 p. 1"}


# --- the unknown kind ------------------------------------------------------------------


def test_the_unknown_bucket_of_stats_is_what_kind_unknown_lists(engine):
    with engine.begin() as conn:
        no_kind = insert_raw_job(conn, {"page_id": str(uuid.uuid4())}, state="dead")
        named = insert_raw_job(conn, {"kind": "unknown"}, state="pending")
        insert_raw_job(conn, {"kind": "sync_manga"}, state="pending")
    with engine.connect() as conn:
        stats = admin.queue_stats(conn)["jobs"]["unknown"]
        listed = admin.list_jobs(conn, kind="unknown")["jobs"]
    assert {job["id"] for job in listed} == {str(no_kind), str(named)}
    assert sum(stats.values()) == len(listed)
