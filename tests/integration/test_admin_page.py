"""The admin page in a real headless browser.

Debian's Chromium, driven by Selenium through Debian's chromedriver (`.ci/run`
installs both when missing), loads the page from the Flask blueprint served by
a real HTTP server on 127.0.0.1, against real Postgres. The page is used as a
person would: the token is typed into its form, the counts are read off the
table, a live event published by the worker's `EventBus` in this process
reaches the page through `NOTIFY` and the SSE stream, and its Retry button
moves a dead job back to pending. Screenshots go to `tests/artifacts/`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from manga_page_analysis.analysis.page_events import analysis_event_bus
from manga_page_analysis.queue import AnalyzePage, enqueue
from manga_page_analysis.worker.reports.events import JobEvent
from tests.helpers import insert_raw_job, job_row, make_page, wait_until

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
TOKEN = "browser-test-token"
MOUNT = "/admin/analysis"
DOM_TIMEOUT = 15.0
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these Chromium calls Google hosts, which this network refuses.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


def _require_browser() -> None:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if not missing:
        return
    message = (
        f"{', '.join(missing)} missing: `apt-get install chromium chromium-driver` "
        "(.ci/run does this)"
    )
    if os.environ.get("CI"):
        pytest.fail(message)  # CI installs them: their absence is a broken setup, not a skip
    pytest.skip(message)


@contextlib.contextmanager
def headless_chromium(profile: Path, *, zone: str | None = None) -> Iterator[Any]:
    """Debian's Chromium through its chromedriver, its profile under `profile`, in the
    time zone `zone` (default: the machine's)."""
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(str(CHROMEDRIVER), env=None if zone is None else {"TZ": zone})
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(DOM_TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def serving_admin(engine: Engine, **blueprint_options: Any) -> Iterator[tuple[str, Any]]:
    """The blueprint behind werkzeug's threaded server on 127.0.0.1: (page URL, blueprint)."""
    from flask import Flask
    from werkzeug.serving import make_server

    from manga_page_analysis.web.flask import admin_blueprint

    host = Flask(__name__)
    blueprint = admin_blueprint(engine, **blueprint_options)
    host.register_blueprint(blueprint, url_prefix=MOUNT)
    server = make_server("127.0.0.1", 0, host, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="admin-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{MOUNT}/", blueprint
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with headless_chromium(tmp_path / "chromium-profile") as driver:
        yield driver


@pytest.fixture
def admin_server(engine: Engine) -> Iterator[tuple[str, Any]]:
    # A short keep-alive lets the server notice the closed browser quickly,
    # so the test can check the stream's connection was released.
    with serving_admin(engine, token=TOKEN, keepalive_seconds=0.5) as served:
        yield served


def _listening_backends(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'page-analysis-events' AND query ILIKE 'LISTEN%'"
                )
            ).scalar_one()
        )


def _screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    return path


def _seed(engine: Engine) -> dict[str, Any]:
    """Two pending analyses and two dead ones: one with an untrusted-looking label and
    error, and one whose page already has a pending job (its retry must be refused)."""
    with engine.begin() as conn:
        pending_pages = [make_page(conn, manga_title="Frieren", page_number=n) for n in (1, 2)]
        for page_id in pending_pages:
            enqueue(conn, AnalyzePage(page_id=page_id))
        dead_page = make_page(
            conn, manga_title="Yotsuba&! <b>bold?</b>", chapter_number="12", page_number=3
        )
        dead_job = insert_raw_job(
            conn,
            {"kind": "analyze_page", "page_id": str(dead_page), "force": False},
            state="dead",
            attempts=5,
            max_attempts=5,
            last_error="vision server answered 500: <script>boom()</script>",
        )
        clashing_job = insert_raw_job(
            conn,
            {"kind": "analyze_page", "page_id": str(pending_pages[0]), "force": False},
            state="dead",
            attempts=1,
            max_attempts=5,
            last_error="image could not be decoded",
        )
    return {
        "dead_page": dead_page,
        "dead_job": dead_job,
        "clashing_page": pending_pages[0],
        "clashing_job": clashing_job,
    }


def test_admin_page_token_counts_live_events_and_retry(
    engine: Engine, admin_server: tuple[str, Any], browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page_url, blueprint = admin_server
    seeded = _seed(engine)
    wait = WebDriverWait(browser, DOM_TIMEOUT)

    def shown(element_id: str) -> bool:
        return bool(browser.find_element(By.ID, element_id).is_displayed())

    def text_of(css: str) -> str:
        return str(browser.find_element(By.CSS_SELECTOR, css).text)

    # Token mode: the first API call answers 401, so the page asks for the token.
    browser.get(page_url)
    wait.until(lambda _: shown("signin"))
    assert not shown("dashboard")

    # A wrong token is refused with a message, and the form stays.
    browser.find_element(By.ID, "token-input").send_keys("not-the-token\n")
    wait.until(lambda _: shown("signin-error"))
    assert "not accepted" in text_of("#signin-error")

    browser.find_element(By.ID, "token-input").send_keys(TOKEN + "\n")
    wait.until(lambda _: shown("dashboard"))
    assert browser.execute_script("return sessionStorage.length") == 1

    # Counts by kind and state.
    wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, 'tr[data-kind="analyze_page"]'))
    row = 'tr[data-kind="analyze_page"]'
    assert text_of(f'{row} td[data-state="pending"]') == "2"
    assert text_of(f'{row} td[data-state="dead"]') == "2"
    assert text_of('[data-testid="total-pending"]') == "2"
    assert text_of('[data-testid="total-dead"]') == "2"

    # The dead job, labelled, its error shown as text (never as markup).
    dead_row = f'#dead-body tr[data-job-id="{seeded["dead_job"]}"]'
    wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, dead_row))
    assert "Yotsuba&! <b>bold?</b> ch. 12 p. 3" in text_of(dead_row)
    assert "<script>boom()</script>" in text_of(f"{dead_row} .error-text")
    assert not browser.find_elements(By.CSS_SELECTOR, "#dead-body b, #dead-body script")

    # A live event: once the stream LISTENs, the worker's bus publishes through NOTIFY.
    wait_until(lambda: _listening_backends(engine) == 1, timeout=DOM_TIMEOUT)
    breadcrumb = {
        "page_id": seeded["dead_page"],
        "manga_id": uuid.uuid4(),
        "manga_title": "Yotsuba&! <b>bold?</b>",
        "chapter_id": uuid.uuid4(),
        "chapter_number": 12,
        "page_number": 3,
    }
    bus = analysis_event_bus(engine)
    bus.publish(
        JobEvent("completed", uuid.uuid4(), breadcrumb, {"attempt": 1, "duration_ms": 1234})
    )
    bus.publish(
        JobEvent(
            "failed",
            uuid.uuid4(),
            {**breadcrumb, "page_number": 4},
            {"attempt": 2, "max_attempts": 5, "will_retry": True, "error": "timed out <i>x</i>"},
        )
    )
    wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#feed li")) == 2)
    completed = text_of('#feed li[data-type="completed"]')
    assert "Yotsuba&! <b>bold?</b> ch. 12 p. 3" in completed
    assert "completed" in completed and "1.23 s" in completed
    failed = text_of('#feed li[data-type="failed"]')
    assert "ch. 12 p. 4" in failed and "timed out <i>x</i>" in failed and "will retry" in failed
    assert not browser.find_elements(By.CSS_SELECTOR, "#feed b, #feed i")
    assert not shown("feed-empty")
    assert browser.find_element(By.ID, "live-status").get_attribute("data-state") == "live"
    wait.until(lambda _: not browser.find_elements(By.CSS_SELECTOR, "#feed li.new"))
    shot = _screenshot(browser, "admin_page.png")
    assert shot.stat().st_size > 0

    # A retry that would clash with the page's pending job: refused (409), said
    # on the row, nothing changed, and the button usable again.
    clashing_row = f'#dead-body tr[data-job-id="{seeded["clashing_job"]}"]'
    browser.find_element(By.CSS_SELECTOR, f"{clashing_row} button.retry").click()
    wait.until(lambda _: text_of(f"{clashing_row} .row-message").startswith("Not retried"))
    assert browser.find_element(By.CSS_SELECTOR, f"{clashing_row} button.retry").is_enabled()
    assert _state(engine, seeded["clashing_job"]) == "dead"
    _screenshot(browser, "admin_page_retry_refused.png")

    # Retry: the dead job goes back to pending in Postgres, and the page says so.
    browser.find_element(By.CSS_SELECTOR, f"{dead_row} button.retry").click()
    wait_until(lambda: _state(engine, seeded["dead_job"]) == "pending", timeout=DOM_TIMEOUT)
    with engine.connect() as conn:
        retried = job_row(conn, seeded["dead_job"])
    assert retried.attempts == 0 and retried.scheduled_at <= retried.db_now
    wait.until(lambda _: not browser.find_elements(By.CSS_SELECTOR, dead_row))
    wait.until(lambda _: text_of('[data-testid="total-pending"]') == "3")
    assert text_of('[data-testid="total-dead"]') == "1"
    assert "Moved back to pending" in text_of("#banner")
    _screenshot(browser, "admin_page_after_retry.png")

    # Once the clashing pending job is gone, the same button retries the last
    # dead job, and the list shows its empty state.
    with engine.begin() as conn:
        conn.execute(
            text("DELETE FROM crawler_jobs WHERE state = 'pending' AND payload->>'page_id' = :p"),
            {"p": str(seeded["clashing_page"])},
        )
    browser.find_element(By.CSS_SELECTOR, f"{clashing_row} button.retry").click()
    wait_until(lambda: _state(engine, seeded["clashing_job"]) == "pending", timeout=DOM_TIMEOUT)
    wait.until(lambda _: shown("dead-empty"))
    assert text_of("#dead-empty") == "No dead jobs."
    wait.until(lambda _: text_of('[data-testid="total-dead"]') == "0")
    assert text_of('[data-testid="total-pending"]') == "3"

    # No script error on the page (the 401s of the sign-in are network entries).
    errors = [
        entry
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and entry.get("source") != "network"
    ]
    assert errors == []

    # The browser going away ends the stream and gives its connection back.
    browser.quit()
    wait_until(lambda: blueprint.event_streams.open_streams == 0, timeout=DOM_TIMEOUT)
    wait_until(lambda: _listening_backends(engine) == 0, timeout=DOM_TIMEOUT)


def _state(engine: Engine, job_id: uuid.UUID) -> str:
    with engine.connect() as conn:
        return str(job_row(conn, job_id).state)


def test_admin_page_says_when_the_database_goes_away_and_comes_back(
    engine: Engine, admin_server: tuple[str, Any], browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.integration.test_web_events import _allow_connections

    page_url, _ = admin_server
    wait = WebDriverWait(browser, DOM_TIMEOUT)

    def live_state() -> tuple[str, str]:
        status = browser.find_element(By.ID, "live-status")
        return str(status.get_attribute("data-state")), str(status.text)

    browser.get(page_url)
    wait.until(lambda _: browser.find_element(By.ID, "signin").is_displayed())
    browser.find_element(By.ID, "token-input").send_keys(TOKEN + "\n")
    wait.until(lambda _: live_state()[0] == "live")
    try:
        assert _allow_connections(engine, False) == 1
        # The stream stays open and says the database is unreachable.
        wait.until(lambda _: live_state()[0] == "down" and "unreachable" in live_state()[1])
        assert "Live events paused" in live_state()[1]
        _screenshot(browser, "admin_page_database_down.png")
    finally:
        _allow_connections(engine, True)
    wait.until(lambda _: live_state() == ("live", "Live"))
