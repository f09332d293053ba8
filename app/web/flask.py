"""The admin API and page as a Flask blueprint.

    from app.web.flask import admin_blueprint
    app.register_blueprint(admin_blueprint(engine, token="s3cret"), url_prefix="/admin/analysis")

`engine` is a SQLAlchemy `Engine`, or a callable returning one (with
Flask-SQLAlchemy: `lambda: db.engine`, since `db.engine` needs an app
context). The blueprint borrows connections from it per request and never
disposes it. Every `api/` route is behind `AdminAuth`; the page at the mount
point holds no data and is served without auth. Every refusal and every bad
input is answered with `{"error": {"code", "message"}}` and its status,
404 and 405 inside `api/` included; a database that cannot be reached is a
503.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Final

from flask import Blueprint, Response, request
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from app import admin
from app.admin import AdminError, BadRequest
from app.db import connect_kwargs
from app.web.auth import CROSS_SITE_REFUSAL, AdminAuth, Authorize, Refusal, cross_site
from app.web.events import (
    DEFAULT_KEEPALIVE_SECONDS,
    DEFAULT_MAX_STREAMS,
    EventStreams,
    TooManyStreams,
)
from app.web.page import admin_page_html

logger = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = admin.MAX_BODY_BYTES
"""A JSON body larger than this is refused (400) before it is parsed."""

ALL_METHODS: Final = ["GET", "POST", "PUT", "PATCH", "DELETE"]
# Every api/ rule accepts every method and answers a wrong one itself: Flask
# routes before it knows the blueprint, so blueprint error handlers never see
# a routing 405 (or 404) and the host's HTML error page would answer instead.

View = Callable[..., Response]


def admin_blueprint(
    engine: Engine | Callable[[], Engine],
    *,
    token: str | None = None,
    authorize: Authorize | None = None,
    listen_url: str | None = None,
    name: str = "page_analysis_admin",
    max_event_streams: int = DEFAULT_MAX_STREAMS,
    keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS,
) -> Blueprint:
    """The admin blueprint. `token`: a bearer token; `authorize(flask.request) -> bool`:
    the host's own check; given both, either lets a request in; given neither,
    `ValueError` (it never serves openly).

    `max_event_streams` caps concurrent `api/events` streams of this blueprint
    (beyond it: 503); `keepalive_seconds` is the idle comment interval.
    `listen_url`: the direct connection the event streams LISTEN on (default:
    the engine's), for an engine that goes through PgBouncer in transaction mode.
    """
    auth = AdminAuth(token=token, authorize=authorize)
    get_engine: Callable[[], Engine] = engine if callable(engine) else (lambda: engine)
    streams = EventStreams(
        lambda: connect_kwargs(listen_url or get_engine()),
        max_streams=max_event_streams,
        keepalive_seconds=keepalive_seconds,
    )
    blueprint = Blueprint(name, __name__)
    blueprint.event_streams = streams  # type: ignore[attr-defined]  # for hosts and tests

    def api(rule: str, **views: View) -> None:
        allowed = sorted(views)

        def dispatch(**params: str) -> Response:
            # The real request, not the proxy: `authorize` may keep or inspect it freely.
            current = request._get_current_object()  # type: ignore[attr-defined]
            refusal = auth.check(request.headers.get("Authorization"), current)
            if refusal is not None:
                return _refusal(refusal)
            if not auth.token_valid(request.headers.get("Authorization")) and cross_site(
                request.method,
                sec_fetch_site=request.headers.get("Sec-Fetch-Site"),
                origin=request.headers.get("Origin"),
                own_origin=request.host_url,
            ):
                return _refusal(CROSS_SITE_REFUSAL)
            method = "GET" if request.method == "HEAD" else request.method
            view = views.get(method)
            if view is None:
                response = _error(405, "method_not_allowed", f"use {', '.join(allowed)}")
                response.headers["Allow"] = ", ".join(allowed)
                return response
            try:
                return view(**params)
            except AdminError as exc:
                return _error(exc.status, exc.code, str(exc))
            except OperationalError as exc:
                logger.warning(
                    "admin API %s %s: database unavailable: %s",
                    request.method,
                    request.path,
                    exc.orig,
                )
                return _error(503, "unavailable", "the database cannot be reached; try again")

        endpoint = rule.replace("/", "_").replace("<", "").replace(">", "").replace(":", "_")
        blueprint.add_url_rule(
            "/" + rule, endpoint=endpoint or "root", view_func=dispatch, methods=ALL_METHODS
        )

    def stats() -> Response:
        with get_engine().connect() as conn:
            return _json(admin.queue_stats(conn))

    def jobs() -> Response:
        args = request.args
        limit = admin.parse_limit(args.get("limit"))
        with get_engine().connect() as conn:
            return _json(
                admin.list_jobs(
                    conn,
                    state=args.get("state") or None,
                    kind=args.get("kind") or None,
                    limit=limit,
                    cursor=args.get("cursor") or None,
                )
            )

    def retry(job_id: str) -> Response:
        parsed = admin.parse_uuid(job_id, "job id")
        with get_engine().begin() as conn:
            return _json(admin.retry_job(conn, parsed))

    def get_analysis(page_id: str) -> Response:
        parsed = admin.parse_uuid(page_id, "page id")
        with get_engine().connect() as conn:
            return _json(admin.get_page_analysis(conn, parsed))

    def post_analysis(page_id: str) -> Response:
        parsed = admin.parse_uuid(page_id, "page id")
        force = _force_from_body()
        with get_engine().begin() as conn:
            return _json(admin.request_page_analysis(conn, parsed, force=force), status=202)

    def events() -> Response:
        try:
            stream = streams.open()
        except TooManyStreams as exc:
            response = _error(exc.status, exc.code, str(exc))
            response.headers["Retry-After"] = "5"
            return response
        return Response(
            stream,
            mimetype="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    api("api/stats", GET=stats)
    api("api/jobs", GET=jobs)
    api("api/jobs/<job_id>/retry", POST=retry)
    api("api/pages/<page_id>/analysis", GET=get_analysis, POST=post_analysis)
    api("api/events", GET=events)
    api("api/<path:rest>", **{m: _unknown_route for m in ALL_METHODS})
    api("api/", **{m: _unknown_route for m in ALL_METHODS})

    @blueprint.route("/", methods=ALL_METHODS)
    def page() -> Response:
        if request.method not in ("GET", "HEAD"):
            response = _error(405, "method_not_allowed", "use GET")
            response.headers["Allow"] = "GET"
            return response
        response = Response(admin_page_html(), mimetype="text/html")
        # The page holds no data, but it must not be framed by another site.
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Cache-Control"] = "no-cache"
        return response

    return blueprint


def _unknown_route(rest: str = "") -> Response:
    return _error(404, "not_found", f"no admin API route {request.path}")


def _force_from_body() -> bool:
    """`force` from an optional JSON body `{"force": bool}`; `BadRequest` for anything else."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes")
    return admin.parse_force_body(request.get_data(cache=False))


def _json(body: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(body, ensure_ascii=False), status=status, mimetype="application/json"
    )


def _error(status: int, code: str, message: str) -> Response:
    response = _json({"error": {"code": code, "message": message}}, status=status)
    response.headers["Cache-Control"] = "no-store"
    return response


def _refusal(refusal: Refusal) -> Response:
    response = _error(refusal.status, refusal.code, refusal.message)
    response.headers.update(refusal.headers())
    return response


__all__ = ["admin_blueprint"]
