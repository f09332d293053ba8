"""Why this package's tables are not where an engine looks for them, found out
after a statement failed on it (`schema_errors.not_our_schema`): the CLI's
operator commands, `run-worker` and the admin API say it in one line."""

from __future__ import annotations

from sqlalchemy import Engine

from manga_page_analysis.db import schema_of
from manga_page_analysis.migrations import current_revision, is_ours
from manga_page_analysis.schema_errors import foreign_revision_advice


def schema_problem(engine: Engine, *, command: str | None) -> str | None:
    """Why this package's tables are not in the engine's schema, in one line, or
    `None` when its alembic version says they should be there. On a connection of
    its own: the one that failed may be in an aborted transaction."""
    schema = schema_of(engine)
    revision = current_revision(engine)
    if revision is not None and not is_ours(revision):
        return foreign_revision_advice(schema, revision, command=command)
    if revision is not None:
        return None
    if command is not None:
        return (
            f"schema {schema} has no tables of this package (it was never migrated): run "
            f"{command}, or set DATABASE_SCHEMA to the schema `migrate` put them in"
        )
    return (
        f"schema {schema} has no tables of this package (it was never migrated): run "
        "`manga-analysis migrate`, or build this engine with "
        "execution_options=schema_options(DATABASE_SCHEMA) (from manga_page_analysis.db) "
        "for the schema `migrate` put them in"
    )
