"""`manga_page_analysis.web.api` without a framework and without a database: what the handler
answers before any query runs (auth outcome, 405, body limit, origin check),
and the page's sign-in hints."""

from __future__ import annotations

import json

import pytest

from manga_page_analysis.config import Settings
from manga_page_analysis.storage import LocalStorage
from manga_page_analysis.web.api import (
    ROUTES,
    AdminApi,
    ApiRequest,
    ApiResponse,
    Route,
    page_response,
)
from manga_page_analysis.web.auth import (
    CROSS_SITE_REFUSAL,
    TOKEN_ACCESS,
    Access,
    AdminAuth,
    Refusal,
)
from manga_page_analysis.web.event_stream import EventStreams
from manga_page_analysis.web.page import admin_page_html

ROUTE = {route.name: route for route in ROUTES}


def _no_engine():  # type: ignore[no-untyped-def]
    raise AssertionError("the handler must answer before touching the database")


@pytest.fixture
def api() -> AdminApi:
    return AdminApi(
        _no_engine,
        EventStreams(lambda: {"dbname": "never_connected"}),
        Settings(_env_file=None),  # type: ignore[call-arg]
    )


def _error(response: ApiResponse, status: int, code: str) -> dict[str, str]:
    assert response.status == status and response.content_type == "application/json"
    assert isinstance(response.content, str)
    body = json.loads(response.content)
    assert body["error"]["code"] == code and body["error"]["message"]
    assert response.headers["Cache-Control"] == "no-store"
    return body["error"]


def _request(method: str = "GET", access: Access = TOKEN_ACCESS, **fields: object) -> ApiRequest:
    return ApiRequest(method=method, path="/admin/api/x", access=access, **fields)  # type: ignore[arg-type]


def test_a_refusal_is_answered_for_a_method_the_route_takes(api: AdminApi) -> None:
    refusal = Refusal(401, "unauthorized", "send a token", "Bearer")
    response = api.handle(ROUTE["retry"], _request("POST", Access(refusal)))
    _error(response, 401, "unauthorized")
    assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("method", ["OPTIONS", "DELETE"])
def test_a_wrong_method_is_a_405_with_the_routes_allow_even_without_a_token(
    api: AdminApi, method: str
) -> None:
    # Which methods a route takes is public (the docs list them): no need to log in first.
    refusal = Refusal(401, "unauthorized", "send a token", "Bearer")
    response = api.handle(ROUTE["stats"], _request(method, Access(refusal)))
    _error(response, 405, "method_not_allowed")
    assert response.headers["Allow"] == "GET"


def test_a_wrong_method_is_a_405_naming_the_allowed_ones(api: AdminApi) -> None:
    response = api.handle(ROUTE["page-analysis"], _request("PUT"))
    _error(response, 405, "method_not_allowed")
    assert response.headers["Allow"] == "GET, POST"


def test_head_is_served_as_get_and_unknown_routes_are_404s(api: AdminApi) -> None:
    for method in ("HEAD", "GET", "POST", "DELETE"):
        _error(api.handle(ROUTE["unknown"], _request(method)), 404, "not_found")


@pytest.mark.parametrize("declared", ["70000", "-1", "12abc", "1e3"])
def test_a_body_declared_too_large_or_malformed_is_a_400_before_it_is_read(
    api: AdminApi, declared: str
) -> None:
    def read_body() -> bytes:
        raise AssertionError("the body must not be read")

    request = _request(
        "POST",
        Access(ambient=True),
        params={"page_id": "not-read"},
        read_body=read_body,
        content_length=declared,
        origin_check=lambda: CROSS_SITE_REFUSAL,
    )
    _error(api.handle(ROUTE["page-analysis"], request), 400, "bad_request")


def test_only_session_borne_writes_get_the_origin_check(api: AdminApi) -> None:
    checked: list[str] = []

    def origin_check() -> Refusal:
        checked.append("checked")
        return CROSS_SITE_REFUSAL

    session_post = _request("POST", Access(ambient=True), origin_check=origin_check)
    _error(api.handle(ROUTE["retry"], session_post), 403, "cross_site")
    session_get = _request("GET", Access(ambient=True), origin_check=origin_check)
    _error(api.handle(ROUTE["unknown"], session_get), 404, "not_found")
    token_post = _request("POST", TOKEN_ACCESS, params={"job_id": "x"}, origin_check=origin_check)
    _error(api.handle(ROUTE["retry"], token_post), 400, "bad_request")  # past the check
    assert checked == ["checked"]


def test_every_route_pattern_is_below_api_and_the_catch_all_comes_last() -> None:
    assert all(route.pattern.startswith("api/") for route in ROUTES)
    assert ROUTES[-1] == Route("unknown", "api/<path:rest>", ROUTES[-1].views)
    assert len({route.name for route in ROUTES}) == len(ROUTES)


def test_admin_auth_outcomes() -> None:
    both = AdminAuth(token="t0k", authorize=lambda request: request == "admin")
    assert both.check("Bearer t0k", None) is TOKEN_ACCESS
    assert both.check(None, "admin").ambient
    refused = both.check(None, "someone").refusal
    assert refused is not None and (refused.status, refused.www_authenticate) == (403, "Bearer")
    wrong = both.check("Bearer nope", "someone").refusal
    assert wrong is not None and wrong.status == 401
    authorize_only = AdminAuth(authorize=lambda request: False)
    token_sent = authorize_only.check("Bearer t0k", None).refusal
    assert token_sent is not None and (token_sent.status, token_sent.www_authenticate) == (
        403,
        None,
    )
    token_only = AdminAuth(token="t0k")
    missing = token_only.check(None, None).refusal
    assert missing is not None and (missing.status, missing.www_authenticate) == (401, "Bearer")


def test_the_page_is_get_only() -> None:
    assert page_response("GET", "<html>").status == 200
    _error(page_response("POST", "<html>"), 405, "method_not_allowed")


def test_the_page_carries_the_sign_in_hints_escaped() -> None:
    plain = admin_page_html()
    assert '<meta name="page-analysis' not in plain
    hinted = admin_page_html(login_url='/login/?next=/a/&x="<b>', token_accepted=False)
    assert (
        '<meta name="page-analysis-login-url" content="/login/?next=/a/&amp;x=&quot;&lt;b&gt;">'
        in hinted
    )
    assert '<meta name="page-analysis-token" content="none">' in hinted
    assert hinted.index("page-analysis-token") < hinted.index("</head>")


def test_page_images_come_from_the_settings_given_when_built(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The adapter reads the settings once, when it builds the API; a request reads none.
    monkeypatch.setenv("STORAGE_ROOT", str(tmp_path / "not_this_one"))
    given = Settings(_env_file=None, storage_root=tmp_path, max_image_bytes=1234)  # type: ignore[call-arg]
    api = AdminApi(_no_engine, EventStreams(lambda: {"dbname": "never_connected"}), given)
    storage, cap = api.image_store()
    assert isinstance(storage, LocalStorage) and storage.root == tmp_path and cap == 1234
