"""The admin page's details, in a real headless Chromium at 1280 px and at 420 px
(a phone): a page whose analysis failed shows its error where its text would be;
a page never analysed offers "Analyse", one analysed "Analyse again"; every time
carries its zone and the page says which zone it shows; a job dead after one
permanent error says why it stopped early; and no view scrolls sideways, the
job lookup's "Open job" in full view. Screenshots go to `tests/artifacts/`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from manga_page_analysis.models import Chapter, Manga, Page, PageAnalysis
from tests.helpers import insert_raw_job
from tests.integration.test_admin_page import (
    DOM_TIMEOUT,
    _screenshot,
    headless_chromium,
    serving_admin,
)

pytestmark = pytest.mark.slow

TOKEN = "details-browser-token"
VIEWER_ZONE = "Asia/Tokyo"
"""The browser's time zone (UTC+9 all year): not the server's, not UTC."""
FAILURE = "image does not decode: cannot identify image file <BytesIO> (not a PNG, JPEG or WebP)"
PERMANENT = "ImageError: the page image is 0 bytes long; no retry can fix it"
WIDTHS = (1280, 420)


@pytest.fixture
def tokyo_browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium whose time zone is `VIEWER_ZONE`."""
    with headless_chromium(tmp_path / "chromium-profile", zone=VIEWER_ZONE) as driver:
        yield driver


@pytest.fixture
def admin_url(engine: Engine) -> Iterator[str]:
    with serving_admin(engine, token=TOKEN) as (url, _):
        yield url


def _seed(engine: Engine) -> dict[str, uuid.UUID]:
    """One chapter: page 1 failed (one permanent error, its job dead after 1 of 5
    attempts), page 2 never requested, page 3 analysed."""
    with engine.begin() as conn:
        manga_id = conn.execute(
            insert(Manga).values(title="Yotsuba&!").returning(Manga.id)
        ).scalar_one()
        chapter_id = conn.execute(
            insert(Chapter)
            .values(manga_id=manga_id, number=Decimal(1), title="")
            .returning(Chapter.id)
        ).scalar_one()
        failed, never, analysed = (
            conn.execute(
                insert(Page)
                .values(chapter_id=chapter_id, number=number, storage_key=f"y/{number}.png")
                .returning(Page.id)
            ).scalar_one()
            for number in (1, 2, 3)
        )
        conn.execute(
            insert(PageAnalysis),
            [
                {"page_id": failed, "status": "failed", "error": FAILURE, "ocr_text": None},
                {"page_id": analysed, "status": "done", "error": None, "ocr_text": "よつばと！"},
            ],
        )
        dead_early = insert_raw_job(
            conn,
            {"kind": "analyze_page", "page_id": str(failed), "force": False},
            state="dead",
            attempts=1,
            max_attempts=5,
            last_error=PERMANENT,
        )
    return {
        "manga": manga_id,
        "chapter": chapter_id,
        "failed": failed,
        "never": never,
        "analysed": analysed,
        "dead_early": dead_early,
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_admin_page_details_at_desktop_and_phone_widths(
    engine: Engine, admin_url: str, tokyo_browser: Any, width: int
) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser = tokyo_browser
    seeded = _seed(engine)
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    wait = WebDriverWait(browser, DOM_TIMEOUT, ignored_exceptions=(StaleElementReferenceException,))

    def text_of(css: str) -> str:
        return str(
            browser.execute_script(
                "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css
            )
        )

    def open_view(hash_: str, section: str) -> None:
        browser.execute_script("location.hash = arguments[0]", hash_)
        wait.until(
            lambda _: browser.find_element(By.ID, section).get_attribute("aria-busy") == "false"
        )

    def fits(name: str) -> None:
        """No sideways scroll, the job lookup's button in full view; a screenshot."""
        sizes = browser.execute_script(
            "const b = document.querySelector('#lookup button').getBoundingClientRect();"
            "return {page: document.documentElement.scrollWidth, view: window.innerWidth,"
            " button: [b.left, b.right]};"
        )
        assert sizes["view"] == width
        assert sizes["page"] <= sizes["view"], (name, sizes)
        left, right = sizes["button"]
        assert left >= 0 and right <= sizes["view"], (name, sizes)
        _screenshot(browser, f"details_{width}_{name}.png")

    browser.get(admin_url)
    wait.until(lambda _: browser.find_element(By.ID, "signin").is_displayed())
    browser.find_element(By.ID, "token-input").send_keys(TOKEN + "\n")
    wait.until(lambda _: browser.find_element(By.ID, "dashboard").is_displayed())
    wait.until(lambda _: str(seeded["dead_early"]) in str(browser.page_source))
    # Which zone the times are in, said once.
    assert text_of("#time-zone") == f"Times in your time zone: {VIEWER_ZONE} (UTC+9)"
    fits("overview")

    open_view("#/jobs", "view-jobs")
    fits("jobs")

    # The job dead after one permanent error says why it stopped early; its times carry the zone.
    open_view(f"#/job/{seeded['dead_early']}", "view-job")
    assert text_of('#job-body dd[data-field="attempts"]') == (
        f"1 of 5 — stopped early: permanent error: {PERMANENT}"
    )
    for name in ("created", "scheduled"):
        assert text_of(f'#job-body dd[data-field="{name}"]').startswith("20"), name
        assert " UTC+9" in text_of(f'#job-body dd[data-field="{name}"]'), name
    fits("job_dead_early")

    open_view("#/library", "view-library")
    fits("library")
    open_view(f"#/manga/{seeded['manga']}", "view-manga")
    fits("manga")
    open_view(f"#/chapter/{seeded['chapter']}", "view-chapter")
    fits("chapter")

    # The failed page: its error where its text would be, no "No text found".
    open_view(f"#/page/{seeded['failed']}", "view-page")
    side = text_of("#page-side")
    assert "No text: the analysis failed" in side and "Text, in reading order" not in side
    assert text_of("#page-error") == FAILURE
    assert "No text found" not in side
    assert text_of("#analyse-again") == "Analyse again"
    fits("page_failed")

    # Never analysed: "Analyse"; analysed: "Analyse again".
    open_view(f"#/page/{seeded['never']}", "view-page")
    wait.until(lambda _: text_of("#analyse-again") == "Analyse")
    assert "Not analysed yet." in text_of("#page-side")
    fits("page_never")
    open_view(f"#/page/{seeded['analysed']}", "view-page")
    wait.until(lambda _: text_of("#analyse-again") == "Analyse again")
    assert "よつばと！" in text_of("#page-side")
    fits("page_analysed")

    errors = [
        entry
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and entry.get("source") != "network"
    ]
    assert errors == []
