"""The admin routes as Django views, through Django's test client, on real
Postgres: the same bodies and errors as under Flask, Django's auth (staff
session or bearer token) and CSRF for session POSTs."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import Engine

from manga_page_analysis.queue import AnalyzePage, enqueue
from tests.helpers import count, insert_raw_job, job_row, make_page
from tests.integration.web_contract import (
    BAD_ANALYSIS_BODIES,
    BAD_LISTING_QUERIES,
    check_error,
    insert_done_analysis,
    nasty_requests,
)
from tests.integration.web_django.conftest import ADMIN_TOKEN

pytestmark = pytest.mark.usefixtures("django_db")

PREFIX = "/admin/analysis"
AUTH = {"HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def client() -> Any:
    from django.test import Client

    return Client()


def _user(username: str, *, staff: bool) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_user(username, password="pw", is_staff=staff)


def _error(response: Any, status: int, code: str | None = None) -> dict[str, str]:
    content_type = response["Content-Type"]
    body = response.json() if content_type == "application/json" else response.content
    return check_error(response.status_code, content_type, body, status, code)


API_ROUTES = [
    ("get", "api/stats"),
    ("get", "api/jobs"),
    ("post", f"api/jobs/{uuid.UUID(int=1)}/retry"),
    ("get", f"api/pages/{uuid.UUID(int=2)}/analysis"),
    ("post", f"api/pages/{uuid.UUID(int=3)}/analysis"),
    ("get", "api/events"),
    ("get", "api/nope"),
]


@pytest.mark.parametrize(("method", "route"), API_ROUTES)
def test_every_api_route_refuses_without_credentials(client: Any, method: str, route: str) -> None:
    url = f"{PREFIX}/{route}"
    missing = getattr(client, method)(url)
    _error(missing, 401, "unauthorized")
    assert missing["WWW-Authenticate"] == "Bearer"
    for header in (f"Bearer {ADMIN_TOKEN}x", "Bearer ", f"Basic {ADMIN_TOKEN}", ADMIN_TOKEN):
        wrong = getattr(client, method)(url, HTTP_AUTHORIZATION=header)
        _error(wrong, 401, "unauthorized")
        assert wrong["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "route"), API_ROUTES)
def test_a_logged_in_user_who_is_not_staff_gets_403(client: Any, method: str, route: str) -> None:
    client.force_login(_user("reader", staff=False))
    _error(getattr(client, method)(f"{PREFIX}/{route}"), 403, "forbidden")


def test_a_staff_user_gets_in_without_a_token(client: Any) -> None:
    client.force_login(_user("editor", staff=True))
    response = client.get(f"{PREFIX}/api/stats")
    assert response.status_code == 200 and response.json()["oldest_pending_age_seconds"] is None
    # A wrong token from a staff user's browser still gets in through the session.
    assert client.get(f"{PREFIX}/api/stats", HTTP_AUTHORIZATION="Bearer wrong").status_code == 200


def test_an_inactive_staff_user_is_not_let_in(client: Any) -> None:
    from django.contrib.auth.models import User

    user = _user("gone", staff=True)
    User.objects.filter(pk=user.pk).update(is_active=False)
    client.force_login(user)  # the session survives; the view must still refuse
    assert client.get(f"{PREFIX}/api/stats").status_code in (401, 403)


def test_staff_session_posts_are_csrf_checked_and_bearer_posts_are_not(
    django_engine: Engine,
) -> None:
    from django.test import Client

    with django_engine.begin() as conn:
        page_id = make_page(conn)
    url = f"{PREFIX}/api/pages/{page_id}/analysis"

    session = Client(enforce_csrf_checks=True)
    session.force_login(_user("editor", staff=True))
    _error(session.post(url, {}, content_type="application/json"), 403, "csrf_failed")
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 0
    assert session.get(f"{PREFIX}/api/stats").status_code == 200  # safe methods need none

    page = session.get(f"{PREFIX}/")  # the page hands out the CSRF cookie
    csrf = page.cookies["csrftoken"].value
    accepted = session.post(url, {}, content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert accepted.status_code == 202

    bearer = Client(enforce_csrf_checks=True)  # no cookie, no CSRF token
    again = bearer.post(url, content_type="application/json", data={"force": True}, **AUTH)
    assert again.status_code == 202, again.content
    assert again.json() == accepted.json()


def test_the_page_is_served_without_auth(client: Any) -> None:
    response = client.get(f"{PREFIX}/")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    assert b"<html" in response.content.lower()
    assert response["X-Frame-Options"] == "DENY"
    _error(client.post(f"{PREFIX}/"), 405, "method_not_allowed")


@contextmanager
def _page_analysis(**setting: Any) -> Iterator[None]:
    """`PAGE_ANALYSIS` overridden (and re-read) for the block."""
    from django.test import override_settings

    from manga_page_analysis.web.django.apps import page_analysis_app

    try:
        with override_settings(PAGE_ANALYSIS=setting):
            page_analysis_app().reload()
            yield
    finally:
        page_analysis_app().reload()


def _meta(html: str, name: str) -> str | None:
    match = re.search(rf'<meta name="{re.escape(name)}" content="([^"]*)">', html)
    return None if match is None else match.group(1)


def test_without_a_token_the_page_offers_the_staff_login_with_next(client: Any) -> None:
    from django.urls import reverse

    with _page_analysis():  # no ADMIN_TOKEN: only staff sessions get in
        page = client.get(f"{PREFIX}/?tab=dead").content.decode()
        api = client.get(f"{PREFIX}/api/stats")
    login = _meta(page, "page-analysis-login-url")
    assert login is not None
    # LOGIN_URL is the URL name "login", resolved; `next` comes back to the page.
    url = urlsplit(html.unescape(login))
    assert url.path == reverse("login") == "/accounts/login/"
    assert parse_qs(url.query) == {"next": [f"{PREFIX}/?tab=dead"]}
    assert _meta(page, "page-analysis-token") == "none"  # so the page asks for no token
    refused = _error(api, 401, "unauthorized")
    assert "staff" in refused["message"]


def test_with_a_token_the_page_offers_both_ways_in(client: Any) -> None:
    page = client.get(f"{PREFIX}/").content.decode()
    assert _meta(page, "page-analysis-login-url") == "/accounts/login/?next=/admin/analysis/"
    assert _meta(page, "page-analysis-token") is None


def test_stats_and_listing_routes(client: Any, django_engine: Engine) -> None:
    with django_engine.begin() as conn:
        page_id = make_page(conn, manga_title="Akira", chapter_number="3", page_number=7)
        job_id = enqueue(conn, AnalyzePage(page_id=page_id))
        for _ in range(3):
            insert_raw_job(
                conn,
                {"kind": "analyze_page", "page_id": str(uuid.uuid4())},
                state="dead",
                last_error="boom",
            )
    stats = client.get(f"{PREFIX}/api/stats", **AUTH)
    assert stats.status_code == 200
    assert stats.json()["jobs"]["analyze_page"] == {"pending": 1, "dead": 3} | {
        key: value
        for key, value in stats.json()["jobs"]["analyze_page"].items()
        if key not in ("pending", "dead")
    }
    assert stats.json()["oldest_pending_age_seconds"] >= 0

    listing = client.get(f"{PREFIX}/api/jobs", {"state": "pending"}, **AUTH).json()
    assert [job["id"] for job in listing["jobs"]] == [str(job_id)]
    assert listing["jobs"][0]["label"] == "Akira ch. 3 p. 7"
    assert listing["next_cursor"] is None

    first = client.get(
        f"{PREFIX}/api/jobs", {"state": "dead", "kind": "analyze_page", "limit": 2}, **AUTH
    ).json()
    assert len(first["jobs"]) == 2 and first["next_cursor"]
    assert {job["last_error"] for job in first["jobs"]} == {"boom"}
    rest = client.get(
        f"{PREFIX}/api/jobs", {"state": "dead", "cursor": first["next_cursor"]}, **AUTH
    ).json()
    assert len(rest["jobs"]) == 1 and rest["next_cursor"] is None
    seen = {job["id"] for job in first["jobs"] + rest["jobs"]}
    assert len(seen) == 3


@pytest.mark.parametrize("query", BAD_LISTING_QUERIES)
def test_bad_listing_input_is_a_400(client: Any, query: str) -> None:
    _error(client.get(f"{PREFIX}/api/jobs?{query}", **AUTH), 400, "bad_request")


def test_retry_route(client: Any, django_engine: Engine) -> None:
    with django_engine.begin() as conn:
        dead = insert_raw_job(
            conn, AnalyzePage(page_id=uuid.uuid4()).to_json(), state="dead", attempts=5
        )
        pending = enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
    ok = client.post(f"{PREFIX}/api/jobs/{dead}/retry", **AUTH)
    assert ok.status_code == 200 and ok.json() == {"id": str(dead), "state": "pending"}
    with django_engine.connect() as conn:
        row = job_row(conn, dead)
    assert row.state == "pending" and row.attempts == 0  # committed
    _error(client.post(f"{PREFIX}/api/jobs/{dead}/retry", **AUTH), 409, "conflict")
    _error(client.post(f"{PREFIX}/api/jobs/{pending}/retry", **AUTH), 409, "conflict")
    _error(client.post(f"{PREFIX}/api/jobs/{uuid.uuid4()}/retry", **AUTH), 404, "not_found")
    _error(client.post(f"{PREFIX}/api/jobs/not-a-uuid/retry", **AUTH), 400, "bad_request")
    wrong_method = client.get(f"{PREFIX}/api/jobs/{dead}/retry", **AUTH)
    _error(wrong_method, 405, "method_not_allowed")
    assert wrong_method["Allow"] == "POST"


def test_retry_clash_is_a_409_that_changes_nothing(client: Any, django_engine: Engine) -> None:
    page_id = uuid.uuid4()
    with django_engine.begin() as conn:
        dead = insert_raw_job(conn, AnalyzePage(page_id=page_id).to_json(), state="dead")
        enqueue(conn, AnalyzePage(page_id=page_id))
    _error(client.post(f"{PREFIX}/api/jobs/{dead}/retry", **AUTH), 409, "conflict")
    with django_engine.connect() as conn:
        assert job_row(conn, dead).state == "dead"


def test_page_analysis_routes(client: Any, django_engine: Engine) -> None:
    with django_engine.begin() as conn:
        page_id = make_page(conn)
        insert_done_analysis(conn, page_id)
        bare_page = make_page(conn, page_number=2)
    got = client.get(f"{PREFIX}/api/pages/{page_id}/analysis", **AUTH)
    assert got.status_code == 200
    body = got.json()
    assert body["nsfw"] == {"rating": "safe", "score": 0.1} and body["ocr_text"] == "テキスト"
    assert body["page_id"] == str(page_id) and body["status"] == "done"
    _error(client.get(f"{PREFIX}/api/pages/{bare_page}/analysis", **AUTH), 404, "not_found")
    _error(client.get(f"{PREFIX}/api/pages/xyz/analysis", **AUTH), 400, "bad_request")

    posted = client.post(
        f"{PREFIX}/api/pages/{bare_page}/analysis", b"", content_type="application/json", **AUTH
    )
    assert posted.status_code == 202
    job_id = uuid.UUID(posted.json()["job_id"])
    forced = client.post(
        f"{PREFIX}/api/pages/{bare_page}/analysis",
        data={"force": True},
        content_type="application/json",
        **AUTH,
    )
    assert forced.status_code == 202 and forced.json() == {"job_id": str(job_id)}
    with django_engine.connect() as conn:
        assert job_row(conn, job_id).payload["force"] is True
    missing = f"{PREFIX}/api/pages/{uuid.uuid4()}/analysis"
    _error(client.post(missing, b"", content_type="application/json", **AUTH), 404)
    _error(client.delete(f"{PREFIX}/api/pages/{page_id}/analysis", **AUTH), 405)


@pytest.mark.parametrize("body", BAD_ANALYSIS_BODIES)
def test_bad_analysis_request_bodies_are_400s(
    client: Any, django_engine: Engine, body: bytes
) -> None:
    with django_engine.begin() as conn:
        page_id = make_page(conn)
    response = client.post(
        f"{PREFIX}/api/pages/{page_id}/analysis",
        data=body,
        content_type="application/json",
        **AUTH,
    )
    _error(response, 400, "bad_request")
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_unknown_api_routes_are_json_404s(client: Any) -> None:
    _error(client.get(f"{PREFIX}/api/nope", **AUTH), 404, "not_found")
    _error(client.get(f"{PREFIX}/api/", **AUTH), 404, "not_found")
    _error(client.put(f"{PREFIX}/api/stats", **AUTH), 405, "method_not_allowed")


def test_options_is_a_json_405_with_the_routes_allow_even_without_a_token(client: Any) -> None:
    response = client.options(f"{PREFIX}/api/stats")
    _error(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET"


def test_a_404_names_a_bounded_part_of_the_path(client: Any) -> None:
    response = client.get(f"{PREFIX}/api/{'a' * 60_000}", **AUTH)
    message = _error(response, 404, "not_found")["message"]
    assert len(response.content) < 400 and "…[truncated]" in message


def test_an_unreachable_database_is_a_json_503(client: Any) -> None:
    with _page_analysis(ADMIN_TOKEN=ADMIN_TOKEN, DATABASE_ALIAS="unreachable"):
        _error(client.get(f"{PREFIX}/api/stats", **AUTH), 503, "unavailable")
        _error(client.post(f"{PREFIX}/api/jobs/{uuid.uuid4()}/retry", **AUTH), 503)
        events = client.get(f"{PREFIX}/api/events", **AUTH)
        _error(events, 503, "unavailable")  # not a 200 that then says nothing
        assert events["Retry-After"] == "5"
    assert client.get(f"{PREFIX}/api/stats", **AUTH).status_code == 200


def test_nasty_input_anywhere_never_yields_a_500(client: Any, django_engine: Engine) -> None:
    with django_engine.begin() as conn:
        make_page(conn)
    for method, url, value in nasty_requests(PREFIX):
        response = client.generic(method, url, data=value, content_type="application/json", **AUTH)
        assert response.status_code < 500, (method, url, response.content)
        if response.status_code >= 400:
            _error(response, response.status_code)
