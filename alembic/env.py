"""Alembic environment. The URL comes from `Settings` unless a caller hands in
a connection (`config.attributes["connection"]`) or a URL
(`sqlalchemy.url`), as the CLI and the tests do; the schema likewise
(`config.attributes["schema"]`, else `DATABASE_SCHEMA`).

All pending migrations run in one transaction (but the steps that build an index
`CONCURRENTLY`): outside `public` it is the transaction whose `search_path` names
the schema (manga_page_analysis.migrations), and the schema's migrate lock is held
on a connection of its own for the whole run (`migrate_lock`)."""

from __future__ import annotations

from logging.config import fileConfig

from sqlalchemy import Connection, pool

from alembic import context
from manga_page_analysis.config import Settings
from manga_page_analysis.db import database_url, make_engine
from manga_page_analysis.migrations import (
    metadata_in,
    migrate_lock,
    prepare_schema,
    version_table_schema,
)

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

schema: str = config.attributes.get("schema") or Settings().database_schema
target_metadata = metadata_in(schema)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        version_table_schema=version_table_schema(schema),
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        prepare_schema(connection, schema)
        context.run_migrations()


def run_migrations_offline() -> None:
    url = config.get_main_option("sqlalchemy.url") or database_url(Settings())
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        version_table_schema=version_table_schema(schema),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        with migrate_lock(connection.engine, schema):
            _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or database_url(Settings())
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        with migrate_lock(engine, schema), engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
