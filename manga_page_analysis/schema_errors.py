"""A table of this package that is not where it was looked for, told as one line
that says what to set: to a host calling the Python API (its engine lacks
`schema_options`), to an operator (the schema holds another project's alembic
revision: set `DATABASE_SCHEMA`), or to whoever reads the admin page.

The driver's own error stays the `__cause__`; only the words change.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Concatenate, Final, ParamSpec, TypeVar

from sqlalchemy.exc import ProgrammingError

from manga_page_analysis.db import Conn
from manga_page_analysis.errors import TablesNotFound

UNDEFINED_TABLE: Final = "42P01"
UNDEFINED_COLUMN: Final = "42703"
"""A host's own table of one of our names (its `pages`) lacks our columns."""

OUR_TABLE_NAMES: Final = frozenset(
    ("crawler_jobs", "mangas", "chapters", "pages", "page_analysis", "queue_leader")
)

EXAMPLE_SCHEMA: Final = "page_analysis"
"""The schema name the advice suggests."""

_RELATION: Final = re.compile(r'relation "([^"]+)" does not exist')

P = ParamSpec("P")
R = TypeVar("R")


def missing_table(error: BaseException) -> str | None:
    """The name (as Postgres gave it, `public.mangas`) of this package's table
    that `error` says does not exist; `None` for any other error."""
    cause = getattr(error, "orig", None) or error
    if getattr(cause, "sqlstate", None) != UNDEFINED_TABLE:
        return None
    match = _RELATION.search(str(cause))
    if match is None or match.group(1).rpartition(".")[2] not in OUR_TABLE_NAMES:
        return None
    return match.group(1)


def not_our_schema(error: BaseException) -> bool:
    """Whether `error` says a table or column of ours is not there (undefined table
    or column): the schema was never migrated, or holds someone else's tables."""
    cause = getattr(error, "orig", None) or error
    sqlstate = getattr(cause, "sqlstate", None)
    return sqlstate == UNDEFINED_COLUMN or missing_table(error) is not None


def host_advice(table: str, schema: str) -> str:
    """What a host calling the Python API on a connection without our tables reads."""
    return (
        f"table {table} does not exist: this package's tables are looked for in schema "
        f"{schema}; if `migrate` put them in a schema of their own (DATABASE_SCHEMA), build "
        "the engine behind this connection or session with "
        "execution_options=schema_options(DATABASE_SCHEMA) (from manga_page_analysis.db), "
        "else run `manga-analysis migrate` first"
    )


def tells_missing_tables(
    function: Callable[Concatenate[Conn, P], R],
) -> Callable[Concatenate[Conn, P], R]:
    """`function(conn, ...)`, with an undefined-table error on one of our tables
    raised as `TablesNotFound` naming `schema_options` (the driver's error as cause)."""

    @functools.wraps(function)
    def wrapper(conn: Conn, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(conn, *args, **kwargs)
        except ProgrammingError as exc:
            table = missing_table(exc)
            if table is None:
                raise
            schema = table.rpartition(".")[0] or "public"
            raise TablesNotFound(host_advice(table, schema)) from exc

    return wrapper


def foreign_revision_advice(schema: str, revision: str, *, command: str | None) -> str:
    """One line for a schema whose alembic version table holds another project's
    revision. `command`: how `migrate` is run here (`None` in a host's process,
    which is also told to give its engine `schema_options`)."""
    found = (
        f"schema {schema} holds another project's alembic revision ({revision}, not one of "
        "this package's migrations: a host's Flask-Migrate, say)"
    )
    if command is not None:
        return (
            f"{found}: set DATABASE_SCHEMA to a schema of its own, e.g. "
            f"DATABASE_SCHEMA={EXAMPLE_SCHEMA} ({command} creates it)"
        )
    return (
        f"{found}: run `migrate` with DATABASE_SCHEMA set to a schema of its own, e.g. "
        f"{EXAMPLE_SCHEMA} (it creates it), and build this engine with "
        f'execution_options=schema_options("{EXAMPLE_SCHEMA}") (from manga_page_analysis.db)'
    )
