"""The admin page under Django in a real headless browser: with no
`ADMIN_TOKEN`, a logged-out visitor is told to sign in as staff and sent to
`LOGIN_URL` with `next`; once signed in as staff, the page shows the queue and
goes live on the session alone. Screenshots go to `tests/artifacts/`."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import Engine

from manga_page_analysis.queue import AnalyzePage, enqueue
from tests.helpers import make_page, wait_until
from tests.integration.test_admin_page import DOM_TIMEOUT, _screenshot, browser  # noqa: F401
from tests.integration.web_django.test_django_events_http import serve_django

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("django_db")]

MOUNT = "/admin/analysis/"


def test_logged_out_visitor_is_sent_to_the_staff_login_and_back(
    browser: Any,  # noqa: F811
    django_engine: Engine,
) -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from manga_page_analysis.web.django.apps import page_analysis_app

    with django_engine.begin() as conn:
        enqueue(conn, AnalyzePage(page_id=make_page(conn, manga_title="Frieren")))
    wait = WebDriverWait(browser, DOM_TIMEOUT)

    def shown(element_id: str) -> bool:
        return bool(browser.find_element(By.ID, element_id).is_displayed())

    # With a token configured, the sign-in offers both ways in.
    with serve_django(ADMIN_TOKEN="browser-token") as (host, port):
        browser.get(f"http://{host}:{port}{MOUNT}")
        wait.until(lambda _: shown("signin"))
        assert shown("staff-signin") and shown("token-signin")
        assert browser.find_element(By.ID, "signin-title").text == "Sign in"
        _screenshot(browser, "django_admin_page_signin_with_token.png")

    with serve_django(EVENT_KEEPALIVE_SECONDS=0.5) as (host, port):  # no ADMIN_TOKEN
        page_url = f"http://{host}:{port}{MOUNT}"
        browser.get(page_url)
        wait.until(lambda _: shown("signin"))
        assert shown("staff-signin") and not shown("token-signin") and not shown("dashboard")
        assert browser.find_element(By.ID, "signin-title").text == "Sign in as staff"
        link = browser.find_element(By.ID, "staff-signin-link")
        assert link.text == "Sign in as staff"
        _screenshot(browser, "django_admin_page_signin.png")

        link.click()
        wait.until(lambda _: urlsplit(browser.current_url).path == "/accounts/login/")
        assert parse_qs(urlsplit(browser.current_url).query) == {"next": [MOUNT]}

        # Signed in as staff (a session made by Django's test client, handed
        # to the browser), the page needs no token and goes live.
        staff = User.objects.create_user("editor", password="pw", is_staff=True)
        session = Client()
        session.force_login(staff)
        browser.add_cookie({"name": "sessionid", "value": session.cookies["sessionid"].value})
        browser.get(page_url)
        wait.until(lambda _: shown("dashboard"))
        wait.until(
            lambda _: (
                browser.find_element(By.ID, "live-status").get_attribute("data-state") == "live"
            )
        )
        pending = browser.find_element(By.CSS_SELECTOR, '[data-testid="total-pending"]')
        assert pending.text == "1" and not shown("sign-out")  # no token to forget
        _screenshot(browser, "django_admin_page_staff.png")

        browser.quit()
        streams = page_analysis_app().event_streams
        wait_until(lambda: streams.open_streams == 0, timeout=DOM_TIMEOUT)
