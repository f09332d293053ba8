"""Running and checking alembic migrations from code (the CLI, Django's
`migrate`, the tests). The scripts are the checkout's `alembic/`, or the
installed package's copy in `manga_page_analysis/_alembic/` (see setup.py).

Every table, index, function, trigger and the alembic version table live in
one schema (`DATABASE_SCHEMA`, default `public`). Outside `public`, the
migrations run in one transaction that creates the schema if missing and puts
it alone on that transaction's `search_path` (`set_config(..., true)`: it ends
with the transaction, so nothing is left on a pooled session).

Replicas deployed together may all run `migrate` at once: each first takes the
schema's migrate lock (`migrate_lock`), and the others wait for it, then find the
schema at head and apply nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, MetaData, create_engine, pool, text

from alembic import command
from manga_page_analysis.db import DEFAULT_SCHEMA, quote_identifier, schema_of, schema_options
from manga_page_analysis.errors import ServiceError
from manga_page_analysis.models import NAMING_CONVENTION, Base

VERSION_TABLE = "alembic_version"
MIGRATE_LOCK_KEY = 0x6D706100
"""First key of `migrate`'s advisory lock (the second is the schema's `hashtext`)."""
MIGRATE_LOCK_POLL_SECONDS = 0.25
"""How often a `migrate` waiting for another's lock asks again."""


class SchemaConflict(ServiceError):
    """`migrate` would create a table that exists already and is not this package's."""

    retryable = False


def script_location() -> Path:
    """The folder of `env.py` and `versions/`: the installed package's copy, else the checkout's."""
    package = Path(__file__).resolve().parent
    packaged = package / "_alembic"
    return packaged if (packaged / "env.py").is_file() else package.parent / "alembic"


def in_checkout() -> bool:
    """Whether this code runs from a source checkout (with its Makefile), not an installed wheel."""
    location = script_location()
    return location.name == "alembic" and (location.parent / "Makefile").is_file()


def alembic_config(url: str, schema: str = DEFAULT_SCHEMA) -> Config:
    """Alembic's config for `url` and the tables in `schema`; it leaves logging
    alone and needs no `alembic.ini`."""
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.set_main_option("path_separator", "os")
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    config.attributes["schema"] = schema
    return config


@contextlib.contextmanager
def migrate_lock(engine: Engine, schema: str) -> Iterator[None]:
    """Hold the schema's migrate lock while the block runs: a transaction-level
    advisory lock (so it works through PgBouncer in transaction mode), on a
    connection of its own whose transaction stays open until the block ends.

    Not the migrations' own transaction: a migration that builds an index
    `CONCURRENTLY` commits it halfway (`online_ddl`), which would let the next
    process in. It is asked for with `pg_try_advisory_xact_lock`, one short
    transaction per try, never by waiting inside a statement: a waiting statement
    holds a snapshot, which the holder's `CREATE INDEX CONCURRENTLY` would wait
    for, while the waiter waits for the holder."""
    # Literals, no bound parameters: psycopg's unnamed portal of a bound statement
    # stays open, with its snapshot, until the next statement or the transaction's end.
    schema_literal = "'" + schema.replace("'", "''") + "'"
    try_lock = f"SELECT pg_try_advisory_xact_lock({MIGRATE_LOCK_KEY}, hashtext({schema_literal}))"
    with engine.connect() as conn:
        while True:
            transaction = conn.begin()
            if conn.exec_driver_sql(try_lock).scalar_one():
                break
            transaction.rollback()
            time.sleep(MIGRATE_LOCK_POLL_SECONDS)
        try:
            yield
        finally:
            transaction.rollback()


def version_table_schema(schema: str) -> str | None:
    """Alembic's `version_table_schema`: `None` in `public` (where it always was)."""
    return None if schema == DEFAULT_SCHEMA else schema


def prepare_schema(connection: Connection, schema: str) -> None:
    """In the migrations' transaction: outside `public`, create `schema` if missing
    and make it the transaction's `search_path`; then `SchemaConflict` if the
    version table there holds another project's revision, or if a table the
    migrations would create exists there without an alembic version of ours.

    The caller holds the schema's migrate lock (`migrate_lock`): even `CREATE SCHEMA
    IF NOT EXISTS` races with another process's (a unique violation in `pg_namespace`)."""
    if schema != DEFAULT_SCHEMA:
        connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(schema)}")
        connection.execute(
            text("SELECT set_config('search_path', :path, true)"),
            {"path": quote_identifier(schema)},
        )
    revision = _revision_on(connection, schema)
    if revision is not None:
        if not is_ours(revision):
            raise SchemaConflict(
                f'the alembic version table "{VERSION_TABLE}" in schema "{schema}" holds '
                f'revision "{revision}", which is not one of this package\'s migrations '
                "(another alembic project, such as a host's Flask-Migrate, keeps its "
                "version there); set DATABASE_SCHEMA to a schema of its own, e.g. "
                "DATABASE_SCHEMA=page_analysis"
            )
        return
    existing = connection.execute(
        text(
            "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :schema AND c.relname = ANY(:names) ORDER BY c.relname"
        ),
        {"schema": schema, "names": [table.name for table in Base.metadata.sorted_tables]},
    ).scalars()
    for name in existing:
        raise SchemaConflict(
            f'table "{name}" already exists in schema "{schema}" and is not this '
            "package's (no migration of ours was applied there); set DATABASE_SCHEMA "
            "to a schema of its own, e.g. DATABASE_SCHEMA=page_analysis"
        )


def _our_revisions() -> set[str]:
    return {script.revision for script in ScriptDirectory(str(script_location())).walk_revisions()}


def is_ours(revision: str) -> bool:
    """Whether `revision` is one of this package's migrations (not, say, a host's
    Flask-Migrate revision in the same version table)."""
    return revision in _our_revisions()


def _revision_on(connection: Connection, schema: str) -> str | None:
    # Read directly, not through alembic's MigrationContext, whose set-up logs two
    # INFO lines at every worker start though nothing is migrated.
    table = quote_identifier(VERSION_TABLE)
    if schema != DEFAULT_SCHEMA:
        table = f"{quote_identifier(schema)}.{table}"
    if connection.execute(text("SELECT to_regclass(:table)"), {"table": table}).scalar() is None:
        return None
    revision = connection.execute(text(f"SELECT version_num FROM {table}")).scalar()
    return str(revision) if revision is not None else None


def metadata_in(schema: str) -> MetaData:
    """The models' tables as the migrations build them in `schema` (no schema
    for `public`, as alembic reflects the default one): what autogenerate compares."""
    # The target's own schema lets the models' `ForeignKey("mangas.id")` find their tables.
    target = MetaData(schema=version_table_schema(schema), naming_convention=NAMING_CONVENTION)
    for table in Base.metadata.sorted_tables:
        table.to_metadata(target, schema=version_table_schema(schema))  # type: ignore[arg-type]
    return target


def differences(connection: Connection, schema: str = DEFAULT_SCHEMA) -> list[Any]:
    """Alembic's autogenerate diff between the models and the tables in `schema`
    (types compared; other schemas and the version table ignored): `[]` when they agree."""
    from alembic.autogenerate import compare_metadata

    wanted = version_table_schema(schema)

    def include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
        if type_ == "schema":
            return name == wanted
        return not (type_ == "table" and name == VERSION_TABLE)

    context = MigrationContext.configure(
        connection,
        opts={
            "compare_type": True,
            "include_schemas": wanted is not None,
            "include_name": include_name,
        },
    )
    return list(compare_metadata(context, metadata_in(schema)))


def upgrade_head(url: str, schema: str = DEFAULT_SCHEMA) -> None:
    """Apply every pending migration to the database at `url`, tables in `schema`;
    `SchemaConflict` when a table it would create is someone else's."""
    command.upgrade(alembic_config(url, schema), "head")


def head_revision() -> str | None:
    """The newest revision of the migration scripts."""
    return ScriptDirectory(str(script_location())).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's revision in the engine's schema (`schema_of`); `None` when
    it was never migrated (an empty database)."""
    with engine.connect() as conn:
        return _revision_on(conn, schema_of(engine))


def revisions(engine: Engine) -> tuple[str | None, str | None]:
    """The database's revision and the head revision of the migrations."""
    return current_revision(engine), head_revision()


def migrate(url: str, schema: str = DEFAULT_SCHEMA) -> tuple[str | None, str | None]:
    """Bring the database at `url` to head; returns its revision before and after."""
    engine = create_engine(url, poolclass=pool.NullPool, execution_options=schema_options(schema))
    try:
        before = current_revision(engine)
        upgrade_head(url, schema)
        return before, current_revision(engine)
    finally:
        engine.dispose()
