"""The admin API under a database that cannot serve and under hostile load: every
answer under `api/` is JSON with the defensive headers; a pool timeout, a lock
wait or an out-of-memory is a 503 with `Retry-After`; page images are read a few
at a time; listings never hold payloads. Through the Flask blueprint."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import Engine, text

from manga_page_analysis.admin import list_jobs
from manga_page_analysis.db import make_engine
from manga_page_analysis.queue import SyncManga, enqueue
from manga_page_analysis.storage import LocalStorage
from manga_page_analysis.web import api as web_api
from manga_page_analysis.web.flask import admin_blueprint
from manga_page_analysis.web.page import admin_page_html
from tests.helpers import make_page
from tests.integration.web_contract import check_error

TOKEN = "hostile-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PREFIX = "/admin/analysis"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40


def _client(engine: Engine, **options: Any) -> Any:
    app = Flask(__name__)
    app.register_blueprint(admin_blueprint(engine, token=TOKEN, **options), url_prefix=PREFIX)
    return app.test_client()


def _unavailable(response: Any) -> dict[str, Any]:
    error = check_error(response.status_code, response.mimetype, response.get_json(), 503, None)
    assert response.headers["Retry-After"].isdigit()
    return dict(error)


@pytest.fixture
def small_pool(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        yield engine
    finally:
        engine.dispose()


def test_an_exhausted_pool_is_a_json_503_not_the_hosts_html_500(small_pool):
    client = _client(small_pool)
    with small_pool.connect():  # the only connection, held
        error = _unavailable(client.get(f"{PREFIX}/api/stats", headers=AUTH))
    assert "connection" in error["message"]
    assert client.get(f"{PREFIX}/api/stats", headers=AUTH).status_code == 200


def test_a_table_locked_past_the_lock_timeout_is_a_503(engine, database_url):
    client = _client(engine)
    with make_engine(database_url).connect() as locker:
        locker.execute(text("LOCK TABLE crawler_jobs IN ACCESS EXCLUSIVE MODE"))
        _unavailable(client.get(f"{PREFIX}/api/jobs?state=dead", headers=AUTH))
        locker.rollback()
    assert client.get(f"{PREFIX}/api/jobs?state=dead", headers=AUTH).status_code == 200


@pytest.mark.parametrize(("raised", "status"), [(MemoryError(), 503), (RuntimeError("a bug"), 500)])
def test_an_unexpected_error_in_a_view_is_still_json(engine, monkeypatch, raised, status):
    def failing(conn: Any) -> Any:
        raise raised

    monkeypatch.setattr(web_api.admin, "queue_stats", failing)
    response = _client(engine).get(f"{PREFIX}/api/stats", headers=AUTH)
    check_error(response.status_code, response.mimetype, response.get_json(), status, None)
    assert "a bug" not in response.get_data(as_text=True)


def test_every_answer_carries_the_defensive_headers(engine):
    client = _client(engine)
    for response in (
        client.get(f"{PREFIX}/api/stats", headers=AUTH),
        client.get(f"{PREFIX}/api/stats"),  # 401
        client.get(f"{PREFIX}/api/nowhere", headers=AUTH),  # 404
        client.delete(f"{PREFIX}/api/stats", headers=AUTH),  # 405
    ):
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]


def test_the_page_runs_only_its_own_script(engine):
    response = _client(engine).get(f"{PREFIX}/")
    assert response.status_code == 200
    policy = response.headers["Content-Security-Policy"]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in policy and "'unsafe-inline'" not in policy.split(";")[1]
    scripts = re.findall(r"<script>(.*?)</script>", admin_page_html(), flags=re.DOTALL)
    assert scripts
    for body in scripts:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy


class _SlowStore(LocalStorage):
    """A folder store whose reads wait until `release` is set."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self.reading = threading.Semaphore(0)
        self.release = threading.Event()

    def read_bytes(self, key: str, max_bytes: int) -> bytes:
        self.reading.release()
        self.release.wait(30)
        return super().read_bytes(key, max_bytes)


def test_page_images_are_read_a_few_at_a_time(engine, tmp_path):
    store = _SlowStore(tmp_path)
    store.write_bytes("a.png", PNG, content_type="image/png")
    with engine.begin() as conn:
        page_id = make_page(conn, storage_key="a.png")
    client = _client(engine, storage=store, max_image_bytes=1000, max_image_reads=2)
    url = f"{PREFIX}/api/pages/{page_id}/image"
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(client.get, url, headers=AUTH) for _ in range(2)]
        for _ in range(2):
            assert store.reading.acquire(timeout=30)
        _unavailable(client.get(url, headers=AUTH))  # a third, while two are read
        store.release.set()
        assert [future.result().status_code for future in held] == [200, 200]
    assert client.get(url, headers=AUTH).status_code == 200


def test_listing_jobs_with_huge_payloads_holds_none_of_them(engine):
    # 20 dead jobs of 2 MB each: were the payloads read, the listing would hold 40 MB.
    with engine.begin() as conn:
        for n in range(20):
            enqueue(conn, SyncManga(source_id="s", source_manga_key=str(n), title="x" * 2_000_000))
        conn.execute(text("UPDATE crawler_jobs SET state = 'dead'"))
    with engine.connect() as conn:
        list_jobs(conn, state="dead", limit=1)  # warm: statement caches, type adapters
        tracemalloc.start()
        try:
            body = list_jobs(conn, state="dead", limit=500)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert len(body["jobs"]) == 20
    assert {len(job["label"]) for job in body["jobs"]} == {200}  # cut in SQL
    assert peak < 5_000_000, peak
