"""The admin API and page as Django views: `manga_page_analysis.web.api` translated, with
Django's authentication (a staff session or the bearer token) and its CSRF
check for a session's writes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from django.apps import apps
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware, get_token
from django.views.decorators.csrf import csrf_exempt

from manga_page_analysis.web.api import (
    ApiRequest,
    ApiResponse,
    Route,
    internal_error_response,
    page_response,
    with_api_headers,
)
from manga_page_analysis.web.auth import (
    TOKEN_ACCESS,
    WRONG_TOKEN,
    Access,
    Refusal,
    bearer_token,
    token_matches,
)
from manga_page_analysis.web.django.apps import page_analysis_app
from manga_page_analysis.web.page import admin_page_html

logger = logging.getLogger(__name__)

NO_CREDENTIALS: Final = Refusal(
    401, "unauthorized", "log in as a staff user or send Authorization: Bearer <token>", "Bearer"
)


def api_view(route: Route) -> Callable[..., HttpResponseBase]:
    """The Django view of one `manga_page_analysis.web.api` route."""

    @csrf_exempt  # checked by the API layer for sessions; a bearer token involves no cookie
    def view(request: HttpRequest, **params: str) -> HttpResponseBase:
        app = page_analysis_app()
        try:
            # A session store that fails (its database down) is a JSON answer too.
            access = check_access(request, app.settings.admin_token)
        except Exception:
            logger.exception("admin API %s %s: access check failed", request.method, request.path)
            return _response(with_api_headers(internal_error_response()))
        api_request = ApiRequest(
            method=str(request.method),
            path=request.path,
            access=access,
            params=params,
            query={name: values[0] for name, values in request.GET.lists() if values},
            read_body=lambda: request.body,
            content_length=request.META.get("CONTENT_LENGTH"),
            origin_check=lambda: _csrf_refusal(request),
        )
        return _response(app.api.handle(route, api_request))

    return view


def check_access(request: HttpRequest, admin_token: str | None) -> Access:
    """The token first (in, with no CSRF check: no cookie is involved), then a
    logged-in active staff user (in, unsafe methods CSRF-checked; a wrong token
    from a staff user's browser still gets in this way). Any other logged-in
    user is a 403; anyone else a 401."""
    presented = bearer_token(request.headers.get("Authorization"))
    if token_matches(presented, admin_token):
        return TOKEN_ACCESS
    user = getattr(request, "user", None)  # absent without AuthenticationMiddleware
    if user is not None and user.is_authenticated:
        if user.is_active and user.is_staff:
            return Access(ambient=True, who=f"staff user {user.get_username()}")
        return Access(Refusal(403, "forbidden", "only staff users may use the admin API"))
    return Access(WRONG_TOKEN if presented is not None else NO_CREDENTIALS)


@csrf_exempt  # it accepts no writes; a POST gets a JSON 405
def admin_page(request: HttpRequest) -> HttpResponseBase:
    """The admin page (see `page_response`). A visitor the API refuses is
    offered Django's login page (`LOGIN_URL`, with `next` back here)."""
    # A staff user's page sends the CSRF cookie's token back on its POSTs
    # (header X-CSRFToken); the cookie is set when CsrfViewMiddleware runs.
    get_token(request)
    login_url = None  # without django.contrib.auth no one can sign in as staff
    if apps.is_installed("django.contrib.auth"):
        from django.contrib.auth.views import redirect_to_login

        login_url = str(redirect_to_login(request.get_full_path(), settings.LOGIN_URL)["Location"])
    html = admin_page_html(
        login_url=login_url, token_accepted=page_analysis_app().settings.admin_token is not None
    )
    return _response(page_response(str(request.method), html))


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, run on demand: the views are csrf_exempt so
    that bearer-token requests skip it, and session requests must not."""

    refusal: Refusal | None = None

    def _reject(self, request: HttpRequest, reason: str) -> HttpResponse:
        self.refusal = Refusal(403, "csrf_failed", f"CSRF check failed: {reason}")
        return HttpResponse(status=403)


def _csrf_refusal(request: HttpRequest) -> Refusal | None:
    # Read the body first: the check may parse it as a form, after which
    # Django refuses to hand out the raw body the view reads.
    request.body  # noqa: B018
    check = _CsrfCheck(lambda _request: HttpResponse())
    check.process_request(request)
    check.process_view(request, check.get_response, (), {})
    return check.refusal


def _response(answer: ApiResponse) -> HttpResponseBase:
    # Text and image bytes are answered whole; only the event stream streams.
    response = HttpResponse if isinstance(answer.content, str | bytes) else StreamingHttpResponse
    return response(
        answer.content,
        status=answer.status,
        content_type=answer.content_type,
        headers=answer.headers,
    )
