"""The admin page's views of the work in a real headless browser, under Flask
and under Django: a job opened from the jobs list, a page opened from its
chapter, its OCR boxes drawn where the text is, a box and its line of text
highlighting each other, and "Analyse again" updating the view live.

The first analysis is a real one: a sample page read by the in-process OCR
backend, so the boxes are where the text really is. The forced re-analysis
goes to the scripted vision server (its answer has other text), through a
real runner whose events reach the page over NOTIFY and the event stream.
Screenshots go to `tests/artifacts/`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert, text

from manga_page_analysis.analysis.model_server.client import VisionClient
from manga_page_analysis.analysis.model_server.retry_policy import RetryPolicy
from manga_page_analysis.analysis.page_events import analysis_event_bus
from manga_page_analysis.analysis.reader.ocr_analyzer import OcrAnalyzer
from manga_page_analysis.analysis.wiring import analysis_runner
from manga_page_analysis.config import Settings
from manga_page_analysis.models import Chapter, Manga, Page
from manga_page_analysis.queue import request_analysis
from manga_page_analysis.storage import LocalStorage
from manga_page_analysis.worker import Runner
from testbed.vision_server import analysis_content, ok_answer
from tests.helpers import insert_raw_job, wait_until
from tests.integration.test_admin_page import (  # noqa: F401  (the browser fixture)
    DOM_TIMEOUT,
    _screenshot,
    browser,
)

pytestmark = pytest.mark.slow

SAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sample_manga"
TOKEN = "views-browser-token"
SECOND_READING = "二回目の読み: a second reading"
DEAD_JOB_RUNNER = "gpu-2:4127:<b id=injected>worker</b>:9f2c41d0"


def _seed(engine: Engine, storage_root: Path) -> dict[str, Any]:
    """A manga with one chapter of two sample pages (in storage) and a second chapter."""
    store = LocalStorage(storage_root)
    with engine.begin() as conn:
        manga_id = conn.execute(
            insert(Manga).values(title="Sample manga").returning(Manga.id)
        ).scalar_one()
        chapter_id, _ = (
            conn.execute(
                insert(Chapter)
                .values(manga_id=manga_id, number=Decimal(number), title="")
                .returning(Chapter.id)
            ).scalar_one()
            for number in ("1", "2")
        )
        pages = []
        for number, name in enumerate(("001.png", "002.png"), start=1):
            key = f"sample/{name}"
            store.write_bytes(key, (SAMPLES / name).read_bytes(), content_type="image/png")
            pages.append(
                conn.execute(
                    insert(Page)
                    .values(chapter_id=chapter_id, number=number, storage_key=key)
                    .returning(Page.id)
                ).scalar_one()
            )
        job_id = request_analysis(conn, pages[1])
        dead_job = insert_raw_job(
            conn,
            {"kind": "analyze_page", "page_id": str(pages[0]), "force": False},
            state="dead",
            attempts=5,
            max_attempts=5,
            last_error="vision server answered 503 Service Unavailable: model is loading",
            # Who ran it last; markup in a host or runner name stays text.
            leased_by=DEAD_JOB_RUNNER,
        )
    return {
        "manga": manga_id,
        "chapter": chapter_id,
        "pages": pages,
        "job": job_id,
        "dead_job": dead_job,
    }


@contextmanager
def _runner(engine: Engine, storage_root: Path, **vision: Any) -> Iterator[Runner]:
    """A running analysis runner on `engine`, publishing to `NOTIFY analysis_events`."""
    values: dict[str, Any] = {
        "database_url": engine.url.render_as_string(hide_password=False),
        "storage_root": storage_root,
        "analysis_workers": 1,
        "idle_poll_seconds": 0.05,
        "readiness_poll_seconds": 0.05,
        "reap_retention_days": 0,
        "vision_model": "test-model",
    }
    analyzer = vision.pop("analyzer", None)
    values.update(vision)
    settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
    if analyzer is None:
        analyzer = VisionClient(
            base_url=settings.vision_url,
            model=settings.vision_model,
            read_timeout=10.0,
            retry=RetryPolicy(initial_seconds=0.01, max_seconds=0.05),
        )
    with analysis_runner(
        settings, engine=engine, vision=analyzer, events=analysis_event_bus(engine)
    ) as runner:
        runner.start()
        try:
            yield runner
        finally:
            runner.stop()
            assert runner.join(10), "runner did not stop within 10 s"


def _job_state(engine: Engine, job_id: uuid.UUID) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                text("SELECT state FROM crawler_jobs WHERE id = :id"), {"id": job_id}
            ).scalar_one()
        )


def _blocks(engine: Engine, page_id: uuid.UUID) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        blocks = conn.execute(
            text("SELECT ocr_blocks FROM page_analysis WHERE page_id = :id"), {"id": page_id}
        ).scalar_one()
    return list(blocks or [])


def exercise_the_views(
    browser: Any,  # noqa: F811
    page_url: str,
    engine: Engine,
    storage_root: Path,
    ocr: OcrAnalyzer,
    vision_server: Any,
    prefix: str,
) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    seeded = _seed(engine, storage_root)
    sample_page = seeded["pages"][1]
    with _runner(engine, storage_root, analyzer=ocr) as runner:
        wait_until(lambda: _job_state(engine, seeded["job"]) == "done", timeout=60)
    blocks = _blocks(engine, sample_page)
    assert len(blocks) >= 3, blocks  # 002.png has five lines of dialogue

    # Views redraw live: an element found may be replaced before it is read.
    wait = WebDriverWait(browser, DOM_TIMEOUT, ignored_exceptions=(StaleElementReferenceException,))

    def find(css: str) -> Any:
        return browser.find_element(By.CSS_SELECTOR, css)

    def text_of(css: str) -> str:
        """The element's text, read in one step (no stale reference in between)."""
        return str(
            browser.execute_script(
                "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css
            )
        )

    def classes(css: str) -> str:
        return str(
            browser.execute_script(
                "const e = document.querySelector(arguments[0]); return e ? e.className : '';", css
            )
        )

    def click(css: str) -> None:
        wait.until(lambda _: find(css).click() or True)

    def present(css: str) -> bool:
        return bool(browser.find_elements(By.CSS_SELECTOR, css))

    browser.get(page_url)
    wait.until(lambda _: find("#signin").is_displayed())
    find("#token-input").send_keys(TOKEN + "\n")
    wait.until(lambda _: find("#dashboard").is_displayed())
    # Before the token, the page made one request only (one 401, not one per panel).
    refused = [
        entry
        for entry in browser.get_log("browser")
        if "401" in entry.get("message", "") and "/api/" in entry.get("message", "")
    ]
    assert len(refused) <= 1, refused

    # Jobs: the list, then a job opened from it, then its page.
    click('nav.views a[data-nav="jobs"]')
    job_link = f'#jobs-body tr[data-job-id="{seeded["job"]}"] a'
    wait.until(lambda _: present(job_link))
    assert text_of(job_link) == "Sample manga ch. 1 p. 2"
    click(job_link)
    wait.until(lambda _: find("#view-job").get_attribute("aria-busy") == "false")
    assert text_of("#job-title") == "Sample manga ch. 1 p. 2"
    assert text_of('#job-body dd[data-field="state"]') == "done"
    assert text_of('#job-body dd[data-field="attempts"]') == "1 of 5"
    assert f'"page_id": "{sample_page}"' in text_of('#job-body dd[data-field="payload"]')
    # The runner that ran it, by the id it leased under.
    assert text_of('#job-body dd[data-field="runner"]') == f"{runner.runner_id} (leased it last)"
    _screenshot(browser, f"{prefix}_job_view.png")
    click("#job-page-link")
    wait.until(lambda _: text_of("#page-title") == "Sample manga ch. 1 p. 2")
    wait.until(lambda _: find("#view-page").get_attribute("aria-busy") == "false")

    # A job looked up by id: its error, Retry (dead -> pending, due now), then Discard.
    find("#lookup-id").send_keys(str(seeded["dead_job"]) + "\n")
    wait.until(lambda _: text_of("#job-crumb") == str(seeded["dead_job"]))
    wait.until(lambda _: find("#view-job").get_attribute("aria-busy") == "false")
    assert "model is loading" in text_of('#job-body dd[data-field="last-error"]')
    assert text_of('#job-body dd[data-field="attempts"]') == "5 of 5"
    assert text_of('#job-body dd[data-field="runner"]') == f"{DEAD_JOB_RUNNER} (leased it last)"
    assert not present("#injected")
    _screenshot(browser, f"{prefix}_job_view_dead.png")
    click("#job-retry")
    wait.until(lambda _: text_of('#job-body dd[data-field="state"]') == "pending")
    assert text_of('#job-body [data-testid="due"]') == "(due now)"
    assert text_of("#job-message") == "Moved back to pending."
    assert _job_state(engine, seeded["dead_job"]) == "pending"
    click("#job-discard")
    wait.until(lambda _: text_of('#job-body dd[data-field="state"]') == "dead")
    assert "discarded by an admin" in text_of('#job-body dd[data-field="last-error"]')
    assert _job_state(engine, seeded["dead_job"]) == "dead"

    # The library: manga -> chapter (with its progress) -> a page.
    click('nav.views a[data-nav="library"]')
    manga_row = f'tr[data-manga-id="{seeded["manga"]}"]'
    wait.until(lambda _: present(manga_row))
    # Page 1's only job is dead (discarded): it counts as failed.
    assert "1 analysed · 1 failed · 0 queued · 0 never requested" in text_of(manga_row)
    click(f"{manga_row} a")
    chapter_row = f'tr[data-chapter-id="{seeded["chapter"]}"]'
    wait.until(lambda _: present(chapter_row))
    _screenshot(browser, f"{prefix}_manga_view.png")
    click(f"{chapter_row} a")
    tile = f'#chapter-body a[data-page-id="{sample_page}"]'
    wait.until(lambda _: present(tile))
    _screenshot(browser, f"{prefix}_chapter_view.png")
    assert text_of(tile).split() == ["p.", "2", "analysed"]
    click(tile)
    wait.until(lambda _: find("#view-page").get_attribute("aria-busy") == "false")

    # The page: its image, and a numbered box over every text block, where the text is.
    wait.until(
        lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#page-boxes .box")) == len(blocks)
    )
    # One snapshot of the image, the boxes and the lines (a live event may redraw them).
    shown = browser.execute_script(
        "const i = document.getElementById('page-image'), r = i.getBoundingClientRect();"
        "return {image: {left: r.left, top: r.top, width: r.width, height: r.height,"
        " natural: i.naturalWidth, naturalHeight: i.naturalHeight},"
        " boxes: [...document.querySelectorAll('#page-boxes .box')].map((b) =>"
        "  ({index: +b.dataset.index, number: b.textContent, rect: b.getBoundingClientRect().toJSON()})),"
        " lines: [...document.querySelectorAll('#page-blocks li .t')].map((t) => t.textContent)};"
    )
    image = shown["image"]
    assert image["natural"] > 0 and image["width"] > 0
    scale_x = image["width"] / image["natural"]
    scale_y = image["height"] / image["naturalHeight"]
    assert [box["index"] for box in shown["boxes"]] == list(range(len(blocks)))
    for box, block in zip(shown["boxes"], blocks, strict=True):
        assert box["number"] == str(box["index"] + 1)
        x0, y0, x1, y1 = block["box"]
        expected = {
            "left": image["left"] + x0 * scale_x,
            "top": image["top"] + y0 * scale_y,
            "right": image["left"] + x1 * scale_x,
            "bottom": image["top"] + y1 * scale_y,
        }
        for side, value in expected.items():
            assert abs(box["rect"][side] - value) <= 2, (box, side, expected)
    assert shown["lines"] == [block["text"] for block in blocks]

    # Selecting a box highlights its line; hovering a line highlights its box.
    click('#page-boxes .box[data-index="1"]')
    assert "selected" in classes('#page-blocks li[data-index="1"]')
    assert "selected" in classes('#page-boxes .box[data-index="1"]')
    ActionChains(browser).move_to_element(find('#page-blocks li[data-index="2"]')).perform()
    wait.until(lambda _: "hl" in classes('#page-boxes .box[data-index="2"]'))
    assert "hl" not in classes('#page-boxes .box[data-index="0"]')
    _screenshot(browser, f"{prefix}_page_view.png")

    # Analyse again (forced): a worker answers with other text; the view follows live.
    assert text_of("#page-jobs tbody").count("done") == 1
    vision_server.script(ok_answer(analysis_content(ocr_text=SECOND_READING, tags=["station"])))
    with _runner(engine, storage_root, vision_url=vision_server.url):
        click("#analyse-again")
        wait.until(lambda _: text_of("#page-message") == "Analysed again just now.")
        wait.until(lambda _: SECOND_READING in text_of("#page-side"))
    assert "station" in text_of("#page-side") and "test-model" in text_of("#page-side")
    assert not present("#page-boxes .box")  # the vision server gives no positions
    wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#page-jobs tbody tr")) == 2)
    _screenshot(browser, f"{prefix}_page_view_after_force.png")

    errors = [
        entry
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and entry.get("source") != "network"
    ]
    assert errors == []


@pytest.fixture
def flask_admin(engine: Engine, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    from flask import Flask
    from werkzeug.serving import make_server

    from manga_page_analysis.web.flask import admin_blueprint

    storage_root = tmp_path / "storage"
    host = Flask(__name__)
    blueprint = admin_blueprint(engine, token=TOKEN, storage=LocalStorage(storage_root))
    host.register_blueprint(blueprint, url_prefix="/admin/analysis")
    server = make_server("127.0.0.1", 0, host, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="admin-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/admin/analysis/", storage_root
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def test_flask_admin_page_shows_jobs_pages_and_boxes(
    engine: Engine,
    flask_admin: tuple[str, Path],
    browser: Any,  # noqa: F811
    ocr: OcrAnalyzer,
    vision_server: Any,
) -> None:
    page_url, storage_root = flask_admin
    exercise_the_views(browser, page_url, engine, storage_root, ocr, vision_server, "flask")
