"""The admin API and page as a Flask blueprint.

    from app.web.flask import admin_blueprint
    app.register_blueprint(admin_blueprint(engine, token="s3cret"), url_prefix="/admin/analysis")

`engine` is a SQLAlchemy `Engine`, or a callable returning one (with
Flask-SQLAlchemy: `lambda: db.engine`, since `db.engine` needs an app
context). The blueprint borrows connections from it per request and never
disposes it. The routes, their answers and errors are `app.web.api`'s; this
module only translates Flask's request and response and authenticates
(`AdminAuth`: a bearer token and/or the host's `authorize(request)`).
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Blueprint, Response, request
from sqlalchemy import Engine

from app.db import connect_kwargs
from app.web.api import ALL_METHODS, ROUTES, AdminApi, ApiRequest, ApiResponse, Route, page_response
from app.web.auth import CROSS_SITE_REFUSAL, AdminAuth, Authorize, Refusal, cross_site
from app.web.events import (
    DEFAULT_KEEPALIVE_SECONDS,
    DEFAULT_MAX_STREAMS,
    EventStreams,
)
from app.web.page import admin_page_html


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
    (beyond it: 503); `keepalive_seconds` is the idle comment interval. The
    streams LISTEN on connections of their own to `engine`'s database, or
    to `listen_url`: the direct connection for an engine that goes through
    PgBouncer in transaction mode.
    """
    auth = AdminAuth(token=token, authorize=authorize)
    get_engine: Callable[[], Engine] = engine if callable(engine) else (lambda: engine)
    streams = EventStreams(
        lambda: connect_kwargs(listen_url or get_engine()),
        max_streams=max_event_streams,
        keepalive_seconds=keepalive_seconds,
    )
    api = AdminApi(get_engine, streams)
    blueprint = Blueprint(name, __name__)
    blueprint.event_streams = streams  # type: ignore[attr-defined]  # for hosts and tests

    def view_of(route: Route) -> Callable[..., Response]:
        def view(**params: str) -> Response:
            # The real request, not the proxy: `authorize` may keep or inspect it freely.
            current = request._get_current_object()  # type: ignore[attr-defined]
            api_request = ApiRequest(
                method=request.method,
                path=request.path,
                access=auth.check(request.headers.get("Authorization"), current),
                params=params,
                query=request.args.to_dict(flat=True),
                read_body=lambda: request.get_data(cache=False),
                content_length=request.headers.get("Content-Length"),
                origin_check=_same_origin,
            )
            return _response(api.handle(route, api_request))

        return view

    # Every api/ rule accepts every method and the handler answers a wrong one:
    # Flask routes before it knows the blueprint, so blueprint error handlers
    # never see a routing 405 (or 404) and the host's HTML page would answer.
    for route in ROUTES:
        blueprint.add_url_rule(
            "/" + route.pattern, endpoint=route.name, view_func=view_of(route), methods=ALL_METHODS
        )

    @blueprint.route("/", methods=ALL_METHODS)
    def page() -> Response:
        return _response(page_response(request.method, admin_page_html()))

    return blueprint


def _same_origin() -> Refusal | None:
    """A session-borne (`authorize`) unsafe request must come from the page's own origin."""
    if cross_site(
        request.method,
        sec_fetch_site=request.headers.get("Sec-Fetch-Site"),
        origin=request.headers.get("Origin"),
        own_origin=request.host_url,
    ):
        return CROSS_SITE_REFUSAL
    return None


def _response(answer: ApiResponse) -> Response:
    # A stream is an iterable with close(): werkzeug closes it when the client goes.
    return Response(
        answer.content,
        status=answer.status,
        content_type=answer.content_type,
        headers=dict(answer.headers),
    )


__all__ = ["admin_blueprint"]
