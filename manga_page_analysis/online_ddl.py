"""Index changes that do not lock a big table, for the migrations' `upgrade()`
(docs/schema.md, "Online migrations").

A plain `CREATE INDEX` holds a SHARE lock on its table for the whole build:
every lease and every ack of every worker waits behind it, for minutes on a
`crawler_jobs` of millions of rows. `CREATE INDEX CONCURRENTLY` blocks no
write, but cannot run inside a transaction block, so it runs in alembic's
`autocommit_block()`: the migrations applied before it are committed first
(each stays stamped), and a new transaction begins after it. Each statement
stands alone, so this works through PgBouncer in transaction mode too.

A build that was interrupted (the process killed, a statement or pooler
timeout) leaves its index behind, marked invalid (`pg_index.indisvalid`):
no query uses it, yet every write updates it. Its migration was not
stamped, so the next `migrate` runs it again, and `create_index_concurrently`
then drops the invalid index and builds it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from alembic import op


def _schema_and_search_path(conn: Connection) -> tuple[str, str]:
    # Outside `public`, the migrations' transaction names the schema on its
    # `search_path` only (manga_page_analysis.migrations): the statements in
    # autocommit name it themselves, and the next transaction gets it back.
    schema, search_path = conn.execute(
        text("SELECT current_schema(), current_setting('search_path')")
    ).one()
    return str(schema), str(search_path)


def _index_is_valid(conn: Connection, schema: str, name: str) -> bool | None:
    """`None` when there is no such index, else whether it is valid."""
    row = conn.execute(
        text(
            "SELECT i.indisvalid FROM pg_index AS i "
            "JOIN pg_class AS c ON c.oid = i.indexrelid "
            "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :schema AND c.relname = :name"
        ),
        {"schema": schema, "name": name},
    ).first()
    return None if row is None else bool(row[0])


def _restore_search_path(search_path: str) -> None:
    op.get_bind().execute(
        text("SELECT set_config('search_path', :path, true)"), {"path": search_path}
    )


def create_index_concurrently(name: str, table: str, columns: Sequence[Any], **kwargs: Any) -> None:
    """`op.create_index(name, table, columns, **kwargs)`, built concurrently in
    an autocommit step; an invalid index of that name (an interrupted build)
    is dropped and built again, a valid one is kept."""
    schema, search_path = _schema_and_search_path(op.get_bind())
    valid = _index_is_valid(op.get_bind(), schema, name)
    if valid:
        return
    with op.get_context().autocommit_block():
        if valid is False:
            op.drop_index(name, table_name=table, schema=schema, postgresql_concurrently=True)
        op.create_index(name, table, columns, schema=schema, postgresql_concurrently=True, **kwargs)
    _restore_search_path(search_path)


def drop_index_concurrently(name: str, table: str) -> None:
    """`op.drop_index(name)` without the table's exclusive lock, if the index exists."""
    schema, search_path = _schema_and_search_path(op.get_bind())
    with op.get_context().autocommit_block():
        op.drop_index(
            name, table_name=table, schema=schema, postgresql_concurrently=True, if_exists=True
        )
    _restore_search_path(search_path)
