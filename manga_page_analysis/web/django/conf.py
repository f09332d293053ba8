"""The `PAGE_ANALYSIS` setting and the SQLAlchemy URL of a Django database.

Read when the app is ready and whenever a URL is needed, never at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from sqlalchemy.engine import URL, make_url

from manga_page_analysis.config import check_schema_name
from manga_page_analysis.db import DEFAULT_SCHEMA, normalise_url
from manga_page_analysis.web.event_stream import DEFAULT_KEEPALIVE_SECONDS, DEFAULT_MAX_STREAMS

SETTING: Final = "PAGE_ANALYSIS"

DEFAULT_DATABASE_ALIAS: Final = "default"
"""The Django database the admin views, the worker and the migrate command use."""

POSTGRESQL_ENGINE: Final = "django.db.backends.postgresql"

# Connection parameters that are not a URL's query: the URL's own parts, and
# those Django hands psycopg that are Python objects, not conninfo keywords,
# or that only make sense for Django's own connections.
_NOT_QUERY: Final = frozenset(
    {"user", "password", "dbname", "host", "port"}
    | {"cursor_factory", "context", "prepare_threshold", "pool", "server_side_binding"}
)


@dataclass(frozen=True, slots=True)
class PageAnalysisSettings:
    """`settings.PAGE_ANALYSIS`, validated. Every key is optional."""

    admin_token: str | None = None
    """Bearer token of the admin API; unset: only staff users get in."""
    database_alias: str = DEFAULT_DATABASE_ALIAS
    max_event_streams: int = DEFAULT_MAX_STREAMS
    """Concurrent `api/events` streams per process; one more gets 503."""
    event_keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS
    """A comment line at least this often on an idle `api/events` stream."""
    listen_database_url: str | None = None
    """Direct connection the event streams LISTEN on (the database sits behind
    PgBouncer in transaction mode); unset: the Django database's."""
    database_schema: str = DEFAULT_SCHEMA
    """The Postgres schema of the package's tables (`DATABASE_SCHEMA`)."""


_KEYS: Final = tuple(field.name.upper() for field in fields(PageAnalysisSettings))


def page_analysis_settings() -> PageAnalysisSettings:
    """Parse `settings.PAGE_ANALYSIS`; a typo or a bad value is `ImproperlyConfigured`."""
    raw: Any = getattr(settings, SETTING, {}) or {}
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"{SETTING} must be a dict, not {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ImproperlyConfigured(
            f"{SETTING} has unknown key(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}"
        )
    parsed = PageAnalysisSettings(**{key.lower(): value for key, value in raw.items()})
    token = parsed.admin_token
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ImproperlyConfigured(f"{SETTING}['ADMIN_TOKEN'] must be a non-empty string")
    if parsed.database_alias not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"{SETTING}['DATABASE_ALIAS'] is {parsed.database_alias!r}, which is not in DATABASES"
        )
    streams = parsed.max_event_streams
    if not isinstance(streams, int) or isinstance(streams, bool) or streams < 1:
        raise ImproperlyConfigured(f"{SETTING}['MAX_EVENT_STREAMS'] must be an int >= 1")
    keepalive = parsed.event_keepalive_seconds
    if not isinstance(keepalive, int | float) or isinstance(keepalive, bool) or keepalive <= 0:
        raise ImproperlyConfigured(f"{SETTING}['EVENT_KEEPALIVE_SECONDS'] must be > 0")
    listen_url = parsed.listen_database_url
    if listen_url is not None and (not isinstance(listen_url, str) or not listen_url.strip()):
        raise ImproperlyConfigured(f"{SETTING}['LISTEN_DATABASE_URL'] must be a non-empty URL")
    schema = parsed.database_schema
    if not isinstance(schema, str):
        raise ImproperlyConfigured(
            f"{SETTING}['DATABASE_SCHEMA'] must be a str, e.g. 'page_analysis'"
        )
    try:
        check_schema_name(schema)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{SETTING}['DATABASE_SCHEMA'] {exc}") from None
    return parsed


def check_postgresql(alias: str) -> None:
    """Refuse anything but Django's PostgreSQL backend on psycopg 3."""
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(f"no database {alias!r} in DATABASES")
    # From the settings, not the connection: loading another backend may fail
    # first (MySQL without its driver) and hide what is wrong.
    engine = settings.DATABASES[alias].get("ENGINE")
    if engine != POSTGRESQL_ENGINE:
        raise ImproperlyConfigured(
            f"page analysis needs DATABASES[{alias!r}] on {POSTGRESQL_ENGINE}, not {engine}"
        )
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        raise ImproperlyConfigured("page analysis needs psycopg 3 under Django, not psycopg2")


def sqlalchemy_url(alias: str = DEFAULT_DATABASE_ALIAS) -> URL:
    """The SQLAlchemy URL (psycopg 3 driver) of Django's database `alias`.

    Built from the same parameters Django connects with, so OPTIONS such as
    `sslmode` or `options` carry over; read each time, so a test runner that
    renames the database (`test_...`) is followed.
    """
    check_postgresql(alias)
    return url_from_connection_params(connections[alias].get_connection_params())


def url_from_connection_params(params: dict[str, Any]) -> URL:
    """The SQLAlchemy URL for the psycopg `connect()` keywords Django builds."""
    host = params.get("host")
    port = str(params.get("port") or "")
    query: dict[str, str | list[str]] = {
        name: str(value) for name, value in params.items() if name not in _NOT_QUERY
    }
    if host and "," in str(host):
        # Several servers (`HOST = "db1,db2"`, `PORT = "5432,5432"` or one port
        # for all): SQLAlchemy's multi-host form, `?host=db1:5432&host=db2:5432`.
        hosts, ports = str(host).split(","), port.split(",")
        ports = ports if len(ports) == len(hosts) else ports[:1] * len(hosts)
        query["host"] = [
            f"{name}:{number}" if number else name
            for name, number in zip(hosts, ports, strict=True)
        ]
        host, port = None, ""
    elif host and str(host).startswith("/"):
        # A Unix socket directory has no place in the URL's host part.
        query["host"] = str(host)
        host = None
    return URL.create(
        "postgresql+psycopg",
        username=params.get("user"),
        password=params.get("password"),
        host=host or None,
        port=int(port) if port else None,
        database=params.get("dbname"),
        query=query,
    )


DJANGO_ENGINES: Final = {
    "postgresql": POSTGRESQL_ENGINE,
    "postgres": POSTGRESQL_ENGINE,
    "mysql": "django.db.backends.mysql",
    "sqlite": "django.db.backends.sqlite3",
}
"""URL scheme (before any `+driver`) -> Django engine. Only PostgreSQL works with
this app; the others map to their own engine so `manage.py check` says so."""


def database_from_url(url: str) -> dict[str, Any]:
    """A `DATABASES` entry for a SQLAlchemy or libpq URL, for settings files
    (the example project, tests): `DATABASES = {"default": database_from_url(url)}`.

    `mysql://` and `sqlite:///` give those engines (which `manage.py check` then
    reports as unusable here), never PostgreSQL; another scheme is `ImproperlyConfigured`.
    """
    parsed = make_url(url)
    backend = parsed.drivername.split("+", 1)[0]
    engine = DJANGO_ENGINES.get(backend)
    if engine is None:
        raise ImproperlyConfigured(
            f"database_from_url: {backend}:// is not a database Django knows here "
            "(page analysis needs postgresql://)"
        )
    if engine == POSTGRESQL_ENGINE:
        parsed = make_url(normalise_url(url))
    return {
        "ENGINE": engine,
        "NAME": parsed.database or "",
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host or "",
        "PORT": str(parsed.port or ""),
        "OPTIONS": dict(parsed.query),
    }
