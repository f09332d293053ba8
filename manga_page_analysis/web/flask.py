"""The admin API and page as a Flask blueprint: `manga_page_analysis.web.api` translated,
authenticated by `AdminAuth`.

    app.register_blueprint(admin_blueprint(engine, token="s3cret"), url_prefix="/admin/analysis")
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Blueprint, Response, request
from sqlalchemy import Engine

from manga_page_analysis.analysis.page_events import analysis_channel
from manga_page_analysis.config import Settings
from manga_page_analysis.db import connect_kwargs
from manga_page_analysis.storage import Storage
from manga_page_analysis.web.api import (
    ALL_METHODS,
    DEFAULT_MAX_IMAGE_READS,
    ROUTES,
    AdminApi,
    ApiRequest,
    ApiResponse,
    Route,
    page_response,
)
from manga_page_analysis.web.auth import CROSS_SITE_REFUSAL, AdminAuth, Authorize, Refusal
from manga_page_analysis.web.event_stream import (
    DEFAULT_KEEPALIVE_SECONDS,
    DEFAULT_MAX_STREAMS,
    EventStreams,
)
from manga_page_analysis.web.page import admin_page_html


def admin_blueprint(
    engine: Engine | Callable[[], Engine],
    *,
    token: str | None = None,
    authorize: Authorize | None = None,
    listen_url: str | None = None,
    name: str = "page_analysis_admin",
    max_event_streams: int = DEFAULT_MAX_STREAMS,
    keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS,
    storage: Storage | None = None,
    max_image_bytes: int | None = None,
    settings: Settings | None = None,
    max_image_reads: int = DEFAULT_MAX_IMAGE_READS,
) -> Blueprint:
    """The admin blueprint; every keyword is in docs/embedding.md.

    `engine` is an `Engine` or a callable returning one (`lambda: db.engine`),
    borrowed per request, never disposed. `ValueError` without a `token` or an
    `authorize` (see `AdminAuth`). `settings` (by default read from the environment
    here, once) give the image route's store and cap when `storage` or
    `max_image_bytes` is not given.
    """
    auth = AdminAuth(token=token, authorize=authorize)
    get_engine: Callable[[], Engine] = engine if callable(engine) else (lambda: engine)
    streams = EventStreams(
        lambda: connect_kwargs(listen_url or get_engine()),
        max_streams=max_event_streams,
        keepalive_seconds=keepalive_seconds,
        channel=lambda: analysis_channel(get_engine()),
    )
    api = AdminApi(
        get_engine,
        streams,
        settings if settings is not None else Settings(),
        storage=storage,
        max_image_bytes=max_image_bytes,
        max_image_reads=max_image_reads,
    )
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
    """A session-borne (`authorize`) unsafe request must come from the page's own origin.

    `Sec-Fetch-Site` decides when present (only `same-origin` and `none`, a
    typed URL, pass); else an `Origin` must equal the request's own; a request
    with neither is not from a browser page and passes.
    """
    sec_fetch_site = request.headers.get("Sec-Fetch-Site")
    origin = request.headers.get("Origin")
    if sec_fetch_site:
        cross_site = sec_fetch_site.strip().lower() not in ("same-origin", "none")
    elif origin:
        cross_site = origin.strip().rstrip("/").lower() != request.host_url.rstrip("/").lower()
    else:
        cross_site = False
    return CROSS_SITE_REFUSAL if cross_site else None


def _response(answer: ApiResponse) -> Response:
    return Response(
        answer.content,
        status=answer.status,
        content_type=answer.content_type,
        headers=dict(answer.headers),
    )


__all__ = ["admin_blueprint"]
