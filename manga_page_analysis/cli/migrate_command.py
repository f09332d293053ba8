"""`migrate`: the schema to head, and how the other commands name it when it is behind."""

from __future__ import annotations

import logging
from typing import Final

from sqlalchemy.exc import OperationalError, SQLAlchemyError

from manga_page_analysis.cli.invocation import command_text
from manga_page_analysis.cli.output import first_line, safe_url
from manga_page_analysis.cli.shutdown import (
    EXIT_FAILED,
)
from manga_page_analysis.config import Settings
from manga_page_analysis.db import database_url

logger = logging.getLogger("manga_page_analysis.cli")


def migrate(settings: Settings) -> int:
    from manga_page_analysis.migrations import SchemaConflict
    from manga_page_analysis.migrations import migrate as migrate_database

    url = database_url(settings)
    schema = settings.database_schema
    logger.info("applying migrations to %s (schema %s)", safe_url(url), schema)
    # Alembic's own INFO lines say little here; the line printed below says what happened.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        before, after = migrate_database(url, schema)
    except SchemaConflict as exc:
        logger.error("migrate failed: %s", exc)
        return EXIT_FAILED
    except SQLAlchemyError as exc:
        unreachable = "cannot reach the database: " if isinstance(exc, OperationalError) else ""
        cause = getattr(exc, "orig", None) or exc
        # DDL may outlast a pooler's timeouts or need a session; said only when
        # the failure can be the pooler's (not a missing database, a bad password).
        hint = (
            " (migrations need a direct connection: if DATABASE_URL goes through "
            "PgBouncer, run `migrate` with DATABASE_URL set to Postgres itself)"
            if could_be_the_pooler(cause)
            else ""
        )
        logger.error("migrate failed: %s%s%s", unreachable, first_line(cause), hint)
        return EXIT_FAILED
    if before == after:
        print(f"database at revision {after} (head): nothing to do")
    else:
        print(f"database migrated from {revision_text(before)} to revision {after} (head)")
    return 0


def revision_text(revision: str | None) -> str:
    """`revision 0004`, or `an empty database` for a database never migrated."""
    return f"revision {revision}" if revision else "an empty database"


def migrate_command_text() -> str:
    """How to run `migrate` here: `make migrate` in a checkout, else the command
    under the name it was run by (`manga-analysis migrate`)."""
    return command_text("migrate", make_target="migrate")


_NOT_THE_POOLER: Final = (
    "does not exist",
    "authentication failed",
    "no password supplied",
    "connection refused",
    "could not translate host name",
    "name or service not known",
    "no route to host",
    "already exists",
    "permission denied",
)


def could_be_the_pooler(error: BaseException) -> bool:
    """Whether a `migrate` failure can come from a pooler in between (a dropped
    server connection, a timeout, a refused feature), not from the database,
    the credentials or the address themselves."""
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate and (sqlstate.startswith(("28", "3D", "42", "23")) or sqlstate == "42501"):
        return False
    message = str(error).lower()
    if "prepared statement" in message:  # one prepared on another server connection
        return True
    return not any(phrase in message for phrase in _NOT_THE_POOLER)
