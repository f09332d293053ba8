"""The admin HTTP API, written once: the route table and the one handler.

A framework adapter (`manga_page_analysis.web.flask`, `manga_page_analysis.web.django`) registers every
`Route` of `ROUTES` under its pattern (Flask and Django share the `<name>` /
`<path:name>` syntax), authenticates its own way, and translates its request
into an `ApiRequest` and the `ApiResponse` of `AdminApi.handle` back. The
handler owns the rest, and bad input never yields a 500.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, ProgrammingError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from manga_page_analysis import admin
from manga_page_analysis.admin import AdminError, BadRequest
from manga_page_analysis.config import Settings
from manga_page_analysis.dberrors import is_transient_db_error
from manga_page_analysis.errors import DatabaseUnavailable, truncated
from manga_page_analysis.observability.terminal import visible
from manga_page_analysis.schema_check import schema_problem
from manga_page_analysis.schema_errors import not_our_schema
from manga_page_analysis.storage import Storage, open_storage
from manga_page_analysis.web.auth import SAFE_METHODS, Access, Refusal
from manga_page_analysis.web.event_stream import EventStream, EventStreams, EventsUnavailable
from manga_page_analysis.web.page import page_security_policy
from manga_page_analysis.web.unavailable import bound_lock_waits

logger = logging.getLogger(__name__)

ALL_METHODS: Final = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
"""Every method an `api/` route is registered for: the handler answers a wrong
one itself (a JSON 405), never the framework's HTML error page (nor Flask's
automatic `OPTIONS` answer, which lists every method)."""

SHOWN_PATH_CHARS: Final = 120
"""A 404 names at most this much of the path it did not find."""

RETRY_AFTER_SECONDS: Final = 5
"""`Retry-After` of every 503 (`api/events` full, the images busy, the database away,
busy or refusing writes: a failover takes seconds)."""

DEFAULT_MAX_IMAGE_READS: Final = 4
"""Page images read at once by one mount (each up to `MAX_IMAGE_BYTES` in memory);
one more is a 503 with `Retry-After`: 60 parallel reads of a 19 MB page peaked at 1.16 GB."""

API_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A JSON answer opened as a document runs nothing and loads nothing.
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; sandbox",
}
"""Headers of every `api/` answer."""


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One API request, as the adapter saw it.

    `params`: the route pattern's values; `query`: one value a name;
    `read_body`: called only for unsafe methods, once `content_length` passed
    the limit; `origin_check`: whether an unsafe request let in by a session
    comes from the page's own origin (Django: its CSRF check), `None` if so.
    """

    method: str
    path: str
    access: Access
    params: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    read_body: Callable[[], bytes] = bytes
    content_length: str | None = None
    origin_check: Callable[[], Refusal | None] = lambda: None


@dataclass(frozen=True, slots=True)
class ApiResponse:
    """What to answer. `content` is JSON or the page's HTML, a page's image
    (bytes), or for `api/events` an `EventStream` the adapter streams and the
    server closes."""

    status: int
    content: str | bytes | EventStream
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


def json_response(body: Any, status: int = 200) -> ApiResponse:
    return ApiResponse(status, json.dumps(body, ensure_ascii=False))


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> ApiResponse:
    """The admin API's error body: `{"error": {"code": ..., "message": ...}}`, never cached."""
    body = json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False)
    return ApiResponse(status, body, headers={"Cache-Control": "no-store", **(headers or {})})


def refusal_response(refusal: Refusal) -> ApiResponse:
    challenge = {"WWW-Authenticate": refusal.www_authenticate} if refusal.www_authenticate else {}
    return error_response(refusal.status, refusal.code, refusal.message, challenge)


def unavailable_response(message: str) -> ApiResponse:
    """503 with `Retry-After`: the database (or the image reads) cannot serve now."""
    retry = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return error_response(503, "unavailable", message, retry)


def internal_error_response() -> ApiResponse:
    """A JSON 500 (the reason is logged, never answered)."""
    return error_response(500, "internal_error", "the admin API failed; the server log says why")


def page_response(method: str, html: str) -> ApiResponse:
    """The admin page at the mount point: GET/HEAD only. It holds no queue
    data, so it is served without auth; it must not be framed by another site,
    and runs only its own script (`page_security_policy`)."""
    if method not in ("GET", "HEAD"):
        return with_api_headers(
            error_response(405, "method_not_allowed", "use GET", {"Allow": "GET"})
        )
    headers = {
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": page_security_policy(),
    }
    return ApiResponse(200, html, "text/html; charset=utf-8", headers)


def with_api_headers(response: ApiResponse) -> ApiResponse:
    """`response` with `API_HEADERS` (its own headers win)."""
    return replace(response, headers={**API_HEADERS, **response.headers})


class AdminApi:
    """The admin API of one mount: the engine of its queries (a callable, so a
    host may hand `lambda: db.engine`), its event streams, the `settings` its
    adapter read when it was built, and where page images are read (`storage`; by
    default the store `settings` configure, opened on the first image asked for)
    with their size cap (`max_image_bytes`; by default `settings.max_image_bytes`)."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        streams: EventStreams,
        settings: Settings,
        *,
        storage: Storage | None = None,
        max_image_bytes: int | None = None,
        max_image_reads: int = DEFAULT_MAX_IMAGE_READS,
    ) -> None:
        if max_image_reads < 1:
            raise ValueError("max_image_reads must be at least 1")
        self.engine = engine
        self.streams = streams
        self._settings = settings
        self._storage = storage
        self._max_image_bytes = (
            settings.max_image_bytes if max_image_bytes is None else max_image_bytes
        )
        self.image_reads = threading.BoundedSemaphore(max_image_reads)

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for a view's reads, its lock waits bounded by `LOCK_TIMEOUT`."""
        with self.engine().connect() as conn:
            bound_lock_waits(conn)
            yield conn

    @contextlib.contextmanager
    def writing(self) -> Iterator[Connection]:
        """A transaction for a view's writes (committed on success), lock waits bounded."""
        with self.engine().begin() as conn:
            bound_lock_waits(conn)
            yield conn

    def image_store(self) -> tuple[Storage, int]:
        """The storage of page images and the cap on one image's bytes."""
        if self._storage is None:
            self._storage = open_storage(self._settings)
        return self._storage, self._max_image_bytes

    def handle(self, route: Route, request: ApiRequest) -> ApiResponse:
        """Answer `request` on `route`, always in JSON (but a page's image and the
        event stream), with `API_HEADERS`: see `_answer`."""
        try:
            response = self._answer(route, request)
        except MemoryError:
            logger.error("admin API %s %s: out of memory", request.method, request.path)
            response = unavailable_response("the server is out of memory; try again")
        except Exception:
            logger.exception("admin API %s %s failed", request.method, request.path)
            response = internal_error_response()
        return with_api_headers(response)

    def _answer(self, route: Route, request: ApiRequest) -> ApiResponse:
        """The method (HEAD is GET; else 405, before auth: which methods a route
        takes is no secret), the auth outcome, the body limit, the origin check of
        a session's writes, `AdminError` as its JSON error, and a database that
        cannot serve now (`dberrors.is_transient_db_error`: unreachable, refusing writes
        in a failover, out of memory, a lock wait, a deadlock; or the pool exhausted) as
        503 with `Retry-After`."""
        method = "GET" if request.method == "HEAD" else request.method.upper()
        view = route.views.get(method)
        if view is None:
            allowed = ", ".join(sorted(route.views))
            return error_response(405, "method_not_allowed", f"use {allowed}", {"Allow": allowed})
        if request.access.refusal is not None:
            return refusal_response(request.access.refusal)
        try:
            if method not in SAFE_METHODS:
                _check_length(request.content_length)
                refusal = request.origin_check() if request.access.ambient else None
                if refusal is not None:
                    return refusal_response(refusal)
            return view(self, request)
        except AdminError as exc:
            return error_response(exc.status, exc.code, str(exc))
        except ProgrammingError as exc:
            if not_our_schema(exc):
                return self._schema_missing(request, exc)
            raise
        except PoolTimeout as exc:
            logger.warning(
                "admin API %s %s: no database connection free: %s",
                request.method,
                request.path,
                exc,
            )
            return unavailable_response("no database connection is free; try again")
        except (DBAPIError, DatabaseUnavailable) as exc:
            if not is_transient_db_error(exc):
                raise
            cause = exc.orig if isinstance(exc, DBAPIError) else exc
            logger.warning(
                "admin API %s %s: database unavailable: %s", request.method, request.path, cause
            )
            return unavailable_response(
                "the database cannot serve or takes no writes now (a failover?); try again"
            )

    def _schema_missing(self, request: ApiRequest, error: ProgrammingError) -> ApiResponse:
        """503 naming what to set when this package's tables are not in the engine's
        schema (never migrated there, or another project's alembic revision in it)."""
        try:
            problem = schema_problem(self.engine(), command=None)
        except SQLAlchemyError:
            problem = None
        message = problem or str(error.orig).strip().splitlines()[0]
        logger.error("admin API %s %s: %s", request.method, request.path, message)
        return error_response(503, "schema_missing", message)


@dataclass(frozen=True, slots=True)
class Route:
    """One `api/` route: its URL name, its pattern below the mount point, a view per method."""

    name: str
    pattern: str
    views: Mapping[str, Callable[[AdminApi, ApiRequest], ApiResponse]]


def _check_length(declared: str | None) -> None:
    # Refused before it is read.
    digits = (declared or "").strip()
    if digits and (
        not (digits.isascii() and digits.isdigit()) or int(digits) > admin.MAX_BODY_BYTES
    ):
        raise BadRequest(f"the body is larger than {admin.MAX_BODY_BYTES} bytes")


# --- the views ------------------------------------------------------------------


def _stats(api: AdminApi, request: ApiRequest) -> ApiResponse:
    with api.reading() as conn:
        return json_response(admin.queue_stats(conn))


def _jobs(api: AdminApi, request: ApiRequest) -> ApiResponse:
    query = request.query
    limit = admin.parse_limit(query.get("limit"))
    with api.reading() as conn:
        return json_response(
            admin.list_jobs(
                conn,
                state=query.get("state") or None,
                kind=query.get("kind") or None,
                limit=limit,
                cursor=query.get("cursor") or None,
            )
        )


def _retry(api: AdminApi, request: ApiRequest) -> ApiResponse:
    job_id = admin.parse_uuid(request.params["job_id"], "job id")
    with api.writing() as conn:
        body = admin.retry_job(conn, job_id)
    logger.info("admin API: job %s retried (%s)", job_id, request.access.who)
    return json_response(body)


def _job(api: AdminApi, request: ApiRequest) -> ApiResponse:
    job_id = admin.parse_uuid(request.params["job_id"], "job id")
    with api.reading() as conn:
        return json_response(admin.get_job(conn, job_id))


def _discard(api: AdminApi, request: ApiRequest) -> ApiResponse:
    job_id = admin.parse_uuid(request.params["job_id"], "job id")
    with api.writing() as conn:
        return json_response(admin.discard_job(conn, job_id, who=request.access.who))


def _mangas(api: AdminApi, request: ApiRequest) -> ApiResponse:
    limit = admin.parse_limit(request.query.get("limit"))
    cursor = request.query.get("cursor") or None
    with api.reading() as conn:
        return json_response(admin.list_mangas(conn, limit=limit, cursor=cursor))


def _manga(api: AdminApi, request: ApiRequest) -> ApiResponse:
    manga_id = admin.parse_uuid(request.params["manga_id"], "manga id")
    with api.reading() as conn:
        return json_response(admin.get_manga(conn, manga_id))


def _chapter(api: AdminApi, request: ApiRequest) -> ApiResponse:
    chapter_id = admin.parse_uuid(request.params["chapter_id"], "chapter id")
    with api.reading() as conn:
        return json_response(admin.get_chapter(conn, chapter_id))


def _page(api: AdminApi, request: ApiRequest) -> ApiResponse:
    page_id = admin.parse_uuid(request.params["page_id"], "page id")
    with api.reading() as conn:
        return json_response(admin.get_page(conn, page_id))


def _image(api: AdminApi, request: ApiRequest) -> ApiResponse:
    page_id = admin.parse_uuid(request.params["page_id"], "page id")
    storage, max_bytes = api.image_store()
    if not api.image_reads.acquire(blocking=False):
        return unavailable_response("too many page images are being read at once; try again")
    try:
        with api.reading() as conn:
            key = admin.page_image_key(conn, page_id)
        # Read outside the transaction: no pooled connection waits on the store.
        data, content_type = admin.read_page_image(storage, page_id, key, max_bytes=max_bytes)
    finally:
        api.image_reads.release()
    # nosniff: what is not an image is served as bytes and stays bytes.
    headers = {"Cache-Control": "private, no-cache", "X-Content-Type-Options": "nosniff"}
    return ApiResponse(200, data, content_type, headers)


def _get_analysis(api: AdminApi, request: ApiRequest) -> ApiResponse:
    page_id = admin.parse_uuid(request.params["page_id"], "page id")
    with api.reading() as conn:
        return json_response(admin.get_page_analysis(conn, page_id))


def _post_analysis(api: AdminApi, request: ApiRequest) -> ApiResponse:
    page_id = admin.parse_uuid(request.params["page_id"], "page id")
    force = admin.parse_force_body(request.read_body())
    with api.writing() as conn:
        return json_response(admin.request_page_analysis(conn, page_id, force=force), status=202)


def _events(api: AdminApi, request: ApiRequest) -> ApiResponse:
    try:
        stream = api.streams.open()
    except EventsUnavailable as exc:
        retry = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return error_response(exc.status, exc.code, str(exc), retry)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return ApiResponse(200, stream, "text/event-stream", headers)


def _unknown(api: AdminApi, request: ApiRequest) -> ApiResponse:
    # Named, not echoed: a 60 KB path is not sent back, nor a control character.
    path = visible(truncated(request.path, SHOWN_PATH_CHARS))
    return error_response(404, "not_found", f"no admin API route {path}")


ROUTES: Final = (
    Route("stats", "api/stats", {"GET": _stats}),
    Route("jobs", "api/jobs", {"GET": _jobs}),
    # Any string, not a UUID converter: a malformed id gets the API's JSON 400.
    Route("retry", "api/jobs/<job_id>/retry", {"POST": _retry}),
    Route("job-discard", "api/jobs/<job_id>/discard", {"POST": _discard}),
    Route("job", "api/jobs/<job_id>", {"GET": _job}),
    Route("mangas", "api/mangas", {"GET": _mangas}),
    Route("manga", "api/mangas/<manga_id>", {"GET": _manga}),
    Route("chapter", "api/chapters/<chapter_id>", {"GET": _chapter}),
    Route("page-view", "api/pages/<page_id>", {"GET": _page}),
    Route("page-image", "api/pages/<page_id>/image", {"GET": _image}),
    Route(
        "page-analysis",
        "api/pages/<page_id>/analysis",
        {"GET": _get_analysis, "POST": _post_analysis},
    ),
    Route("events", "api/events", {"GET": _events}),
    Route("api-root", "api/", dict.fromkeys(ALL_METHODS, _unknown)),
    # Last: an unknown api/ route is a JSON 404 for every method.
    Route("unknown", "api/<path:rest>", dict.fromkeys(ALL_METHODS, _unknown)),
)
"""Every admin API route, in matching order."""
