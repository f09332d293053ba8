"""Engine construction, database URLs and the `Conn` type. Nothing runs at import time."""

from __future__ import annotations

from typing import Any, TypeAlias

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

from manga_page_analysis.config import Settings

Conn: TypeAlias = Connection | Session
"""What every repository function takes first: a SQLAlchemy `Connection` or
`Session`, on which it executes without ever committing or rolling back."""


def database_url(settings: Settings) -> str:
    """`DATABASE_URL`, else the URL of the embedded dev database, started (or
    reused) under `settings.dev_dir` by this call."""
    if settings.database_url:
        return normalise_url(settings.database_url)
    from manga_page_analysis.devdb import embedded_database_url

    return embedded_database_url(settings.dev_dir)


def listen_database_url(settings: Settings) -> str | None:
    """`LISTEN_DATABASE_URL`, normalised; `None` when unset (LISTEN on `DATABASE_URL`)."""
    return normalise_url(settings.listen_database_url) if settings.listen_database_url else None


def connect_kwargs(target: Engine | URL | str) -> dict[str, Any]:
    """psycopg `connect()` keywords for an engine's database (its URL; not its
    `connect_args`), or for a URL: for LISTEN connections, kept out of any pool."""
    if isinstance(target, Engine):
        _, kwargs = target.dialect.create_connect_args(target.url)
    else:
        url = make_url(normalise_url(target) if isinstance(target, str) else target)
        _, kwargs = url.get_dialect()().create_connect_args(url)
    return dict(kwargs)


def normalise_url(url: str) -> str:
    """Use the psycopg 3 driver for plain `postgresql://` / `postgres://` URLs."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(settings_or_url: Settings | str, **engine_kwargs: Any) -> Engine:
    """Build an engine from `Settings` (or a URL).

    `pool_pre_ping` is on so a connection broken by a database restart is
    replaced on checkout instead of failing the next job. Its connections
    never prepare statements (`prepare_threshold=None`), so the engine works
    through PgBouncer in transaction mode, where the next transaction may run
    on another server connection that never saw the statement.
    """
    if isinstance(settings_or_url, Settings):
        url = database_url(settings_or_url)
        pool_size = settings_or_url.analysis_workers * 2 + 2
    else:
        url = normalise_url(settings_or_url)
        pool_size = 10
    options: dict[str, Any] = {"pool_pre_ping": True}
    if "poolclass" not in engine_kwargs:
        options.update(pool_size=pool_size, max_overflow=5)
    connect_args = {"prepare_threshold": None, **engine_kwargs.pop("connect_args", {})}
    options.update(engine_kwargs, connect_args=connect_args)
    return create_engine(url, **options)
