"""The admin API and page as Django views (routes in `app.web.django.urls`).

Same routes, bodies and errors as the Flask blueprint: the work is done by
`app.admin` on the app's SQLAlchemy engine (built from Django's `DATABASES`);
these views only authenticate, parse input and map errors to JSON.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Final

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware, get_token
from django.views.decorators.csrf import csrf_exempt
from sqlalchemy.exc import OperationalError

from app import admin
from app.admin import AdminError, BadRequest
from app.web.django.apps import page_analysis_app
from app.web.django.auth import Access, check_access
from app.web.events import TooManyStreams
from app.web.page import admin_page_html

logger = logging.getLogger(__name__)

View = Callable[..., HttpResponse]

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_BODY_BYTES: Final = admin.MAX_BODY_BYTES
"""The largest request body read (`{"force": true}` needs a dozen bytes)."""
ALL_METHODS: Final = ("GET", "POST", "PUT", "PATCH", "DELETE")


def json_response(body: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(
        json.dumps(body, ensure_ascii=False), status=status, content_type="application/json"
    )


def error_response(status: int, code: str, message: str, **headers: str) -> HttpResponse:
    """DESIGN's error body: `{"error": {"code": ..., "message": ...}}`."""
    response = json_response({"error": {"code": code, "message": message}}, status=status)
    response["Cache-Control"] = "no-store"
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, run on demand: the views are csrf_exempt so
    that bearer-token requests skip it, and session requests must not."""

    def _reject(self, request: HttpRequest, reason: str) -> HttpResponse:
        return error_response(403, "csrf_failed", f"CSRF check failed: {reason}")


def _csrf_refusal(request: HttpRequest) -> HttpResponse | None:
    def unused(_request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    check = _CsrfCheck(unused)
    check.process_request(request)
    return check.process_view(request, unused, (), {})


def admin_api(**views: View) -> View:
    """One API route: auth first (bearer token or staff session), then the
    view for the method, a CSRF check for a session's unsafe methods, and a
    JSON error for everything that goes wrong, a database outage included
    (503): never an HTML 500. HEAD is served as GET."""
    allowed = ", ".join(sorted(views))

    @csrf_exempt  # checked below for sessions; a bearer token involves no cookie
    def dispatch(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        access = check_access(request, page_analysis_app().settings.admin_token)
        if access.refused:
            return error_response(access.status, access.code, access.message, **access.headers())
        method = "GET" if request.method == "HEAD" else str(request.method)
        view = views.get(method)
        if view is None:
            return error_response(405, "method_not_allowed", f"use {allowed}", Allow=allowed)
        try:
            if method not in SAFE_METHODS:
                _read_body(request)
                if access is Access.SESSION:
                    refusal = _csrf_refusal(request)
                    if refusal is not None:
                        return refusal
            return view(request, *args, **kwargs)
        except AdminError as exc:
            return error_response(exc.status, exc.code, str(exc))
        except OperationalError as exc:
            logger.warning(
                "admin API %s %s: database unavailable: %s", request.method, request.path, exc.orig
            )
            return error_response(503, "unavailable", "the database cannot be reached; try again")

    return dispatch


def _read_body(request: HttpRequest) -> bytes:
    """The body, read once and kept: the CSRF check may parse it as a form
    afterwards, and the view reads it again. Over `MAX_BODY_BYTES`: `BadRequest`."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes")
    return request.body


def _force_from_body(request: HttpRequest) -> bool:
    """`force` from an optional JSON body `{"force": bool}`; `BadRequest` for anything else."""
    return admin.parse_force_body(_read_body(request))


def _stats(request: HttpRequest) -> HttpResponse:
    with page_analysis_app().admin_engine().connect() as conn:
        return json_response(admin.queue_stats(conn))


def _jobs(request: HttpRequest) -> HttpResponse:
    query = request.GET
    limit = admin.parse_limit(query.get("limit"))
    with page_analysis_app().admin_engine().connect() as conn:
        return json_response(
            admin.list_jobs(
                conn,
                state=query.get("state") or None,
                kind=query.get("kind") or None,
                limit=limit,
                cursor=query.get("cursor") or None,
            )
        )


def _retry(request: HttpRequest, job_id: str) -> HttpResponse:
    parsed = admin.parse_uuid(job_id, "job id")
    with page_analysis_app().admin_engine().begin() as conn:
        body = admin.retry_job(conn, parsed)
    logger.info("admin API: job %s retried (%s)", parsed, _who(request))
    return json_response(body)


def _get_analysis(request: HttpRequest, page_id: str) -> HttpResponse:
    parsed = admin.parse_uuid(page_id, "page id")
    with page_analysis_app().admin_engine().connect() as conn:
        return json_response(admin.get_page_analysis(conn, parsed))


def _post_analysis(request: HttpRequest, page_id: str) -> HttpResponse:
    parsed = admin.parse_uuid(page_id, "page id")
    force = _force_from_body(request)
    with page_analysis_app().admin_engine().begin() as conn:
        return json_response(admin.request_page_analysis(conn, parsed, force=force), status=202)


def _events(request: HttpRequest) -> HttpResponse:
    try:
        stream = page_analysis_app().event_streams.open()
    except TooManyStreams as exc:
        return error_response(exc.status, exc.code, str(exc), Retry_After="5")
    # Django closes the stream (its LISTEN connection and its slot) when the
    # response is closed, which the server does when the client goes away.
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    return error_response(404, "not_found", f"no admin API route {request.path}")


stats = admin_api(GET=_stats)
jobs = admin_api(GET=_jobs)
retry = admin_api(POST=_retry)
page_analysis = admin_api(GET=_get_analysis, POST=_post_analysis)
events = admin_api(GET=_events)
unknown = admin_api(**dict.fromkeys(ALL_METHODS, _unknown))


def admin_page(request: HttpRequest) -> HttpResponse:
    """The admin page. It holds no queue data (it fetches `api/...`), so it
    is served without auth, as under Flask."""
    if request.method not in ("GET", "HEAD"):
        return error_response(405, "method_not_allowed", "use GET", Allow="GET")
    # A staff user's page sends the CSRF cookie's token back on its POSTs
    # (header X-CSRFToken); the cookie is set when CsrfViewMiddleware runs.
    get_token(request)
    response = HttpResponse(admin_page_html(), content_type="text/html; charset=utf-8")
    # The page holds no data, but it must not be framed by another site.
    response["X-Frame-Options"] = "DENY"
    response["Cache-Control"] = "no-cache"
    return response


admin_page = csrf_exempt(admin_page)  # it accepts no writes; a POST gets a JSON 405


def _who(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_staff:
        return f"staff user {user.get_username()}"
    return "bearer token"
