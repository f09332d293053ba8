"""A host's own job kind, end to end: registered beside the seed's four, enqueued
in the host's transaction, leased by a runner that has its handler, run, retried
with backoff, dead-lettered, and shown by `jobs list`, `jobs stats` and the admin
API; rows of kinds a runner has no handler for are left alone."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from flask import Flask
from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session

from manga_page_analysis.errors import ServiceError
from manga_page_analysis.queue import (
    KIND_NAME_MAX_LENGTH,
    Lease,
    Payload,
    enqueue,
    enqueue_many,
    lease,
    lease_kinds,
    register_kind,
    registered_kinds,
)
from manga_page_analysis.queue.kinds import unregister_kind
from manga_page_analysis.web.flask import admin_blueprint
from manga_page_analysis.worker import JobContext, Runner
from tests.helpers import insert_raw_job, job_row, wait_until
from tests.integration.test_cli import run_cli

FEED_INDEX = "uq_crawler_jobs_crawl_feed_inflight"


class CrawlFeed(Payload):
    kind: Literal["crawl_feed"] = "crawl_feed"
    feed_url: str


class FeedHandler:
    """Fetches nothing: a feed whose url contains "broken" fails every attempt."""

    kind = "crawl_feed"
    timeout_message = "feed crawl timed out"
    writes_result = True

    def __init__(self) -> None:
        self.attempts: dict[str, int] = {}
        self.final_failures: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def load(self, conn: Connection, lease: Lease) -> CrawlFeed:
        assert isinstance(lease.payload, CrawlFeed)  # decoded into the host's model
        return lease.payload

    def describe(self, item: CrawlFeed) -> str:
        return item.feed_url

    def breadcrumb(self, item: CrawlFeed) -> Mapping[str, Any] | None:
        return None

    def execute(self, item: CrawlFeed, ctx: JobContext) -> int:
        with self._lock:
            self.attempts[item.feed_url] = self.attempts.get(item.feed_url, 0) + 1
        if "broken" in item.feed_url:
            raise ServiceError(f"feed {item.feed_url} answered 502")
        return 3

    def save(self, conn: Connection, item: CrawlFeed, result: int, ctx: JobContext) -> None:
        conn.execute(
            text("INSERT INTO host_feed_results (feed_url, entries) VALUES (:u, :n)"),
            {"u": item.feed_url, "n": result},
        )

    def save_failure(self, conn: Connection, item: CrawlFeed, error: str, ctx: JobContext) -> None:
        with self._lock:
            self.final_failures.append((item.feed_url, error))


@pytest.fixture
def feed_kind(engine: Engine) -> Iterator[None]:
    kind = register_kind(CrawlFeed, dedup_field="feed_url", dedup_index=FEED_INDEX)
    index_sql = kind.dedup_index_sql()
    assert index_sql is not None
    with engine.begin() as conn:  # what the host's own migration would create
        conn.execute(text(index_sql))
        conn.execute(text("CREATE TABLE host_feed_results (feed_url text, entries int)"))
    try:
        yield
    finally:
        unregister_kind("crawl_feed")


def _due_now(engine: Engine, job_id: uuid.UUID) -> None:
    """The backoff has passed (without waiting for it)."""
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE crawler_jobs SET scheduled_at = now() WHERE id = :id"), {"id": job_id}
        )


def test_a_host_kind_runs_end_to_end(
    feed_kind: None, engine: Engine, database_url: str, tmp_path: Path
) -> None:
    # Enqueued inside the host's own ORM transaction: a rollback leaves no job.
    with Session(engine) as session:
        enqueue(session, CrawlFeed(feed_url="https://example.org/rolled-back"))
        session.rollback()
    with Session(engine) as session, session.begin():
        good = enqueue(session, CrawlFeed(feed_url="https://example.org/ok"))
        broken = enqueue(session, CrawlFeed(feed_url="https://example.org/broken"), max_attempts=2)
        # The host's dedup rule: one job in flight per feed.
        assert enqueue(session, CrawlFeed(feed_url="https://example.org/ok")) is None
    assert good is not None and broken is not None
    with engine.begin() as conn:
        total = conn.execute(text("SELECT count(*) FROM crawler_jobs")).scalar_one()
        # A kind no runner here knows: never leased, so never poison.
        foreign = insert_raw_job(conn, {"kind": "someone_elses", "x": 1})
    assert total == 2

    handler = FeedHandler()
    runner = Runner(engine, [handler], workers=2, idle_poll=0.05)
    runner.start()
    try:
        wait_until(lambda: _row(engine, good).state == "done", timeout=20)
        first = wait_until(lambda: _ended_attempt(engine, broken), timeout=20)
        # The first failure went back to pending after a backoff (about a minute).
        assert first.state == "pending" and first.attempts == 1
        assert first.scheduled_at > first.db_now
        assert "answered 502" in first.last_error
        _due_now(engine, broken)
        dead = wait_until(lambda: _dead(engine, broken), timeout=20)
    finally:
        runner.stop()
        assert runner.join(10)
    assert dead.attempts == 2 and "answered 502" in dead.last_error
    assert handler.final_failures == [("https://example.org/broken", dead.last_error)]
    assert handler.attempts == {"https://example.org/ok": 1, "https://example.org/broken": 2}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT feed_url, entries FROM host_feed_results")).all() == [
            ("https://example.org/ok", 3)
        ]
        assert job_row(conn, foreign).state == "pending"

    # The operator commands (a process that never registered the kind) show it.
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(DATABASE_URL=database_url, STORAGE_ROOT=str(tmp_path / "storage"))
    listed = run_cli("jobs", "list", "--kind", "crawl_feed", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {job["id"]: job for job in json.loads(listed.stdout)["jobs"]}
    assert rows[str(broken)]["state"] == "dead" and rows[str(good)]["state"] == "done"
    assert rows[str(broken)]["kind"] == "crawl_feed"
    table = run_cli("jobs", "list", "--state", "dead", env=env, cwd=tmp_path)
    assert table.returncode == 0 and str(broken) in table.stdout and "crawl_feed" in table.stdout
    stats = run_cli("jobs", "stats", "--json", env=env, cwd=tmp_path)
    assert json.loads(stats.stdout)["jobs"]["crawl_feed"]["dead"] == 1
    assert json.loads(stats.stdout)["jobs"]["someone_elses"]["pending"] == 1

    # And so does the admin API.
    app = Flask(__name__)
    app.register_blueprint(admin_blueprint(engine, token="t"), url_prefix="/admin")
    client = app.test_client()
    auth = {"Authorization": "Bearer t"}
    body = client.get("/admin/api/jobs?kind=crawl_feed&state=dead", headers=auth).get_json()
    assert [(job["id"], job["kind"]) for job in body["jobs"]] == [(str(broken), "crawl_feed")]
    stats_body = client.get("/admin/api/stats", headers=auth).get_json()
    assert stats_body["jobs"]["crawl_feed"]["done"] == 1


def _row(engine: Engine, job_id: uuid.UUID) -> Any:
    with engine.connect() as conn:
        return job_row(conn, job_id)


def _ended_attempt(engine: Engine, job_id: uuid.UUID) -> Any:
    row = _row(engine, job_id)
    return row if row.state == "pending" and row.attempts == 1 else None


def _dead(engine: Engine, job_id: uuid.UUID) -> Any:
    row = _row(engine, job_id)
    return row if row.state == "dead" else None


@pytest.mark.parametrize(
    "name",
    ["", "Crawl", "crawl-feed", "9lives", "crawl feed", "x" * (KIND_NAME_MAX_LENGTH + 1), "é"],
)
def test_a_kind_name_outside_the_rule_is_refused_by_registration_and_enqueue(
    engine: Engine, name: str
) -> None:
    model = type(
        "Bad",
        (Payload,),
        {"__annotations__": {"kind": Literal[name]}, "kind": name},  # type: ignore[valid-type]
    )
    with pytest.raises(ValueError, match="invalid job kind"):
        register_kind(model)
    assert name not in {kind.name for kind in registered_kinds()}
    with engine.begin() as conn, pytest.raises(ValueError, match="invalid job kind"):
        enqueue(conn, model())
    with engine.begin() as conn, pytest.raises(ValueError, match="invalid job kind"):
        enqueue_many(conn, [model()])


def test_a_kind_needs_a_literal_name_and_one_model(feed_kind: None) -> None:
    class Loose(Payload):
        kind: str = "loose"

    with pytest.raises(ValueError, match="Literal"):
        register_kind(Loose)

    class Impostor(Payload):
        kind: Literal["crawl_feed"] = "crawl_feed"

    with pytest.raises(ValueError, match="already registered"):
        register_kind(Impostor)
    assert register_kind(CrawlFeed, dedup_field="feed_url", dedup_index=FEED_INDEX)


def test_leasing_an_unregistered_kind_leases_nothing_and_a_runner_needs_registered_handlers(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        foreign = insert_raw_job(conn, {"kind": "someone_elses", "x": 1})
    with engine.begin() as conn:
        assert lease_kinds(conn, ["someone_elses"], 1, timedelta(seconds=5)) == []
    with engine.connect() as conn:
        assert job_row(conn, foreign).state == "pending"
    handler = FeedHandler()
    with pytest.raises(ValueError, match="not registered"):
        Runner(engine, [handler])


def test_leasing_any_kind_gives_back_a_row_of_a_kind_not_registered_here(engine: Engine) -> None:
    with engine.begin() as conn:
        foreign = insert_raw_job(conn, {"kind": "someone_elses", "x": 1})
    with engine.begin() as conn:
        assert lease(conn, None, 10, timedelta(seconds=30)) == []
    with engine.connect() as conn:
        row = job_row(conn, foreign)
    assert (row.state, row.attempts, row.last_error) == ("pending", 0, None)  # not poison
