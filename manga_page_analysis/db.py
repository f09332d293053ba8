"""Engine construction, database URLs and the `Conn` type. Nothing runs at import time."""

from __future__ import annotations

from typing import Any, Final, TypeAlias

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

from manga_page_analysis.config import Settings
from manga_page_analysis.dberrors import drop_connections_refusing_writes

Conn: TypeAlias = Connection | Session
"""What every repository function takes first: a SQLAlchemy `Connection` or
`Session`, on which it executes without ever committing or rolling back."""


DEFAULT_SCHEMA: Final = "public"
"""`DATABASE_SCHEMA`'s default. The models name it as their schema, so a host's
engine needs no option for it, and `schema_options` moves only this package's
tables (a host's own tables, with no schema of their own, stay where they are)."""


def schema_options(schema: str) -> dict[str, Any]:
    """SQLAlchemy execution options that put this package's tables in `schema`
    (its `DATABASE_SCHEMA`): `{}` for `public`, else a `schema_translate_map`.

    Set them on the engine a host passes to the library, or on which it opens
    the sessions it passes: `create_engine(url, execution_options=schema_options("pa"))`,
    or Flask-SQLAlchemy's `SQLALCHEMY_ENGINE_OPTIONS = {"execution_options": ...}`.
    Nothing else (no `search_path`, no session state) is involved, so it works
    through PgBouncer in transaction mode.
    """
    if schema == DEFAULT_SCHEMA:
        return {}
    return {"schema_translate_map": {DEFAULT_SCHEMA: schema}}


def schema_of(bind: Engine | Connection) -> str:
    """The schema of this package's tables on `bind`, from its execution options."""
    translate = bind.get_execution_options().get("schema_translate_map") or {}
    return str(translate.get(DEFAULT_SCHEMA) or DEFAULT_SCHEMA)


def channel_name(channel: str, schema: str) -> str:
    """The `NOTIFY` channel `channel` of the tables in `schema`: the name itself in
    `public`, else `<schema>.<channel>` (installs in two schemas never hear each other)."""
    return channel if schema == DEFAULT_SCHEMA else f"{schema}.{channel}"


def quote_identifier(name: str) -> str:
    """`name` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


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


def make_engine(
    settings_or_url: Settings | str, *, schema: str | None = None, **engine_kwargs: Any
) -> Engine:
    """Build an engine from `Settings` (or a URL).

    `pool_pre_ping` is on so a connection broken by a database restart is
    replaced on checkout instead of failing the next job. Its connections
    never prepare statements (`prepare_threshold=None`), so the engine works
    through PgBouncer in transaction mode, where the next transaction may run
    on another server connection that never saw the statement.

    Its statements use the tables in `DATABASE_SCHEMA` (from `Settings`), or in
    `schema` when given (`schema_options`). A connection whose server refuses
    writes (a standby during a failover) is discarded like a dropped one
    (`dberrors.drop_connections_refusing_writes`).
    """
    if isinstance(settings_or_url, Settings):
        url = database_url(settings_or_url)
        pool_size = settings_or_url.analysis_workers * 2 + 2
        schema = schema or settings_or_url.database_schema
    else:
        url = normalise_url(settings_or_url)
        pool_size = 10
    options: dict[str, Any] = {"pool_pre_ping": True}
    translate = schema_options(schema or DEFAULT_SCHEMA)
    if translate:
        options["execution_options"] = {**engine_kwargs.pop("execution_options", {}), **translate}
    if "poolclass" not in engine_kwargs:
        options.update(pool_size=pool_size, max_overflow=5)
    connect_args = {"prepare_threshold": None, **engine_kwargs.pop("connect_args", {})}
    options.update(engine_kwargs, connect_args=connect_args)
    engine = create_engine(url, **options)
    drop_connections_refusing_writes(engine)
    return engine
